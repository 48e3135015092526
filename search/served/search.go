package served

import (
	"context"
	"fmt"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/search/vector"
)

// Search ranks the tools of the servers of rt that execute calls (CONNECTED or DEGRADED: BR-007, AG-US2 AC3),
// optionally restricted to some servers by name and to the request's scope, by hybrid relevance over engine;
// toolsearch.Searcher.Search has the ranking rules. It reads the engine and the table only.
func Search(ctx context.Context, engine *toolsearch.Searcher, rt *routing.RouteTable, r gateway.SearchRequest) (gateway.SearchResponse, error) {
	res, err := engine.Search(ctx, catalogOf(rt, r), Request(rt, r))
	resp := gateway.SearchResponse{MatchedSkills: res.MatchedSkills, StrategyUsed: res.Strategy, Fallback: res.Fallback,
		ServersSearched: res.ServersSearched, ToolsSearched: res.ToolsSearched}
	if res.Tools != nil {
		resp.Tools = make([]gateway.SearchHit, len(res.Tools))
		for i, h := range res.Tools {
			e, _ := rt.ToolByID(h.ID) // the catalog answered it from rt: it is there
			srv, _ := rt.Server(e.SourceServerID)
			resp.Tools[i] = gateway.SearchHit{Tool: e, Score: h.Score, Server: srv, Lexical: h.Lexical, Semantic: h.Semantic}
		}
	}
	return resp, err
}

// Request is the engine's request for a search request over rt: the callable servers (filtered by name when the
// request names some; none when external tools are not included) and, for a restricted scope or a request with a
// Visible filter (the access policy), a filter of the tools in it. Under a Visible filter a server that has tools
// but none the caller may see is not searched (nor counted as searched).
func Request(rt *routing.RouteTable, r gateway.SearchRequest) toolsearch.Request {
	var allowed []string
	if r.IncludeExternal {
		filter := map[string]bool{}
		for _, n := range r.ServerFilter {
			filter[n] = true
		}
		for _, srv := range rt.Servers() {
			if routing.CallableStatus(srv.Status) && (len(filter) == 0 || filter[srv.Name]) {
				allowed = append(allowed, srv.ID)
			}
		}
		if r.Visible != nil {
			allowed = withVisibleTools(rt, r, allowed)
		}
	}
	req := toolsearch.Request{Query: r.Query, SkillsOnly: r.ItemType == "skill",
		ServerIDs: allowed, Limit: r.Limit, SkillThreshold: r.SkillThreshold, ToolThreshold: r.ToolThreshold, Strategy: r.Strategy}
	if r.Scope.Restricted() || r.Visible != nil {
		req.Allow = func(id int64) bool {
			e, ok := rt.ToolByID(id)
			return ok && rt.Has(r.Scope, e) && (r.Visible == nil || r.Visible(rt, e))
		}
	}
	return req
}

// withVisibleTools leaves out of servers those that have tools in r's scope but none r.Visible accepts, as if
// they did not exist (an empty server stays).
func withVisibleTools(rt *routing.RouteTable, r gateway.SearchRequest, servers []string) []string {
	state := make(map[string]int, len(servers)) // 1: has a tool in scope, none visible yet; 2: has a visible one
	for _, id := range servers {
		state[id] = 0
	}
	all := rt.Entries()
	for i := range all {
		e := &all[i]
		st, ok := state[e.SourceServerID]
		if !ok || st == 2 || !rt.Has(r.Scope, e) {
			continue
		}
		if r.Visible(rt, e) {
			state[e.SourceServerID] = 2
		} else {
			state[e.SourceServerID] = 1
		}
	}
	out := servers[:0]
	for _, id := range servers {
		if state[id] != 1 {
			out = append(out, id)
		}
	}
	return out
}

// Catalog is a routing table, seen through a scope and, when Visible is set, through what a caller may see (the
// access policy), as toolsearch reads it.
type Catalog struct {
	Table   *routing.RouteTable
	Scope   routing.Scope
	Visible func(rt *routing.RouteTable, e *routing.ToolEntry) bool
}

// catalogOf is the catalog a search request reads of rt.
func catalogOf(rt *routing.RouteTable, r gateway.SearchRequest) Catalog {
	return Catalog{Table: rt, Scope: r.Scope, Visible: r.Visible}
}

// has reports whether the catalog holds e: in its scope and visible.
func (c Catalog) has(e *routing.ToolEntry) bool {
	return c.Table.Has(c.Scope, e) && (c.Visible == nil || c.Visible(c.Table, e))
}

// Tool implements toolsearch.Catalog.
func (c Catalog) Tool(id int64) (toolsearch.Tool, bool) {
	e, ok := c.Table.ToolByID(id)
	if !ok || !c.has(e) {
		return toolsearch.Tool{}, false
	}
	return toolsearch.Tool{Name: e.Name, ServerID: e.SourceServerID}, true
}

// Count implements toolsearch.Catalog.
func (c Catalog) Count(serverIDs []string) (tools int, bySkill map[string]int) {
	servers := make(map[string]bool, len(serverIDs))
	for _, id := range serverIDs {
		servers[id] = true
	}
	bySkill = map[string]int{}
	all := c.Table.Entries()
	for i := range all {
		if e := &all[i]; servers[e.SourceServerID] && c.has(e) {
			tools++
			for _, sk := range e.SkillIDs {
				bySkill[sk]++
			}
		}
	}
	return tools, bySkill
}

var _ toolsearch.Catalog = Catalog{}

// SkillInfo is a skill as GET /api/v1/skills lists it.
type SkillInfo struct {
	classify.Skill
	ToolCount int
	Embedding []float32
}

// Skills lists the engine's taxonomy with how many tools of rt each skill has and its current embedding.
func Skills(engine *toolsearch.Searcher, rt *routing.RouteTable) []SkillInfo {
	count := map[string]int{}
	all := rt.Entries()
	for i := range all {
		for _, sk := range all[i].SkillIDs {
			count[sk]++
		}
	}
	space := engine.SkillSpace()
	tax := space.Taxonomy()
	out := make([]SkillInfo, len(tax.Skills))
	for i, sk := range tax.Skills {
		v, _ := space.SkillVector(sk.ID)
		out[i] = SkillInfo{Skill: sk, ToolCount: count[sk.ID], Embedding: v}
	}
	return out
}

// IndexHealth reports a vector index for GET /health: "in_process" for the embedded index, "ok" when another
// (Qdrant) answers a count.
func IndexHealth(ctx context.Context, idx vector.Index) (string, error) {
	if _, ok := idx.(*vector.Memory); ok {
		return "in_process", nil
	}
	if _, err := idx.Count(ctx); err != nil {
		return "", fmt.Errorf("vector index: %w", err)
	}
	return "ok", nil
}
