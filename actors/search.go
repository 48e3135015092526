package actors

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/search/vector"
)

// SearchDeps configures tool search. Zero values are the embedded defaults: the built-in hashed embedder, the
// in-process vector index and the taxonomy that ships with the product.
type SearchDeps struct {
	Embedder embed.Embedder
	Index    vector.Index
	Taxonomy *classify.Taxonomy
	// Skills, when set, is also told the recomputed skill vectors (the built-in classifier's space).
	Skills *classify.SkillSpace
}

// newSearcher builds the searcher System.Search and the indexer share (sd may be nil: the embedded defaults).
func newSearcher(ctx context.Context, sd *SearchDeps, logger *slog.Logger) (*toolsearch.Searcher, error) {
	cfg := toolsearch.Config{Logger: logger}
	if sd != nil {
		cfg.Embedder, cfg.Index, cfg.Taxonomy = sd.Embedder, sd.Index, sd.Taxonomy
	}
	return toolsearch.New(ctx, cfg)
}

// classifierSkills is the classifier's skill space the indexer also moves (nil when there is none).
func (sd *SearchDeps) classifierSkills() *classify.SkillSpace {
	if sd == nil {
		return nil
	}
	return sd.Skills
}

// Search strategies.
const (
	StrategyHierarchical = gateway.StrategyHierarchical
	StrategyDirect       = gateway.StrategyDirect
)

// The search vocabulary is gateway's (the use-case layer the front ends call).
type (
	SearchRequest  = gateway.SearchRequest
	SearchHit      = gateway.SearchHit
	MatchedSkill   = gateway.MatchedSkill
	SearchResponse = gateway.SearchResponse
)

// Search ranks the tools of the servers that execute calls (CONNECTED or DEGRADED: BR-007, AG-US2 AC3),
// optionally restricted to some servers, by hybrid relevance; toolsearch.Searcher.Search has the ranking rules.
// It reads the engine and the routing table only: no actor is asked.
func (s *System) Search(ctx context.Context, r SearchRequest) (SearchResponse, error) {
	start := time.Now()
	defer func() { s.deps.Metrics.Search(time.Since(start)) }()
	rt := s.Routes()
	var allowed []string
	if r.IncludeExternal {
		filter := map[string]bool{}
		for _, n := range r.ServerFilter {
			filter[n] = true
		}
		for _, srv := range rt.Servers() {
			if callable(srv.Status) && (len(filter) == 0 || filter[srv.Name]) {
				allowed = append(allowed, srv.ID)
			}
		}
	}
	req := toolsearch.Request{Query: r.Query, SkillsOnly: r.ItemType == "skill",
		ServerIDs: allowed, Limit: r.Limit, SkillThreshold: r.SkillThreshold, ToolThreshold: r.ToolThreshold, Strategy: r.Strategy}
	if r.Scope.Restricted() {
		req.Allow = func(id int64) bool {
			e, ok := rt.ToolByID(id)
			return ok && rt.Has(r.Scope, e)
		}
	}
	res, err := s.searcher.Search(ctx, searchCatalog{rt: rt, scope: r.Scope}, req)
	resp := SearchResponse{MatchedSkills: res.MatchedSkills, StrategyUsed: res.Strategy, Fallback: res.Fallback,
		ServersSearched: res.ServersSearched, ToolsSearched: res.ToolsSearched}
	if res.Tools != nil {
		resp.Tools = make([]SearchHit, len(res.Tools))
		for i, h := range res.Tools {
			e, _ := rt.ToolByID(h.ID) // the catalog answered it from rt: it is there
			srv, _ := rt.Server(e.SourceServerID)
			resp.Tools[i] = SearchHit{Tool: e, Score: h.Score, Server: srv, Lexical: h.Lexical, Semantic: h.Semantic}
		}
	}
	return resp, err
}

// searchCatalog is the routing table as toolsearch reads it.
type searchCatalog struct {
	rt    *routing.RouteTable
	scope routing.Scope
}

// Tool implements toolsearch.Catalog.
func (c searchCatalog) Tool(id int64) (toolsearch.Tool, bool) {
	e, ok := c.rt.ToolByID(id)
	if !ok || !c.rt.Has(c.scope, e) {
		return toolsearch.Tool{}, false
	}
	return toolsearch.Tool{Name: e.Name, ServerID: e.SourceServerID}, true
}

// Count implements toolsearch.Catalog.
func (c searchCatalog) Count(serverIDs []string) (tools int, bySkill map[string]int) {
	servers := make(map[string]bool, len(serverIDs))
	for _, id := range serverIDs {
		servers[id] = true
	}
	bySkill = map[string]int{}
	all := c.rt.Entries()
	for i := range all {
		if e := &all[i]; servers[e.SourceServerID] && c.rt.Has(c.scope, e) {
			tools++
			for _, sk := range e.SkillIDs {
				bySkill[sk]++
			}
		}
	}
	return tools, bySkill
}

var _ toolsearch.Catalog = searchCatalog{}

// SkillInfo is a skill as GET /api/v1/skills lists it.
type SkillInfo struct {
	classify.Skill
	ToolCount int
	Embedding []float32
}

// Skills lists the taxonomy with how many tools each skill has and its current embedding.
func (s *System) Skills() []SkillInfo {
	count := map[string]int{}
	all := s.Routes().Entries()
	for i := range all {
		for _, sk := range all[i].SkillIDs {
			count[sk]++
		}
	}
	space := s.searcher.SkillSpace()
	tax := space.Taxonomy()
	out := make([]SkillInfo, len(tax.Skills))
	for i, sk := range tax.Skills {
		v, _ := space.SkillVector(sk.ID)
		out[i] = SkillInfo{Skill: sk, ToolCount: count[sk.ID], Embedding: v}
	}
	return out
}

// VectorIndexHealth reports the vector index for GET /health: "in_process" for the embedded index, "ok" when
// Qdrant answers a count.
func (s *System) VectorIndexHealth(ctx context.Context) (string, error) {
	idx := s.searcher.Index()
	if _, ok := idx.(*vector.Memory); ok {
		return "in_process", nil
	}
	if _, err := idx.Count(ctx); err != nil {
		return "", fmt.Errorf("vector index: %w", err)
	}
	return "ok", nil
}
