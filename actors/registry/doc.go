// Package registry is what the admin's writes do to the store, in order: a registration (the row a validated
// request becomes, the server limit, the idempotency key), an update, a delete after the server's actor has let it
// go (Writer); and the curation changes, each checked before it is written (an exposed name must be free, a
// profile must bind nobody, turning pinning on takes the baseline) and announced after it (Curator).
//
// It exists so that the registry actor and System in package actors keep only the scheduling (which goroutine, who
// is answered, which event is published) while the sequencing and the checks live in one place with their own
// tests. It imports nothing of package actors nor protoactor; what it needs of the running system (announcing a
// change, who owns a name now, a rediscovery) it gets as functions.
package registry
