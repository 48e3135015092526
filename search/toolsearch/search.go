package toolsearch

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
)

// Search strategies.
const (
	// StrategyHierarchical (the default) matches the query to skills and boosts the tools that have them.
	StrategyHierarchical = "hierarchical"
	// StrategyDirect ranks by the engine's relevance alone.
	StrategyDirect = "direct"
)

// Catalog is the routing state a search reads: which tools the engine's ids stand for, and what the allowed
// servers hold. The caller implements it over an immutable snapshot, so that one search sees one state; the
// engine may still hold a tool the catalog no longer routes (the indexer catches up after the routing table), and
// such a tool is not answered.
type Catalog interface {
	// Tool returns the tool the engine indexed under id, false when the catalog does not route it.
	Tool(id int64) (Tool, bool)
	// Count returns how many tools the servers hold and, by skill id, how many of those tools have the skill.
	Count(serverIDs []string) (tools int, bySkill map[string]int)
}

// Tool is what the ranking needs of a catalog's tool.
type Tool struct {
	// Name is the namespaced name: the tie-break between tools of equal relevance.
	Name     string
	ServerID string
}

// Request is one search.
type Request struct {
	Query string
	// SkillsOnly matches the query to skills and ranks no tool (item_type "skill").
	SkillsOnly bool
	// ServerIDs are the servers whose tools may be answered, in any order; none means no tool is ranked.
	ServerIDs []string
	// Allow, when set, restricts the answer to the tools it accepts (see search.Query.Allow).
	Allow          func(id int64) bool
	Limit          int // search.DefaultLimit when 0
	SkillThreshold float64
	ToolThreshold  float64
	Strategy       string // StrategyHierarchical when empty
}

// Hit is one ranked tool, by the engine's id (the catalog's key).
type Hit struct {
	ID       int64
	Score    float64
	Lexical  float64
	Semantic float64
}

// MatchedSkill is a skill the query matched, with how many tools of the searched servers have it.
type MatchedSkill struct {
	Skill     classify.Skill
	Score     float64
	ToolCount int
}

// Response is the ranked answer.
type Response struct {
	Tools         []Hit
	MatchedSkills []MatchedSkill
	Strategy      string
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

// Search ranks the tools of r.ServerIDs by hybrid relevance. Both strategies rank every allowed tool; the
// hierarchical one (the default) also matches the query to skills and uses them as a bounded boost (skillBoost).
// The ranking is deterministic: the skill signal comes from fixed vectors (the skills' descriptions, the tools' own
// text), never from classification results or the skill centroids, which depend on when classification ran, and
// ties fall to the tool's name. A query that cannot be embedded is answered without skills (logged). On an
// engine error the answer so far (matched skills, counts) comes with the error.
func (s *Searcher) Search(ctx context.Context, cat Catalog, r Request) (Response, error) {
	resp := Response{Strategy: r.Strategy}
	if resp.Strategy == "" {
		resp.Strategy = StrategyHierarchical
	}
	allowed := slices.Sorted(slices.Values(r.ServerIDs))
	resp.ServersSearched = len(allowed)
	allowedSet := make(map[string]bool, len(allowed))
	for _, id := range allowed {
		allowedSet[id] = true
	}
	var skillCount map[string]int
	resp.ToolsSearched, skillCount = cat.Count(allowed)

	// The query's skills, scored in the fixed space (the skills' descriptions), as the tools' profiles are.
	var querySkill []float64 // by taxonomy index: the matched skills' scores, 0 elsewhere
	var queryVec []float32   // handed to the engine when it embeds with the same model, to embed the query once
	if r.SkillsOnly || resp.Strategy == StrategyHierarchical {
		vecs, err := s.emb.Embed(ctx, []string{search.QueryText(r.Query)})
		if err == nil && len(vecs) == 1 {
			if model, _, ok := s.eng.Model(); ok && model == s.emb.Model() {
				queryVec = vecs[0]
			}
			querySkill, resp.MatchedSkills = s.matchSkills(vecs[0], r.SkillThreshold, skillCount)
		} else if err != nil {
			s.log.Warn("search: embedding the query failed; skills not matched", "error", err)
		}
	}
	if r.SkillsOnly || len(allowed) == 0 {
		return resp, nil
	}
	limit := r.Limit
	if limit <= 0 {
		limit = search.DefaultLimit
	}
	results, err := s.eng.Search(ctx, search.Query{Text: r.Query, ServerIDs: allowed, Allow: r.Allow,
		Limit: min(search.MaxLimit, limit+rerankSlack), MinScore: r.ToolThreshold, Vector: queryVec})
	if err != nil {
		return resp, fmt.Errorf("search: %w", err)
	}
	hierarchical := resp.Strategy == StrategyHierarchical && len(resp.MatchedSkills) > 0
	type ranked struct {
		hit    Hit
		key    float64
		name   string
		signal float64
	}
	pool := make([]ranked, 0, len(results))
	for _, res := range results {
		t, ok := cat.Tool(res.ID)
		if !ok || !allowedSet[t.ServerID] {
			continue // left the callable set since it was indexed
		}
		key, signal := res.Score, 0.0
		if hierarchical {
			signal = skillSignal(querySkill, s.vec.profileOf(res.ID))
			key += skillBoost * signal
		}
		pool = append(pool, ranked{hit: Hit{ID: res.ID, Score: round3(min(1, key)), Lexical: res.Lexical,
			Semantic: res.Vector}, key: key, name: t.Name, signal: signal})
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
	resp.Fallback = resp.Strategy == StrategyHierarchical
	resp.Tools = make([]Hit, len(pool))
	for i, p := range pool {
		resp.Tools[i] = p.hit
		if p.signal > 0 {
			resp.Fallback = false
		}
	}
	return resp, nil
}

// matchSkills scores the query's vector in the fixed space and keeps the best skills (at most maxMatchedSkills) at
// or above threshold: their scores by taxonomy index (0 elsewhere) for the ranking, and as the answer lists them.
func (s *Searcher) matchSkills(v []float32, threshold float64, toolCount map[string]int) ([]float64, []MatchedSkill) {
	tax := s.fixed.Taxonomy()
	scores := s.fixed.Scores(v)
	idx := make([]int, 0, len(scores))
	for i, a := range scores {
		if a.Confidence >= threshold {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(i, j int) bool { return scores[idx[i]].Confidence > scores[idx[j]].Confidence })
	if len(idx) > maxMatchedSkills {
		idx = idx[:maxMatchedSkills]
	}
	query := make([]float64, len(scores))
	var matched []MatchedSkill
	for _, i := range idx {
		a := scores[i]
		query[i] = a.Confidence
		matched = append(matched, MatchedSkill{Skill: tax.Skills[i], Score: round3(a.Confidence), ToolCount: toolCount[a.SkillID]})
	}
	return query, matched
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
