package toolsearch

import (
	"context"
	"sync"

	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/vector"
)

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
	filter := vector.Filter{ServerIDs: f.ServerIDs}
	if allow := f.Allow; allow != nil {
		filter.Keep = func(id uint64) bool { return allow(int64(id)) }
	}
	hits, err := a.idx.Search(ctx, v, filter, limit)
	if err != nil {
		return nil, err
	}
	out := make([]search.VectorHit, len(hits))
	for i, h := range hits {
		out[i] = search.VectorHit{ID: int64(h.ID), Score: float64(h.Score)}
	}
	return out, nil
}

var _ search.VectorIndex = (*vectorAdapter)(nil)
