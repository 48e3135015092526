// Package server is the server actor kind of the aggregator's actor tree: one actor per external MCP server, owning
// its go-sdk client session (opened with backend.Dial), the lifecycle state machine, the consecutive-failure
// counter, the health timer, the reconnect schedule, the calls in flight and the relay of the backend's requests to
// their callers; its store writes run in order off its mailbox (storewriter.go), and in a cluster its lease fences
// them (server_lease.go). Its children are the proxy actors, one per upstream session of the per-server endpoint
// (proxy*.go), and the callers' own sessions of a per_user server (proxy_user.go).
//
// The package imports nothing of package actors: the placement actor there spawns server actors with Props and a
// Deps built once at start; proxy sessions ask the node through Node; the few local messages the server actor
// exchanges with the router, discovery, classifier and placement are in actors/internal/msg.
package server
