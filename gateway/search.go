package gateway

import (
	"context"
	"fmt"

	"github.com/mcpgw/aggregator/actors/routing"
)

// Search ranks the tools of the callable servers for r's query (hierarchical or direct), within the profile r
// asked for and what the caller may see (within: see CallRequest.Within). It answers the request as searched
// (with its Scope set) and the ranked tools.
func (g *Gateway) Search(ctx context.Context, r SearchRequest, within routing.Scope) (SearchRequest, SearchResponse, error) {
	sc, err := g.actors.Routes().ScopeFor(r.Profile, within)
	if err != nil {
		return r, SearchResponse{}, err
	}
	r.Scope = sc
	res, err := g.actors.Search(ctx, r)
	if err != nil {
		return r, SearchResponse{}, fmt.Errorf("search: %w", err)
	}
	return r, res, nil
}
