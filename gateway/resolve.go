package gateway

import (
	"github.com/mcpgw/aggregator/actors/routing"
)

// Resolve finds the route a call would take (its profile, scope, name and server), without calling: a failure is
// the *RouteError Call would return. A task-augmented call resolves first, so that a name that goes nowhere is
// answered at once instead of as a failed task.
func (g *Gateway) Resolve(req CallRequest) (routing.Route, error) {
	rt := g.actors.Routes()
	sc, err := scope(rt, req.Profile, req.Within)
	if err != nil {
		return routing.Route{}, err
	}
	route, err := rt.ResolveIn(sc, req.Name, req.ServerID)
	if err != nil {
		return routing.Route{}, &RouteError{Err: err, Name: req.Name, ServerID: req.ServerID, table: rt}
	}
	return route, nil
}
