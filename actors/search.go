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
	// fixed scores texts against the skills' own descriptions and never moves (the indexer moves space's vectors
	// to the centroids of classified tools). The ranking's skill signal is read in it, so that the order of tools
	// does not depend on when classification finished (see System.Search).
	fixed *classify.SkillSpace
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
	fixed, err := classify.NewSkillSpace(ctx, emb, tax)
	if err != nil {
		return nil, err
	}
	va.fixed = fixed
	return &searcher{eng: eng, emb: emb, idx: idx, vec: va, space: space, extra: sd.Skills, fixed: fixed}, nil
}

// vectorAdapter lets the engine use a vector.Index (ids and scores map one to one; the payload travels as is). It
// also hands the vectors the engine computed to the indexer (see capture), so that a tool is embedded once: an
// external embedding API is paid per text, and keeps each tool's skill profile (see profile) from the same vector.
type vectorAdapter struct {
	idx      vector.Index
	fixed    *classify.SkillSpace
	mu       sync.Mutex
	captured map[int64][]float32
	profiles map[int64][]skillAffinity
}

// skillAffinity is a tool's score (0..1) for one skill of the taxonomy, by index.
type skillAffinity struct {
	skill uint16
	score float32
}

// profile computes a tool's skill profile: its classification in the fixed space (the skills' descriptions), by
// the same rules as the built-in classifier (classify.SkillSpace.ClassifyVector). It depends on the tool's text
// only, not on when or by what the tool was classified, so ranking by it is deterministic.
func (a *vectorAdapter) profile(v []float32) []skillAffinity {
	if a.fixed == nil || len(v) == 0 {
		return nil
	}
	r, err := a.fixed.ClassifyVector(v)
	if err != nil || len(r.Assignments) == 0 {
		return nil
	}
	tax := a.fixed.Taxonomy()
	out := make([]skillAffinity, 0, len(r.Assignments))
	for _, as := range r.Assignments {
		if i, ok := tax.Index(as.SkillID); ok {
			out = append(out, skillAffinity{skill: uint16(i), score: float32(as.Confidence)})
		}
	}
	return out
}

// profileOf returns a tool's skill profile (nil when it has none or was not embedded).
func (a *vectorAdapter) profileOf(id int64) []skillAffinity {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.profiles[id]
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
	profiles := make([][]skillAffinity, len(points))
	for i, p := range points {
		profiles[i] = a.profile(p.Vector)
	}
	a.mu.Lock()
	if a.profiles == nil {
		a.profiles = map[int64][]skillAffinity{}
	}
	for i, p := range points {
		if a.captured != nil {
			a.captured[p.ID] = p.Vector
		}
		if profiles[i] == nil {
			delete(a.profiles, p.ID)
		} else {
			a.profiles[p.ID] = profiles[i]
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
	a.mu.Lock()
	for i, id := range ids {
		out[i] = uint64(id)
		delete(a.profiles, id)
	}
	a.mu.Unlock()
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
	Tools         []SearchHit
	MatchedSkills []MatchedSkill
	StrategyUsed  string
	// Fallback is set by the hierarchical strategy when its skill signal did not inform the answer: the query
	// matched no skill, or no tool answered has a matched skill in its profile (the skills its own text is
	// closest to; see vectorAdapter.profile). The answer is then exactly direct's.
	Fallback        bool
	ServersSearched int
	ToolsSearched   int
}

// Ranking of the hierarchical strategy. The matched skills are a bounded boost, never a filter: a tool's fused
// relevance (0..1) gains at most skillBoost when its skill profile holds a matched skill, which reorders tools of
// nearly equal relevance and cannot lift a weak tool over a clearly better one. The pool is how many of the
// engine's best tools are re-ordered (and, for both strategies, re-sorted with the tool's name as the tie-break:
// the engine breaks ties by database id, which depends on the order of discovery).
const (
	maxMatchedSkills = 3
	skillBoost       = 0.01
	rerankSlack      = 20
)

// Search ranks the tools of the servers that execute calls (CONNECTED or DEGRADED: BR-007, AG-US2 AC3),
// optionally restricted to some servers, by hybrid relevance. Both strategies rank every allowed tool; the
// hierarchical one (the default) also matches the query to skills and uses them as a bounded boost (skillBoost).
// The ranking is deterministic: the skill signal comes from fixed vectors (the skills' descriptions, the tools' own
// text), never from classification results or the skill centroids, which depend on when classification ran, and
// ties fall to the tool's name. It reads the engine and the routing table only: no actor is asked.
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
	sort.Strings(allowed)
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

	// The query's skills, scored in the fixed space (the skills' descriptions), as the tools' profiles are.
	var querySkill []float64 // by taxonomy index: the matched skills' scores, 0 elsewhere
	var queryVec []float32   // handed to the engine when it embeds with the same model, to embed the query once
	needSkills := r.ItemType == "skill" || resp.StrategyUsed == StrategyHierarchical
	if needSkills {
		vecs, err := s.searcher.emb.Embed(ctx, []string{search.QueryText(r.Query)})
		if err == nil && len(vecs) == 1 {
			if model, _, ok := s.searcher.eng.Model(); ok && model == s.searcher.emb.Model() {
				queryVec = vecs[0]
			}
			tax := s.searcher.fixed.Taxonomy()
			scores := s.searcher.fixed.Scores(vecs[0])
			idx := make([]int, 0, len(scores))
			for i, a := range scores {
				if a.Confidence >= r.SkillThreshold {
					idx = append(idx, i)
				}
			}
			sort.SliceStable(idx, func(i, j int) bool { return scores[idx[i]].Confidence > scores[idx[j]].Confidence })
			if len(idx) > maxMatchedSkills {
				idx = idx[:maxMatchedSkills]
			}
			querySkill = make([]float64, len(scores))
			for _, i := range idx {
				a := scores[i]
				querySkill[i] = a.Confidence
				resp.MatchedSkills = append(resp.MatchedSkills, MatchedSkill{Skill: tax.Skills[i], Score: round3(a.Confidence),
					ToolCount: skillCount[a.SkillID]})
			}
		} else if err != nil {
			s.d.Logger.Warn("search: embedding the query failed; skills not matched", "error", err)
		}
	}
	if r.ItemType == "skill" || len(allowed) == 0 {
		return resp, nil
	}
	limit := r.Limit
	if limit <= 0 {
		limit = search.DefaultLimit
	}
	results, err := s.searcher.eng.Search(ctx, search.Query{Text: r.Query, ServerIDs: allowed,
		Limit: min(search.MaxLimit, limit+rerankSlack), MinScore: r.ToolThreshold, Vector: queryVec})
	if err != nil {
		return resp, fmt.Errorf("search: %w", err)
	}
	hierarchical := resp.StrategyUsed == StrategyHierarchical && len(resp.MatchedSkills) > 0
	type ranked struct {
		hit    SearchHit
		key    float64
		name   string
		signal float64
	}
	pool := make([]ranked, 0, len(results))
	for _, res := range results {
		e, ok := rt.ToolByID(res.ID)
		if !ok || !allowedSet[e.SourceServerID] {
			continue // left the callable set since it was indexed
		}
		srv, _ := rt.Server(e.SourceServerID)
		key, signal := res.Score, 0.0
		if hierarchical {
			signal = skillSignal(querySkill, s.searcher.vec.profileOf(res.ID))
			key += skillBoost * signal
		}
		pool = append(pool, ranked{hit: SearchHit{Tool: e, Score: round3(min(1, key)), Server: srv, Lexical: res.Lexical,
			Semantic: res.Vector}, key: key, name: e.Name, signal: signal})
	}
	sort.SliceStable(pool, func(i, j int) bool {
		if pool[i].key != pool[j].key {
			return pool[i].key > pool[j].key
		}
		return pool[i].name < pool[j].name
	})
	if len(pool) > limit {
		pool = pool[:limit]
	}
	resp.Fallback = resp.StrategyUsed == StrategyHierarchical
	resp.Tools = make([]SearchHit, len(pool))
	for i, p := range pool {
		resp.Tools[i] = p.hit
		if p.signal > 0 {
			resp.Fallback = false
		}
	}
	return resp, nil
}

// skillSignal is how strongly a tool's skill profile meets the query's matched skills: the best product of the two
// scores over the skills they share, in 0..1.
func skillSignal(query []float64, profile []skillAffinity) float64 {
	var best float64
	for _, p := range profile {
		if int(p.skill) < len(query) {
			best = max(best, query[p.skill]*float64(p.score))
		}
	}
	return best
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
