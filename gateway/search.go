package gateway

import (
	"context"
	"fmt"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
)

// Search ranks the tools of the callable servers for r's query (hierarchical or direct), within the profile r
// asked for and what the caller may see (within: see CallRequest.Within). It answers the request as searched
// (with its Scope set) and the ranked tools, without those the access policy hides from caller (so an answer may
// hold fewer than r.Limit tools).
func (g *Gateway) Search(ctx context.Context, caller auth.Identity, r SearchRequest, within routing.Scope) (SearchRequest, SearchResponse, error) {
	rt := g.actors.Routes()
	sc, err := rt.ScopeFor(r.Profile, within)
	if err != nil {
		return r, SearchResponse{}, err
	}
	r.Scope = sc
	res, err := g.actors.Search(ctx, r)
	if err != nil {
		return r, SearchResponse{}, fmt.Errorf("search: %w", err)
	}
	if keep := g.ListFilter(ctx, caller, rt); keep != nil {
		hits := res.Tools[:0:0]
		for _, h := range res.Tools {
			if h.Tool != nil && keep(h.Tool) {
				hits = append(hits, h)
			}
		}
		res.Tools = hits
	}
	return r, res, nil
}
