// Package routing holds the routing table and its vocabulary: the immutable snapshot of every server, tool,
// prompt and resource that the router actor publishes and the call path reads without locks (RouteTable), the
// entries it holds (ServerEntry, ToolEntry, PromptEntry, ResourceEntry), how a name resolves to a server (Route,
// the aliases, the rewritten resource URIs), the profiles' scopes, the curation the table applies to a server's
// stored tools (filters, overrides, pins), and the errors its lookups answer (ErrToolNotFound,
// AmbiguousToolError, UnavailableError, the profile errors).
//
// It exists so that the front ends (REST, /mcp, the console, search) can speak of routes, servers and error codes
// without importing the actor system: it imports nothing of package actors nor protoactor. The router actor in
// package actors builds the tables (BuildRouteTable) from the store and its events, and tells the other readers of
// the served tools what changed in a server's with a versioned ServedDelta (DiffServed); Versions is the board of
// those versions, issued and published by the router, acknowledged by the search indexer (searchable).
package routing
