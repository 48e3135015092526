package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/served"
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

// Search ranks the tools of the servers that execute calls, by hybrid relevance (served.Search has the rules). It
// reads the engine and the routing table only: no actor is asked.
func (s *System) Search(ctx context.Context, r SearchRequest) (SearchResponse, error) {
	start := time.Now()
	defer func() { s.deps.Metrics.Search(time.Since(start)) }()
	return served.Search(ctx, s.searcher, s.Routes(), r)
}

// SkillInfo is a skill as GET /api/v1/skills lists it.
type SkillInfo = served.SkillInfo

// Skills lists the taxonomy with how many tools each skill has and its current embedding.
func (s *System) Skills() []SkillInfo { return served.Skills(s.searcher, s.Routes()) }

// VectorIndexHealth reports the vector index for GET /health: "in_process" for the embedded index, "ok" when
// Qdrant answers a count.
func (s *System) VectorIndexHealth(ctx context.Context) (string, error) {
	return served.IndexHealth(ctx, s.searcher.Index())
}
