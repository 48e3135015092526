package gateway

import (
	"context"

	"github.com/mcpgw/aggregator/actors/routing"
)

// Resolve decides what Call would decide before it calls: the route (profile, scope, name and server; a failure
// is the *RouteError Call would return) and the access policy (a *DeniedError). A task-augmented call resolves
// first, so that a call that goes nowhere or is denied is answered at once instead of as a failed task.
func (g *Gateway) Resolve(ctx context.Context, req CallRequest) (routing.Route, error) {
	rt := g.actors.Routes()
	sc, err := scope(rt, req.Profile, req.Within)
	if err != nil {
		return routing.Route{}, err
	}
	route, err := rt.ResolveIn(sc, req.Name, req.ServerID)
	if err != nil {
		return routing.Route{}, &RouteError{Err: err, Name: req.Name, ServerID: req.ServerID, table: rt}
	}
	if g.policy != nil {
		if err := g.policy.AllowCall(ctx, PolicyCall{Caller: req.Caller, Table: rt, Route: route, Arguments: req.Arguments}); err != nil {
			return routing.Route{}, err
		}
	}
	return route, nil
}
