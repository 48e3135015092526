// Package vector is the vector-similarity layer of tool search: it stores one
// embedding per discovered tool, keyed by the tool's database id, and answers
// "which tools are closest to this query embedding" with cosine similarity,
// optionally restricted by server, origin and classification.
//
// The hybrid ranking engine (package search) combines these hits with BM25.
// Two implementations satisfy the same Index contract:
//
//   - NewMemory: the default, an exact in-process index rebuilt from the store
//     at start (brute force is fast enough for ~10,000 tools);
//   - NewQdrant: the collection "mcp_unified_search" on a Qdrant server reached
//     over gRPC, with the payload fields of the system contract.
//
// Both refuse vectors that would silently poison results (wrong size, NaN or
// Inf components, all zeros), and both detect a change of embedding model or
// dimension in Ensure so the caller re-embeds everything instead of searching
// an index whose vectors no longer mean anything.
package vector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// VectorSource is an Index that can hand back its stored vectors (the in-process index): a caller that needs
// them again, such as the skill centroids, then reads them there instead of keeping a copy of every vector.
type VectorSource interface {
	EachVector(ids []uint64, fn func(id uint64, v []float32)) error
}

// Index stores tool embeddings and searches them by cosine similarity.
//
// It exists so the search engine does not care whether vectors live in this
// process or in Qdrant. Every method takes the context first and gives up when
// it is done. Implementations are safe for concurrent use.
//
// The life cycle is: Ensure (once at start, and again whenever the embedder
// changes), then any number of Upsert, Delete, DeleteByServer, SetPayload,
// Search and Count calls, then Close. Calls other than Ensure and Close made
// before the first successful Ensure fail with ErrNotEnsured.
type Index interface {
	// Ensure prepares the index for vectors described by spec. It creates the
	// collection if it is missing; if it exists but was built for another
	// dimension or model, it is dropped and recreated empty. rebuild is true
	// whenever the index is empty because it was just created or recreated:
	// the caller must then embed and upsert every tool. rebuild is false when
	// the existing vectors were made for spec; it says nothing about
	// completeness (a rebuild interrupted by a crash leaves a partial Qdrant
	// collection), so callers still reconcile with the store, e.g. by Count.
	// After a failed Ensure the data calls fail with ErrNotEnsured until an
	// Ensure succeeds: vectors of the new embedder must never land in, or
	// be searched against, an index built for the old one.
	Ensure(ctx context.Context, spec Spec) (rebuild bool, err error)

	// Upsert inserts or replaces points by ID. Every vector is validated
	// against the ensured dimension first; one invalid point fails the call
	// with ErrInvalidVector and nothing of the batch is stored.
	Upsert(ctx context.Context, points []Point) error

	// Delete removes the points with the given IDs; unknown IDs are ignored.
	Delete(ctx context.Context, ids []uint64) error

	// DeleteByServer removes every point whose SourceServerID is serverID,
	// used when a server is unregistered.
	DeleteByServer(ctx context.Context, serverID string) error

	// SetPayload replaces the payload of an existing point without touching
	// its vector (classification updates, renames). It fails with ErrNotFound
	// when the point does not exist.
	SetPayload(ctx context.Context, id uint64, payload Payload) error

	// Search returns at most limit points matching filter, ordered by
	// descending cosine similarity to vector (ties by ascending ID). The query
	// vector is validated like a stored one; limit must be positive.
	Search(ctx context.Context, vector []float32, filter Filter, limit int) ([]Hit, error)

	// Count returns the number of stored points.
	Count(ctx context.Context) (int, error)

	// Close releases the index's resources; later calls fail with ErrClosed.
	Close() error
}

// Spec describes the embeddings an index holds. It exists so that a change of
// embedding model or size is detected at start instead of mixing vectors from
// two models in one index.
type Spec struct {
	// Dimension is the length of every vector, the embedder's Dimension().
	Dimension int
	// Model identifies the embedder (its Model()); vectors from different
	// models are not comparable even when their sizes agree.
	Model string
}

// Validate reports whether the spec can describe an index.
func (s Spec) Validate() error {
	if s.Dimension <= 0 {
		return fmt.Errorf("vector: spec dimension %d: %w", s.Dimension, ErrInvalidSpec)
	}
	if s.Dimension > MaxDimension {
		return fmt.Errorf("vector: spec dimension %d above %d: %w", s.Dimension, MaxDimension, ErrInvalidSpec)
	}
	if s.Model == "" {
		return fmt.Errorf("vector: spec without model name: %w", ErrInvalidSpec)
	}
	if !utf8.ValidString(s.Model) {
		return fmt.Errorf("vector: spec model name is not valid UTF-8: %w", ErrInvalidSpec)
	}
	return nil
}

// MaxDimension bounds Spec.Dimension; it is Qdrant's limit for dense vectors
// and far above any text-embedding model.
const MaxDimension = 65536

// Point is one tool's embedding as stored in the index.
type Point struct {
	// ID is the tool's database id; it is also the Qdrant point id.
	ID uint64
	// Vector is the tool's embedding. It is not retained: the index copies
	// (and, for cosine similarity, normalises) it.
	Vector []float32
	// Payload carries what the ranking engine and filters need without a
	// database round trip.
	Payload Payload
}

// Payload is the per-tool metadata stored next to the vector. Its fields map
// to the Qdrant payload keys of the system contract (source_server_id,
// source_server_name, original_name, is_external, is_classified) plus the
// tool's namespaced name and skills.
type Payload struct {
	// ToolName is the namespaced canonical name, "{server}.{tool}".
	ToolName string
	// OriginalName is the tool's name on its own server.
	OriginalName string
	// SourceServerID is the registered server's id (a UUID).
	SourceServerID string
	// SourceServerName is the registered server's name.
	SourceServerName string
	// IsExternal is true for tools aggregated from MCP servers, false for the
	// aggregator's own meta-tools.
	IsExternal bool
	// IsClassified is true once the tool has been assigned skills.
	IsClassified bool
	// SkillIDs are the skills the tool was classified under.
	SkillIDs []string
	// PrimarySkillID is the tool's main skill, empty when unclassified.
	PrimarySkillID string
}

// clone returns a copy that shares no memory with p.
func (p Payload) clone() Payload {
	if p.SkillIDs != nil {
		p.SkillIDs = append([]string(nil), p.SkillIDs...)
	}
	return p
}

// validate rejects strings Qdrant cannot store, so both implementations accept
// exactly the same payloads.
func (p Payload) validate() error {
	for _, f := range [...]struct{ name, v string }{
		{"tool_name", p.ToolName},
		{"original_name", p.OriginalName},
		{"source_server_id", p.SourceServerID},
		{"source_server_name", p.SourceServerName},
		{"primary_skill_id", p.PrimarySkillID},
	} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("payload %s is not valid UTF-8: %w", f.name, ErrInvalidPayload)
		}
	}
	for i, s := range p.SkillIDs {
		if !utf8.ValidString(s) {
			return fmt.Errorf("payload skill_ids[%d] is not valid UTF-8: %w", i, ErrInvalidPayload)
		}
	}
	return nil
}

// Filter restricts a search. Empty slices and nil pointers mean "no
// restriction"; the fields that are set must all hold (AND), and a slice
// matches when the point's value is any of its elements (OR).
type Filter struct {
	// ServerIDs keeps points whose SourceServerID is one of these.
	ServerIDs []string
	// ServerNames keeps points whose SourceServerName is one of these.
	ServerNames []string
	// IsExternal, when set, keeps points whose IsExternal equals it.
	IsExternal *bool
	// Classified, when set, keeps points whose IsClassified equals it.
	Classified *bool
	// Keep, when set, keeps the points whose id it accepts (a caller's subset that no payload field describes).
	// The in-process index applies it exactly; Qdrant cannot run it, so the adapter asks Qdrant for
	// keepOversample times the limit and applies it to the answer.
	Keep func(id uint64) bool
}

// matches reports whether p passes the filter; it is the reference semantics
// that the Qdrant filter built by the adapter must reproduce.
func (f Filter) matches(p *Payload) bool {
	if len(f.ServerIDs) > 0 && !contains(f.ServerIDs, p.SourceServerID) {
		return false
	}
	if len(f.ServerNames) > 0 && !contains(f.ServerNames, p.SourceServerName) {
		return false
	}
	if f.IsExternal != nil && *f.IsExternal != p.IsExternal {
		return false
	}
	if f.Classified != nil && *f.Classified != p.IsClassified {
		return false
	}
	return true
}

func (f Filter) empty() bool {
	return len(f.ServerIDs) == 0 && len(f.ServerNames) == 0 && f.IsExternal == nil && f.Classified == nil && f.Keep == nil
}

// payloadEmpty reports whether the filter sets no payload condition (Keep aside).
func (f Filter) payloadEmpty() bool {
	return len(f.ServerIDs) == 0 && len(f.ServerNames) == 0 && f.IsExternal == nil && f.Classified == nil
}

// keepOversample is how many times the limit Qdrant is asked for when a Keep function filters its answer.
const keepOversample = 4

func contains(set []string, v string) bool {
	for _, s := range set {
		if s == v {
			return true
		}
	}
	return false
}

// Hit is one search result.
type Hit struct {
	// ID is the tool's database id.
	ID uint64
	// Score is the cosine similarity between the query and the tool's
	// vector, in [-1, 1]; higher is closer.
	Score float32
	// Payload is the point's payload at search time.
	Payload Payload
}

// Errors callers may test with errors.Is. They are sentinel values, never
// modified.
var (
	// ErrInvalidVector marks a vector that must not be stored or searched:
	// wrong size, NaN or infinite component, or all zeros.
	ErrInvalidVector = errors.New("invalid vector")
	// ErrInvalidPayload marks a payload string that is not valid UTF-8.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrInvalidSpec marks a Spec that cannot describe an index.
	ErrInvalidSpec = errors.New("invalid index spec")
	// ErrInvalidArgument marks another bad argument, such as a non-positive
	// search limit.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotEnsured is returned by data calls made before Ensure succeeded.
	ErrNotEnsured = errors.New("vector index not ensured")
	// ErrSpecChanged is returned by an Upsert that raced with an Ensure to
	// another spec: its vectors were validated for the previous embedder.
	ErrSpecChanged = errors.New("vector index re-ensured for another spec during the call")
	// ErrNotFound is returned by SetPayload for a point that does not exist.
	ErrNotFound = errors.New("point not found")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("vector index closed")
)

// ValidateVector reports whether v can be stored in (or searched against) an
// index of dimension dim: the right length, only finite components, and not
// all zeros (a zero vector has no direction, so its cosine similarity is
// undefined). The error wraps ErrInvalidVector.
func ValidateVector(v []float32, dim int) error {
	if len(v) != dim {
		return fmt.Errorf("dimension %d, index expects %d: %w", len(v), dim, ErrInvalidVector)
	}
	nonZero := false
	for i, x := range v {
		f := float64(x)
		if math.IsNaN(f) {
			return fmt.Errorf("component %d is NaN: %w", i, ErrInvalidVector)
		}
		if math.IsInf(f, 0) {
			return fmt.Errorf("component %d is infinite: %w", i, ErrInvalidVector)
		}
		if x != 0 {
			nonZero = true
		}
	}
	if !nonZero {
		return fmt.Errorf("all %d components are zero: %w", dim, ErrInvalidVector)
	}
	return nil
}

// validatePoints checks a whole batch before anything is stored.
func validatePoints(points []Point, dim int) error {
	for i := range points {
		if err := ValidateVector(points[i].Vector, dim); err != nil {
			return fmt.Errorf("point %d (id %d): %w", i, points[i].ID, err)
		}
		if err := points[i].Payload.validate(); err != nil {
			return fmt.Errorf("point %d (id %d): %w", i, points[i].ID, err)
		}
	}
	return nil
}

// norm is the Euclidean length of v, accumulated in float64: squares of
// finite float32 values neither overflow nor underflow to zero there, so a
// vector that passed ValidateVector always has a positive, finite norm.
func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// normalizeInto writes v / |v| into dst (len(dst) == len(v)). v must have
// passed ValidateVector.
func normalizeInto(dst, v []float32) {
	inv := 1 / norm(v)
	for i, x := range v {
		dst[i] = float32(float64(x) * inv)
	}
}
