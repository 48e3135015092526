package search

import (
	"math"
	"slices"
)

// fusionMode is how the lexical, server and vector evidence becomes one score.
type fusionMode int

const (
	// fuseBlend adds the absolute, 0..1 components with fixed weights (production).
	fuseBlend fusionMode = iota
	// fuseRRF is reciprocal rank fusion of the lexical (+server) list and the vector list, kept for comparison.
	fuseRRF
	// fuseLexicalOnly (tool and server indexes) and fuseVectorOnly are the baselines of the quality test.
	fuseLexicalOnly
	fuseVectorOnly
)

// tuning holds the ranking choices: fixed in production, varied by the quality test to measure the baselines.
type tuning struct {
	tool, server bm25Params
	fusion       fusionMode
	vecW, srvW   float64 // weights of the vector and server components relative to the lexical one
	rrfK         float64 // rank constant of RRF
}

// defaultTuning is what the engine ranks with. Weights are round values in the middle of a plateau measured on both
// fixtures (LiveMCPBench and BFCL) with the built-in embedder: vector 0.6..1 and word-vector share 0.3..0.4 at 512
// and 640 dimensions all gave nDCG@10 0.381-0.393 and 0.692-0.704; 0.8 has neighbours as good as itself on both.
var defaultTuning = tuning{
	tool: defaultBM25, server: serverBM25,
	fusion: fuseBlend, vecW: 0.8, srvW: 0.2, rrfK: 60,
}

// candidate is a tool under consideration during one search, with every piece of evidence about it.
type candidate struct {
	id       int64
	serverID string
	lexRaw   float64 // BM25F score
	lex      float64 // lexRaw as a share of the query's reachable score, 0..1
	server   float64 // the server's lexical score, 0..1
	vecCos   float64
	lexRank  int
	vecRank  int
	score    float64
}

// lexicalScore maps a raw BM25F score into 0..1 against the best score the query could reach (every known query
// term saturated), so that it means "how much of the query's weight this tool covers", comparable across queries.
func lexicalScore(raw, maxPossible float64) float64 {
	if maxPossible <= 0 || raw <= 0 {
		return 0
	}
	return math.Min(1, raw/maxPossible)
}

// vectorScore maps a cosine similarity into 0..1. Similarities up to 0.1 count as no evidence: texts that share
// nothing still meet in a few hashed buckets (a 412-bucket space for every feature), and with the vector weight at
// 0.8 that noise alone lifted nonsense queries to scores near 0.3. Floors of 0.05-0.2 ranked alike on both fixtures
// (nDCG@10 within 0.003); 0.1 is the least that keeps nonsense under 0.25.
func vectorScore(cos float64) float64 {
	if math.IsNaN(cos) {
		return 0
	}
	const floor = 0.1 // see above
	return math.Max(0, math.Min(1, (cos-floor)/(1-floor)))
}

// rrf is the reciprocal-rank-fusion contribution of a 1-based rank, normalised so that rank 1 gives 1; rank 0
// (absent from the list) gives 0.
func rrf(rank int, k float64) float64 {
	if rank <= 0 {
		return 0
	}
	return (k + 1) / (k + float64(rank))
}

// blend is the production score: the square root of a weighted mean of the absolute components. withVector is
// false when there is no vector evidence for this search (no embedder, or it failed), so that a lexical-only score
// still spans 0..1.
//
// The root is a monotone calibration (it changes no ranking): a long request of several steps is covered only in
// small part by each right tool, so the mean is low for it (about 0.2 for the best tool of a typical LiveMCPBench
// task) although the tool is relevant, while text that matches nothing stays near 0. On the root's scale the best
// tool of such a task scores about 0.45, a short exact request 0.8 to 0.9 and random text under 0.25, so the usual
// thresholds (tool_threshold 0.3) keep the former and drop the latter.
func (t tuning) blend(c candidate, withVector bool) float64 {
	var mean float64
	if withVector {
		mean = (c.lex + t.vecW*vectorScore(c.vecCos) + t.srvW*c.server) / (1 + t.vecW + t.srvW)
	} else {
		mean = (c.lex + t.srvW*c.server) / (1 + t.srvW)
	}
	return math.Sqrt(mean)
}

// fuse scores the candidates and returns the best limit of them at or above minScore.
func (t tuning) fuse(cands []candidate, withVector bool, limit int, minScore float64) []Result {
	if t.fusion == fuseRRF {
		t.rerankLexical(cands)
	}
	for i := range cands {
		c := &cands[i]
		switch t.fusion {
		case fuseBlend:
			c.score = t.blend(*c, withVector)
		case fuseRRF:
			c.score = (rrf(c.lexRank, t.rrfK) + rrf(c.vecRank, t.rrfK)) / 2
		case fuseLexicalOnly:
			c.score = t.blend(*c, false)
		case fuseVectorOnly:
			c.score = vectorScore(c.vecCos)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmpScore(a.score, b.score, a.id, b.id) })
	out := make([]Result, 0, min(limit, len(cands)))
	for _, c := range cands {
		if len(out) == limit || c.score < minScore {
			break
		}
		if c.score <= 0 {
			break
		}
		out = append(out, Result{
			ID: c.id, ServerID: c.serverID, Score: c.score,
			Lexical: c.lex, Vector: vectorScore(c.vecCos), Server: c.server,
			LexicalRank: c.lexRank, VectorRank: c.vecRank,
		})
	}
	return out
}

// rerankLexical sets lexRank from the lexical and server evidence together, so that RRF sees the same lexical
// information as the blend.
func (t tuning) rerankLexical(cands []candidate) {
	ls := make([]float64, len(cands))
	order := make([]int, len(cands))
	for i := range cands {
		ls[i] = cands[i].lex + t.srvW*cands[i].server
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpScore(ls[a], ls[b], cands[a].id, cands[b].id) })
	for r, i := range order {
		cands[i].lexRank = 0
		if cands[i].lex > 0 {
			cands[i].lexRank = r + 1
		}
	}
}
