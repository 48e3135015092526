// Package search is the tool-search engine of the aggregator: it ranks the tools of every connected server against
// a request in plain language. It is a top-level package because retrieval (tokenizing, lexical BM25F ranking,
// vector ranking through an embedder and a vector index, and the fusion of both) is neither an actor (it keeps no
// conversation with a server and owns no lifecycle), nor storage (it indexes what the store holds and can be rebuilt
// from it at any time), nor transport (the REST search endpoint and the MCP meta-tool both call it). Its
// sub-package embed turns text into vectors; the vector index (in-process or Qdrant, search/vector) plugs in
// through VectorIndex.
package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// Limits of a query.
const (
	// DefaultLimit is the number of results when Query.Limit is 0.
	DefaultLimit = 10
	// MaxLimit bounds Query.Limit.
	MaxLimit = 1000
	// maxQueryBytes bounds the query text that is analysed and embedded.
	maxQueryBytes = 4096
	// minPool is the least number of candidates each ranker contributes to fusion.
	minPool = 100
	// embedBatch is the number of tools embedded per Embed call while indexing (an OpenAI client batches again
	// by its own BatchSize).
	embedBatch = 256
)

// ErrEmptyQuery is returned by Search for a query without any text.
var ErrEmptyQuery = errors.New("search: empty query")

// Doc is one tool as the engine indexes it. Callers map persistence.Tool onto it.
type Doc struct {
	ID       int64
	ServerID string
	// Name is the namespaced name, {server}.{tool}.
	Name string
	// OriginalName is the tool's name on its server; when empty it is taken from Name after the first dot.
	OriginalName string
	Description  string
	InputSchema  json.RawMessage
	// Payload is opaque to the engine and handed to the VectorIndex with the tool's vector, so that an adapter can
	// store the metadata its backend keeps next to vectors (the Qdrant payload: server name, is_external,
	// classification) without a lookup. It may be nil.
	Payload any
}

// Query is one search.
type Query struct {
	Text string
	// ServerIDs, when not empty, restricts results to tools of these servers.
	ServerIDs []string
	// Allow, when set, restricts results to the tools it accepts (a profile's subset of the servers' tools); it is
	// applied while candidates are chosen, so a small subset of a large catalogue still fills the answer.
	Allow func(id int64) bool
	// Limit is the maximum number of results (DefaultLimit when 0, at most MaxLimit).
	Limit int
	// MinScore drops results whose Score is below it (tool_threshold).
	MinScore float64
	// Vector, when set, is QueryText(Text)'s embedding by the engine's embedder (the model Model reports), so that
	// a caller that already embedded the query (to match skills) does not pay a second embedding call. It is
	// ignored when it is not a valid vector of the embedder's dimension.
	Vector []float32
}

// Result is one ranked tool. Besides Score it carries the evidence it was fused from, for debugging and for
// callers that want to explain a ranking.
type Result struct {
	ID       int64
	ServerID string
	// Score is the fused relevance in 0..1, comparable across queries (see Engine).
	Score float64
	// Lexical is the BM25F score as the share (0..1) of the query's weight that the tool covers.
	Lexical float64
	// Vector is the cosine similarity of query and tool embeddings (negatives clipped to 0); 0 when the tool was
	// not among the nearest vectors or there is no vector side.
	Vector float64
	// Server is the lexical score (0..1) of the tool's server taken as one document of all its tools.
	Server float64
	// LexicalRank and VectorRank are the 1-based ranks in the lexical and vector lists, 0 when absent from them.
	LexicalRank, VectorRank int
}

// Options configures an Engine. The zero value is usable.
type Options struct {
	// Logger receives warnings (a failed query embedding degrades a search to lexical ranking). Nil discards them.
	Logger *slog.Logger
}

// vectorSide is an embedder and the index that holds its vectors; they only make sense together.
type vectorSide struct {
	emb embed.Embedder
	idx VectorIndex
}

// Engine is the hybrid tool-search engine. It keeps a BM25F index over each tool's name, server name,
// description, parameters and adjacent word pairs, a second BM25F index with one document per server (all its
// tools together), and, optionally, an embedder with a vector index. Search blends the three:
//
//	Score = sqrt((Lexical + 0.8·Vector + 0.2·Server) / 2)
//
// (without a vector side, sqrt((Lexical + 0.2·Server) / 1.2)). Each component is an absolute measure in 0..1, not
// a rank or a per-query min-max, so Score is comparable across queries: a tool that covers little of the query,
// whose embedding is far from it and whose server does not match either scores low whatever else is in the
// catalogue. The square root only rescales (see tuning.blend): random text scores under 0.25, the best tool of a
// long multi-step request about 0.45, an exact short request 0.8 to 0.9, so a threshold such as 0.3 is meaningful.
// Blending was measured against reciprocal rank fusion on the LiveMCPBench fixture and ranked better
// (BENCHMARKS.md); RRF scores, being ranks, could not be thresholded anyway.
//
// It is safe for concurrent use: searches run in parallel with each other and with updates; updates (Upsert,
// Remove) are serialised.
type Engine struct {
	wmu sync.Mutex // serialises Upsert and Remove

	mu  sync.RWMutex // guards lex
	lex *lexicon

	vec atomic.Pointer[vectorSide]
	log *slog.Logger
	tun tuning

	scratch sync.Pool // *[]float64 score accumulators, one per concurrent search
}

// New returns an empty Engine. emb and idx may both be nil for a lexical-only engine; otherwise both are needed.
func New(emb embed.Embedder, idx VectorIndex, opts Options) (*Engine, error) {
	if (emb == nil) != (idx == nil) {
		return nil, errors.New("search: an embedder needs a vector index and a vector index an embedder")
	}
	if emb != nil && emb.Dimension() <= 0 {
		return nil, fmt.Errorf("search: embedder %q has dimension %d", emb.Model(), emb.Dimension())
	}
	e := &Engine{log: opts.Logger, tun: defaultTuning}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.lex = newLexicon(e.tun.tool, e.tun.server)
	if emb != nil {
		e.vec.Store(&vectorSide{emb: emb, idx: idx})
	}
	return e, nil
}

// Len returns the number of indexed tools.
func (e *Engine) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.lex.tools.n
}

// Model returns the identity of the vector space in use: the embedder's model and dimension; ok is false for a
// lexical-only engine. Whoever persists vectors records it, and starts over with a fresh index when the configured
// embedder no longer matches it (the daemon does at start: vector.Index.Ensure, then every tool is indexed).
func (e *Engine) Model() (model string, dim int, ok bool) {
	side := e.vec.Load()
	if side == nil {
		return "", 0, false
	}
	return side.emb.Model(), side.emb.Dimension(), true
}

// Upsert indexes docs, replacing earlier versions with the same ids. The lexical index is always updated, so a
// tool is searchable even when embedding fails; the error then says which part failed, and the tools' old vectors
// are deleted so that they never answer for the new text (call Upsert again to restore them).
func (e *Engine) Upsert(ctx context.Context, docs []Doc) error {
	if len(docs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("search: upsert: %w", err)
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	// The vectors are computed while the lexical index takes the same tools (the two share nothing until the
	// vectors are stored, after the lexical commit as before): indexing a server's catalogue is the embedder's work
	// on every core beside the lexicon's on one, instead of one after the other.
	side := e.vec.Load()
	var points []VectorPoint
	embedded := make(chan error, 1)
	if side != nil {
		points = make([]VectorPoint, len(docs))
		go func() {
			texts := make([]string, len(docs))
			for i, d := range docs {
				texts[i] = embed.ToolText(d.Name, d.Description, d.InputSchema)
				points[i] = VectorPoint{ID: d.ID, ServerID: d.ServerID, Name: d.Name, OriginalName: d.OriginalName, Payload: d.Payload}
			}
			embedded <- embedPoints(ctx, side.emb, texts, points)
		}()
	}
	fields := make([]fieldTerms, len(docs))
	memo := analysis.NewMemo() // the batch's tools share their words
	for i, d := range docs {
		fields[i] = docFields(d, memo)
	}
	e.mu.Lock()
	for i, d := range docs {
		e.lex.add(d, fields[i])
	}
	e.lex.commit()
	e.mu.Unlock()

	if side == nil {
		return nil
	}
	if err := <-embedded; err != nil {
		return errors.Join(err, dropVectors(ctx, side, docs))
	}
	if err := side.idx.Upsert(ctx, points); err != nil {
		return errors.Join(fmt.Errorf("search: store vectors: %w", err), dropVectors(ctx, side, docs))
	}
	return nil
}

// dropVectors deletes the vectors of docs after a failed update, even if ctx is already cancelled.
func dropVectors(ctx context.Context, side *vectorSide, docs []Doc) error {
	ids := make([]int64, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	if err := side.idx.Delete(context.WithoutCancel(ctx), ids); err != nil {
		return fmt.Errorf("search: delete stale vectors: %w", err)
	}
	return nil
}

// embedPoints fills points[i].Vector with the validated embedding of texts[i], in batches.
func embedPoints(ctx context.Context, emb embed.Embedder, texts []string, points []VectorPoint) error {
	for start := 0; start < len(texts); start += embedBatch {
		end := min(start+embedBatch, len(texts))
		vecs, err := emb.Embed(ctx, texts[start:end])
		if err != nil {
			return fmt.Errorf("search: embed with %s: %w", emb.Model(), err)
		}
		if err := embed.ValidateAll(vecs, end-start, emb.Dimension()); err != nil {
			return fmt.Errorf("search: embed with %s: %w", emb.Model(), err)
		}
		for i, v := range vecs {
			points[start+i].Vector = embed.Normalize(v) // indexes compare by dot product
		}
	}
	return nil
}

// Remove drops tools from every index; unknown ids are ignored.
func (e *Engine) Remove(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.mu.Lock()
	for _, id := range ids {
		e.lex.remove(id)
	}
	e.lex.commit()
	e.mu.Unlock()
	if side := e.vec.Load(); side != nil {
		if err := side.idx.Delete(ctx, ids); err != nil {
			return fmt.Errorf("search: delete vectors: %w", err)
		}
	}
	return nil
}

// Search ranks the indexed tools against q, best first. If the query cannot be embedded or the vector index fails
// (an embedding service down), the search falls back to lexical ranking and logs a warning instead of failing.
func (e *Engine) Search(ctx context.Context, q Query) ([]Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	text := QueryText(q.Text)
	if text == "" {
		return nil, ErrEmptyQuery
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	pool := max(minPool, 2*limit)
	var allowed map[string]struct{}
	if len(q.ServerIDs) > 0 {
		allowed = make(map[string]struct{}, len(q.ServerIDs))
		for _, s := range q.ServerIDs {
			allowed[s] = struct{}{}
		}
	}

	var hits []VectorHit
	side := e.vec.Load()
	if side != nil && e.tun.fusion != fuseLexicalOnly {
		var err error
		hits, err = vectorSearch(ctx, side, text, q.Vector, VectorFilter{ServerIDs: q.ServerIDs, Allow: q.Allow}, pool)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("search: %w", ctx.Err())
			}
			e.log.Warn("vector search failed; ranking lexically", "model", side.emb.Model(), "err", err)
			side, hits = nil, nil
		}
	}
	cands := e.candidates(queryTerms(text), allowed, q.Allow, hits, pool)
	return e.tun.fuse(cands, side != nil, limit, q.MinScore), nil
}

// QueryText is the part of a query's text that Search analyses and embeds: trimmed, and cut at 4 KiB. A caller that
// embeds a query to pass it as Query.Vector embeds QueryText(text).
func QueryText(text string) string {
	text = strings.TrimSpace(text)
	if len(text) > maxQueryBytes {
		text = strings.ToValidUTF8(text[:maxQueryBytes], "")
	}
	return dropAsking(text)
}

// dropAsking removes the words of asking (analysis.IsRequestWord: "please", "I need", "thanks") that stand alone
// between spaces, so that the embedding of a request is that of what it asks for; the lexical side drops them too
// (analysis.QueryTerms). A text of nothing else is kept as it is.
func dropAsking(text string) string {
	fields := strings.Fields(text)
	kept := fields[:0:0]
	for _, f := range fields {
		w := strings.ToLower(strings.TrimFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }))
		if w != "" && analysis.IsRequestWord(w) {
			continue
		}
		kept = append(kept, f)
	}
	if len(kept) == len(fields) || len(kept) == 0 {
		return text
	}
	return strings.Join(kept, " ")
}

// vectorSearch embeds the query (unless given holds its embedding) and asks the index for its nearest tools.
func vectorSearch(ctx context.Context, side *vectorSide, text string, given []float32, filter VectorFilter, pool int) ([]VectorHit, error) {
	vecs := [][]float32{slices.Clone(given)} // normalised in place below: the caller's slice stays as it was
	if embed.ValidateAll(vecs, 1, side.emb.Dimension()) != nil {
		var err error
		if vecs, err = side.emb.Embed(ctx, []string{text}); err != nil {
			return nil, fmt.Errorf("embed query: %w", err)
		}
		if err := embed.ValidateAll(vecs, 1, side.emb.Dimension()); err != nil {
			return nil, fmt.Errorf("embed query: %w", err)
		}
	}
	hits, err := side.idx.Search(ctx, embed.Normalize(vecs[0]), filter, pool)
	if err != nil {
		return nil, fmt.Errorf("vector index: %w", err)
	}
	return hits, nil
}

// candidates scores the query lexically and returns the union of the best lexical candidates and of the vector
// hits still indexed, each with every component of the fusion.
func (e *Engine) candidates(terms []queryTerm, allowed map[string]struct{}, allow func(int64) bool, hits []VectorHit, pool int) []candidate {
	e.mu.RLock()
	defer e.mu.RUnlock()
	sp, _ := e.scratch.Get().(*[]float64)
	if sp == nil {
		sp = new([]float64)
	}
	defer e.scratch.Put(sp)
	*sp = e.lex.tools.scratch(*sp)
	scores := *sp

	var top []candidate
	var maxLex float64
	if e.tun.fusion != fuseVectorOnly {
		maxLex = e.lex.tools.score(terms, scores)
		top = e.lex.topTools(scores, allowed, allow, pool)
	}
	byID := make(map[int64]int, len(top)+len(hits))
	for i := range top {
		byID[top[i].id] = i
	}
	rank := 0
	for _, h := range hits {
		slot, ok := e.lex.tools.slotOf[h.ID]
		if !ok {
			continue // removed since the vector search
		}
		d := &e.lex.tools.slots[slot]
		if allowed != nil {
			if _, ok := allowed[d.serverID]; !ok {
				continue // an index that ignored the filter
			}
		}
		if allow != nil && !allow(h.ID) {
			continue
		}
		rank++
		if i, ok := byID[h.ID]; ok {
			if top[i].vecRank == 0 { // an index answering an id twice keeps its best
				top[i].vecCos, top[i].vecRank = h.Score, rank
			}
			continue
		}
		byID[h.ID] = len(top)
		top = append(top, candidate{id: h.ID, serverID: d.serverID, lexRaw: scores[slot], vecCos: h.Score, vecRank: rank})
	}
	servers := e.lex.serverScores(terms)
	for i := range top {
		top[i].lex = lexicalScore(top[i].lexRaw, maxLex)
		top[i].server = servers[top[i].serverID]
	}
	return top
}

// cmpScore orders by score descending, then id ascending, so that rankings are deterministic.
func cmpScore(sa, sb float64, ida, idb int64) int {
	switch {
	case sa > sb:
		return -1
	case sa < sb:
		return 1
	case ida < idb:
		return -1
	case ida > idb:
		return 1
	}
	return 0
}
