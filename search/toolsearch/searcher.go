package toolsearch

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/vector"
)

// Config says what a Searcher is built from. Zero values are the embedded defaults: the built-in hashed embedder,
// the in-process vector index and the taxonomy that ships with the product.
type Config struct {
	Embedder embed.Embedder
	Index    vector.Index
	Taxonomy *classify.Taxonomy
	// Logger receives the warnings of a search that answers without its skills (nil: discarded).
	Logger *slog.Logger
}

// Searcher is what a search reads: the engine, the embedder, the vector index and the skill spaces. It is built
// once at start and safe for concurrent use by searches; one writer (the aggregator's indexer) calls Upsert and
// Remove, never concurrently with each other, and moves the skill vectors of SkillSpace.
type Searcher struct {
	eng   *search.Engine
	emb   embed.Embedder
	idx   vector.Index
	vec   *vectorAdapter
	space *classify.SkillSpace
	// fixed scores texts against the skills' own descriptions and never moves (the indexer moves space's vectors
	// to the centroids of classified tools). The ranking's skill signal is read in it, so that the order of tools
	// does not depend on when classification finished (see Search).
	fixed *classify.SkillSpace
	log   *slog.Logger
}

// New prepares the vector index for the embedder's model and builds the engine and the skill spaces.
func New(ctx context.Context, cfg Config) (*Searcher, error) {
	emb, idx, tax, log := cfg.Embedder, cfg.Index, cfg.Taxonomy, cfg.Logger
	if emb == nil {
		emb = embed.NewHashed(0)
	}
	if idx == nil {
		idx = vector.NewMemory()
	}
	if tax == nil {
		tax = classify.DefaultTaxonomy()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	return &Searcher{eng: eng, emb: emb, idx: idx, vec: va, space: space, fixed: fixed, log: log}, nil
}

// Upsert indexes tools (see search.Engine.Upsert). The engine embeds them; their vectors also feed the skill
// centroids, so that a tool is embedded once (an external embedding API is paid per text). When the vector index
// can hand vectors back (vector.VectorSource) it keeps them and vectors is nil; otherwise vectors holds the ones
// this call computed, by tool id, for the caller to keep.
func (s *Searcher) Upsert(ctx context.Context, docs []search.Doc) (vectors map[int64][]float32, err error) {
	if _, fromIndex := s.idx.(vector.VectorSource); fromIndex {
		return nil, s.eng.Upsert(ctx, docs)
	}
	s.vec.capture()
	err = s.eng.Upsert(ctx, docs)
	return s.vec.take(), err
}

// Remove drops tools from the engine and the vector index.
func (s *Searcher) Remove(ctx context.Context, ids []int64) error { return s.eng.Remove(ctx, ids) }

// Len is how many tools the engine holds.
func (s *Searcher) Len() int { return s.eng.Len() }

// Index is the vector index, for what the engine does not do itself: payload updates on classification, deleting a
// removed server's points, reading vectors back and the health check.
func (s *Searcher) Index() vector.Index { return s.idx }

// SkillSpace is the taxonomy's moving space: each skill's vector is the centroid of its classified tools (with its
// description), set by the indexer. It is what the skills listing shows; the ranking does not read it.
func (s *Searcher) SkillSpace() *classify.SkillSpace { return s.space }
