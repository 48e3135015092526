// Package embed turns text into vectors for semantic search. It exists apart from the ranking engine because two
// users need the same vector space: tool search embeds tools and queries, the skills classifier embeds skills and
// tools. It holds the Embedder interface, the checks every vector passes before it is stored or compared, the text
// a tool is embedded from, a built-in embedder that needs no model and no network, and a client for any
// OpenAI-compatible /v1/embeddings service.
package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Embedder maps texts to vectors of one fixed size. Model and Dimension identify the vector space: vectors from
// embedders with a different Model or Dimension must never be compared, so whoever stores vectors records both and
// rebuilds the index when they change.
type Embedder interface {
	// Model names the model (for the built-in embedder, its algorithm and version).
	Model() string
	// Dimension is the length of every vector Embed returns.
	Dimension() int
	// Embed returns one valid vector (see Validate) per text, in order, or an error. The built-in embedders
	// return unit vectors; callers comparing by dot product normalise others.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ErrInvalidVector is wrapped by every error Validate returns: such a vector must not be stored or searched with.
var ErrInvalidVector = errors.New("invalid vector")

// Validate checks that vec can be stored in or searched against an index of vectors of size dim: it has exactly dim
// components, all finite, not all zero (a zero vector has no direction, so its cosine similarity is undefined).
func Validate(vec []float32, dim int) error {
	if dim <= 0 {
		return fmt.Errorf("%w: dimension %d is not positive", ErrInvalidVector, dim)
	}
	if len(vec) != dim {
		return fmt.Errorf("%w: %d components, want %d", ErrInvalidVector, len(vec), dim)
	}
	nonZero := false
	for i, x := range vec {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: component %d is %v", ErrInvalidVector, i, x)
		}
		if x != 0 {
			nonZero = true
		}
	}
	if !nonZero {
		return fmt.Errorf("%w: all components are zero", ErrInvalidVector)
	}
	return nil
}

// ValidateAll checks a batch answer: one vector per text, each valid for dim.
func ValidateAll(vecs [][]float32, texts, dim int) error {
	if len(vecs) != texts {
		return fmt.Errorf("%w: %d vectors for %d texts", ErrInvalidVector, len(vecs), texts)
	}
	for i, v := range vecs {
		if err := Validate(v, dim); err != nil {
			return fmt.Errorf("vector %d: %w", i, err)
		}
	}
	return nil
}

// Normalize scales vec to unit length in place (cosine similarity becomes a dot product) and returns it. A zero
// vector is left as it is.
func Normalize(vec []float32) []float32 {
	var sum float64
	for _, x := range vec {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return vec
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range vec {
		vec[i] = float32(float64(x) * inv)
	}
	return vec
}
