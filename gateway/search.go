package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
)

// Search ranks the tools of the callable servers for r's query (hierarchical or direct), within the profile r
// asked for and what the caller may see (within: see CallRequest.Within). It answers the request as searched
// (with its Scope set) and the ranked tools.
//
// Under an access policy that hides tools from caller, the search is made over the tools caller may see
// (SearchRequest.Visible): the engine chooses its candidates among them, so the answer holds up to r.Limit visible
// tools whenever the catalogue has that many that match, and its counts (tools searched, servers searched, a
// matched skill's tools) count only visible tools. A hidden tool is never answered, whatever Actors did with
// Visible.
func (g *Gateway) Search(ctx context.Context, caller auth.Identity, r SearchRequest, within routing.Scope) (SearchRequest, SearchResponse, error) {
	rt := g.actors.Routes()
	sc, err := rt.ScopeFor(r.Profile, within)
	if err != nil {
		return r, SearchResponse{}, err
	}
	r.Scope = sc
	r.Visible = g.visible(ctx, caller)
	res, err := g.actors.Search(ctx, r)
	if err != nil {
		return r, SearchResponse{}, fmt.Errorf("search: %w", err)
	}
	if r.Visible != nil {
		hits := res.Tools[:0:0]
		for _, h := range res.Tools {
			if h.Tool != nil && r.Visible(rt, h.Tool) {
				hits = append(hits, h)
			}
		}
		res.Tools = hits
	}
	return r, res, nil
}

// visible is what the access policy lets caller see, for one search: each tool is decided once (a search asks
// for the tools it counts, its candidates and its answer), whichever goroutine asks. nil when the policy hides
// nothing (no rule).
func (g *Gateway) visible(ctx context.Context, caller auth.Identity) func(*routing.RouteTable, *routing.ToolEntry) bool {
	l, ok := g.policy.(Lister)
	if !ok {
		return nil
	}
	if r, ok := l.(*Rules); ok && r.Source.AccessPolicy().Empty() {
		return nil
	}
	var mu sync.Mutex
	seen := map[*routing.ToolEntry]bool{}
	return func(rt *routing.RouteTable, e *routing.ToolEntry) bool {
		mu.Lock()
		v, ok := seen[e]
		mu.Unlock()
		if ok {
			return v
		}
		v = l.Listed(ctx, caller, rt, e)
		mu.Lock()
		seen[e] = v
		mu.Unlock()
		return v
	}
}
