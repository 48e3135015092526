// Package actors is the aggregator's actor tree (protoactor-go): one actor per external MCP server, owning its
// session, and the node-wide actors around them, each the one writer of what it holds. The front ends (REST, /mcp,
// the per-server proxy, the console) only ask these actors, with a deadline, through Control (which System
// implements); they never touch a session.
//
// The actor kinds:
//   - server (package server; server.go here keeps the names the front ends use): one per external server,
//     activated where the lookup places it. It owns the go-sdk client session, the lifecycle state machine
//     (package lifecycle), the consecutive-failure counter, the health timer, the reconnect schedule and the
//     calls in flight; its store writes run in order off its mailbox (lifecycle.Writer), and in a cluster its
//     lease fences them. The placement spawns it with server.Props and a server.Deps built at start.
//   - placement (placement.go): hosts this node's server actors, activates those the lookup (lookup.go) places
//     here, supervises them with the daemon's restart backoff and stops them with the node.
//   - registry (registry.go): carries out the admin's registrations, updates and deletes: writes the store
//     (registry.Writer), publishes what changed, has the server activated where it is placed.
//   - router (router.go): the single writer of the routing table (package routing), published as an immutable
//     snapshot that the call path reads without locks; it orders the loads and events, routing.Loader reads,
//     routing.Builder applies, routing.Loads schedules the reads.
//   - discovery (discovery.go): schedules the discovery of a connected server's tools, prompts and resources
//     (coalesced and spaced per server and kind); the work (list, pin, store, publish) is a discovery.Worker it
//     gets at construction with the few functions it needs, not the System.
//   - indexer (indexer.go): keeps the search engine equal to the served tools by handing the router's deltas to a
//     search/served.Index (documents, payloads, skill centroids) and acknowledging each version it applied
//     (routing.Versions, the board served.go reads for System.AwaitSearchable).
//   - classifier (classifier.go): classifies tools into skills in the background; what waits, runs, failed, is
//     retried and is announced is decided by a search/classify.Queue, one tool's work is a classify.Runner; the
//     actor runs them and the timers.
//   - proxy and per-user sessions (package server, children of a server actor): one per upstream session of the
//     per-server proxy (/mcp/servers/{name}), one per caller of a per_user server; System.OpenProxySession
//     (server.go) opens the former.
//
// Around them: search.go answers System.Search and Skills through search/served, reading the engine and the routing
// table only; call.go is the call path (a caller asks the server actor the route names, with no other actor in
// between); system.go starts and stops the tree (System); curation_api.go hands the curation changes to a
// registry.Curator; feed.go, reconcile.go, handover.go, lookup.go and cluster.go wire package placement, which keeps
// the processes that share one store in agreement (leases and the verdicts on them, events, reconciliation passes,
// hand-over, the cluster's identity lookup and configuration): here only the messages and the carrying out remain. The
// sub-packages import nothing of actors: server (the server actor kind and its proxy and per-user children;
// internal/msg holds the local messages it shares with the tree), backend (opens one guarded client session to a
// backend), placement (where each server's actor lives, the reconciler, a server actor's refusals), routing (the route
// table and its vocabulary, and the router's reads and catalogue state), registry (the store sequencing of the admin's
// writes and curation changes), lifecycle (the state machine, the ordered store writes, health verdicts, the calls
// gate, the start's wait), settings (Config), discovery (what a listing becomes in the store and on the event stream),
// curation (the curation rules), membership (the etcd cluster membership), msglimit, notifyorder and floodguard (what a
// backend's messages may cost and in what order they arrive), requestid (the request id in a context).
package actors
