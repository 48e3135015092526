package actors

import "github.com/mcpgw/aggregator/gateway"

// The System is the actor system as the use-case layer sees it: gateway.Actors (routes, calls, registrations,
// searches) and gateway.ObjectCaller (a call answered with the go-sdk result object on the node that ran it). The
// shared words (RegisterRequest, SearchRequest, the sentinel errors) are gateway's, re-exported in control.go,
// search.go and curation_api.go under their old names.
var (
	_ gateway.Actors       = (*System)(nil)
	_ gateway.ObjectCaller = (*System)(nil)
)
