package actors

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
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

// searcher is what a search reads: the engine, the embedder and the skill space. It is built once at start and
// safe for concurrent use; the indexer actor is its only writer.
type searcher struct {
	eng   *search.Engine
	emb   embed.Embedder
	idx   vector.Index
	vec   *vectorAdapter
	space *classify.SkillSpace
	extra *classify.SkillSpace
}

func newSearcher(ctx context.Context, sd *SearchDeps) (*searcher, error) {
	if sd == nil {
		sd = &SearchDeps{}
	}
	emb, idx, tax := sd.Embedder, sd.Index, sd.Taxonomy
	if emb == nil {
		emb = embed.NewHashed(0)
	}
	if idx == nil {
		idx = vector.NewMemory()
	}
	if tax == nil {
		tax = classify.DefaultTaxonomy()
	}
	rebuild, err := idx.Ensure(ctx, vector.Spec{Dimension: emb.Dimension(), Model: emb.Model()})
	if err != nil {
		return nil, fmt.Errorf("prepare the vector index: %w", err)
	}
	_ = rebuild // every start indexes every stored tool anyway: the lexical side lives in memory
	va := &vectorAdapter{idx: idx}
	eng, err := search.New(emb, va, search.Options{})
	if err != nil {
		return nil, fmt.Errorf("search engine: %w", err)
	}
	space, err := classify.NewSkillSpace(ctx, emb, tax)
	if err != nil {
		return nil, err
	}
	return &searcher{eng: eng, emb: emb, idx: idx, vec: va, space: space, extra: sd.Skills}, nil
}

// vectorAdapter lets the engine use a vector.Index (ids and scores map one to one; the payload travels as is). It
// also hands the vectors the engine computed to the indexer (see capture), so that a tool is embedded once: an
// external embedding API is paid per text.
type vectorAdapter struct {
	idx      vector.Index
	mu       sync.Mutex
	captured map[int64][]float32
}

// capture starts recording the vectors of the next upserts; take returns them and stops.
func (a *vectorAdapter) capture() {
	a.mu.Lock()
	a.captured = map[int64][]float32{}
	a.mu.Unlock()
}

func (a *vectorAdapter) take() map[int64][]float32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.captured
	a.captured = nil
	return out
}

func (a *vectorAdapter) Upsert(ctx context.Context, points []search.VectorPoint) error {
	a.mu.Lock()
	if a.captured != nil {
		for _, p := range points {
			a.captured[p.ID] = p.Vector
		}
	}
	a.mu.Unlock()
	out := make([]vector.Point, len(points))
	for i, p := range points {
		pl, _ := p.Payload.(vector.Payload)
		pl.ToolName, pl.OriginalName, pl.SourceServerID = p.Name, p.OriginalName, p.ServerID
		out[i] = vector.Point{ID: uint64(p.ID), Vector: p.Vector, Payload: pl}
	}
	return a.idx.Upsert(ctx, out)
}

func (a *vectorAdapter) Delete(ctx context.Context, ids []int64) error {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return a.idx.Delete(ctx, out)
}

func (a *vectorAdapter) Search(ctx context.Context, v []float32, f search.VectorFilter, limit int) ([]search.VectorHit, error) {
	hits, err := a.idx.Search(ctx, v, vector.Filter{ServerIDs: f.ServerIDs}, limit)
	if err != nil {
		return nil, err
	}
	out := make([]search.VectorHit, len(hits))
	for i, h := range hits {
		out[i] = search.VectorHit{ID: int64(h.ID), Score: float64(h.Score)}
	}
	return out, nil
}

// Search strategies.
const (
	StrategyHierarchical = "hierarchical"
	StrategyDirect       = "direct"
)

// SearchRequest is a validated POST /api/v1/search (and search_aggregated_tools).
type SearchRequest struct {
	Query           string
	ItemType        string // "tool" (default) or "skill"
	IncludeExternal bool
	ServerFilter    []string // server names
	Limit           int
	SkillThreshold  float64
	ToolThreshold   float64
	IncludeSchemas  bool
	Strategy        string
}

// SearchHit is one tool in a search answer.
type SearchHit struct {
	Tool     *ToolEntry
	Score    float64
	Server   ServerEntry
	Lexical  float64
	Semantic float64
}

// MatchedSkill is a skill the query matched.
type MatchedSkill struct {
	Skill     classify.Skill
	Score     float64
	ToolCount int
}

// SearchResponse is the ranked answer.
type SearchResponse struct {
	Tools           []SearchHit
	MatchedSkills   []MatchedSkill
	StrategyUsed    string
	Fallback        bool // hierarchical found no tool within the matched skills and searched all tools
	ServersSearched int
	ToolsSearched   int
}

// maxMatchedSkills bounds how many skills a hierarchical search narrows to.
const maxMatchedSkills = 3

// Search ranks the tools of the servers that execute calls (CONNECTED or DEGRADED: BR-007, AG-US2 AC3),
// optionally restricted to some servers, by hybrid relevance. The hierarchical strategy first matches skills and
// ranks the tools within them, falling back to all tools when that finds nothing; direct ranks all tools. It reads
// the engine and the routing table only: no actor is asked.
func (s *System) Search(ctx context.Context, r SearchRequest) (SearchResponse, error) {
	start := time.Now()
	defer func() { s.d.Metrics.Search(time.Since(start)) }()
	resp := SearchResponse{StrategyUsed: r.Strategy}
	if resp.StrategyUsed == "" {
		resp.StrategyUsed = StrategyHierarchical
	}
	rt := s.Routes()
	filter := map[string]bool{}
	for _, n := range r.ServerFilter {
		filter[n] = true
	}
	var allowed []string
	if r.IncludeExternal {
		for _, srv := range rt.Servers() {
			if callable(srv.Status) && (len(filter) == 0 || filter[srv.Name]) {
				allowed = append(allowed, srv.ID)
			}
		}
	}
	resp.ServersSearched = len(allowed)
	allowedSet := map[string]bool{}
	for _, id := range allowed {
		allowedSet[id] = true
	}
	skillCount := map[string]int{}
	for _, e := range rt.ordered { // allowedSet holds only callable servers: no need to build rt.Callable()
		if allowedSet[e.SourceServerID] {
			resp.ToolsSearched++
			for _, sk := range e.SkillIDs {
				skillCount[sk]++
			}
		}
	}

	needSkills := r.ItemType == "skill" || resp.StrategyUsed == StrategyHierarchical
	if needSkills {
		vecs, err := s.searcher.emb.Embed(ctx, []string{r.Query})
		if err == nil && len(vecs) == 1 {
			for _, a := range s.searcher.space.Scores(vecs[0]) {
				if a.Confidence >= r.SkillThreshold {
					sk, _ := s.searcher.space.Taxonomy().Skill(a.SkillID)
					resp.MatchedSkills = append(resp.MatchedSkills, MatchedSkill{Skill: sk, Score: round3(a.Confidence), ToolCount: skillCount[a.SkillID]})
				}
			}
			sort.SliceStable(resp.MatchedSkills, func(i, j int) bool { return resp.MatchedSkills[i].Score > resp.MatchedSkills[j].Score })
			if len(resp.MatchedSkills) > maxMatchedSkills {
				resp.MatchedSkills = resp.MatchedSkills[:maxMatchedSkills]
			}
		} else if err != nil {
			s.d.Logger.Warn("search: embedding the query failed; skills not matched", "error", err)
		}
	}
	if r.ItemType == "skill" || len(allowed) == 0 {
		return resp, nil
	}
	limit := r.Limit
	pool := limit
	inSkill := map[string]bool{}
	if resp.StrategyUsed == StrategyHierarchical && len(resp.MatchedSkills) > 0 {
		for _, m := range resp.MatchedSkills {
			inSkill[m.Skill.ID] = true
		}
		pool = search.MaxLimit // rank widely, then keep the tools within the matched skills
	}
	results, err := s.searcher.eng.Search(ctx, search.Query{Text: r.Query, ServerIDs: allowed, Limit: pool, MinScore: r.ToolThreshold})
	if err != nil {
		return resp, fmt.Errorf("search: %w", err)
	}
	pick := func(within bool) []SearchHit {
		var out []SearchHit
		for _, res := range results {
			e, ok := rt.ToolByID(res.ID)
			if !ok || !allowedSet[e.SourceServerID] {
				continue // left the callable set since it was indexed
			}
			if within && !anyIn(e.SkillIDs, inSkill) {
				continue
			}
			srv, _ := rt.Server(e.SourceServerID)
			out = append(out, SearchHit{Tool: e, Score: round3(res.Score), Server: srv, Lexical: res.Lexical, Semantic: res.Vector})
			if len(out) == limit {
				break
			}
		}
		return out
	}
	if len(inSkill) > 0 {
		resp.Tools = pick(true)
		if len(resp.Tools) == 0 {
			resp.Fallback = true
		}
	}
	if len(inSkill) == 0 || resp.Fallback {
		resp.Tools = pick(false)
	}
	return resp, nil
}

func anyIn(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if set[id] {
			return true
		}
	}
	return false
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// SkillInfo is a skill as GET /api/v1/skills lists it.
type SkillInfo struct {
	classify.Skill
	ToolCount int
	Embedding []float32
}

// Skills lists the taxonomy with how many tools each skill has and its current embedding.
func (s *System) Skills() []SkillInfo {
	count := map[string]int{}
	for _, e := range s.Routes().ordered {
		for _, sk := range e.SkillIDs {
			count[sk]++
		}
	}
	tax := s.searcher.space.Taxonomy()
	out := make([]SkillInfo, len(tax.Skills))
	for i, sk := range tax.Skills {
		v, _ := s.searcher.space.SkillVector(sk.ID)
		out[i] = SkillInfo{Skill: sk, ToolCount: count[sk.ID], Embedding: v}
	}
	return out
}

// VectorIndexHealth reports the vector index for GET /health: "in_process" for the embedded index, "ok" when
// Qdrant answers a count.
func (s *System) VectorIndexHealth(ctx context.Context) (string, error) {
	if _, ok := s.searcher.idx.(*vector.Memory); ok {
		return "in_process", nil
	}
	if _, err := s.searcher.idx.Count(ctx); err != nil {
		return "", fmt.Errorf("vector index: %w", err)
	}
	return "ok", nil
}
