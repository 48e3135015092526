package search

import "context"

// VectorIndex stores one vector per tool and finds the nearest ones to a query vector. Engine depends on this small
// interface rather than on an implementation so that the in-process exact index and the Qdrant adapter of
// search/vector plug in alike, through a few lines of adapter (ids, filter and hits map one to one). Implementations
// must be safe for concurrent use and compare by cosine similarity (the vectors given to them are L2-normalised, so
// a dot product will do). Checking that the index was built for the embedder's Model and Dimension is the index
// owner's job.
type VectorIndex interface {
	// Upsert stores the points, replacing any earlier vector with the same id.
	Upsert(ctx context.Context, points []VectorPoint) error
	// Delete removes the vectors of the ids; unknown ids are not an error.
	Delete(ctx context.Context, ids []int64) error
	// Search returns at most limit hits, most similar first, restricted by filter.
	Search(ctx context.Context, vector []float32, filter VectorFilter, limit int) ([]VectorHit, error)
}

// VectorPoint is one tool's vector with what an index may store next to it.
type VectorPoint struct {
	ID int64
	// ServerID is what VectorFilter filters on.
	ServerID string
	// Name ({server}.{tool}), OriginalName and Payload are copied from the Doc for indexes that keep metadata
	// (the Qdrant payload); the engine never reads them back.
	Name, OriginalName string
	Payload            any
	// Vector is valid (embed.Validate) and L2-normalised; the engine does not modify it once passed.
	Vector []float32
}

// VectorFilter restricts a vector search. The zero value matches everything.
type VectorFilter struct {
	// ServerIDs, when not empty, keeps only points whose ServerID is in it.
	ServerIDs []string
	// Allow, when set, keeps only the points it accepts.
	Allow func(id int64) bool
}

// VectorHit is one search answer: a point id and its cosine similarity to the query (-1..1).
type VectorHit struct {
	ID    int64
	Score float64
}
