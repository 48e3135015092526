// Package served ties tool search to the served catalogue: Index keeps a search engine equal to the tools the
// router serves by applying its versioned deltas (routing.ServedDelta), and Search answers a search request over
// the routing table. It is the logic of the indexer actor and of System.Search without the actor: the actors
// package receives the messages, calls this package and sends the results (docs/architecture.md, "One writer").
//
// It imports nothing of package actors; everything here runs on the caller's goroutine and needs no mailbox.
package served
