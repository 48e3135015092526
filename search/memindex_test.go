package search

import (
	"context"
	"slices"
	"sync"
)

// memIndex is a tiny exact VectorIndex for tests and benchmarks: a linear scan of dot products (vectors are
// unit-length) keeping the best hits in a small sorted buffer.
type memIndex struct {
	mu     sync.RWMutex
	ids    []int64
	srv    []string
	vecs   [][]float32
	pos    map[int64]int
	failAt func(op string) error // optional fault injection
}

func newMemIndex() *memIndex { return &memIndex{pos: make(map[int64]int)} }

func (m *memIndex) Upsert(ctx context.Context, points []VectorPoint) error {
	if m.failAt != nil {
		if err := m.failAt("upsert"); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range points {
		if i, ok := m.pos[p.ID]; ok {
			m.srv[i], m.vecs[i] = p.ServerID, slices.Clone(p.Vector)
			continue
		}
		m.pos[p.ID] = len(m.ids)
		m.ids = append(m.ids, p.ID)
		m.srv = append(m.srv, p.ServerID)
		m.vecs = append(m.vecs, slices.Clone(p.Vector))
	}
	return nil
}

func (m *memIndex) Delete(ctx context.Context, ids []int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		i, ok := m.pos[id]
		if !ok {
			continue
		}
		last := len(m.ids) - 1
		m.ids[i], m.srv[i], m.vecs[i] = m.ids[last], m.srv[last], m.vecs[last]
		m.pos[m.ids[i]] = i
		m.ids, m.srv, m.vecs = m.ids[:last], m.srv[:last], m.vecs[:last]
		delete(m.pos, id)
	}
	return nil
}

func (m *memIndex) Search(ctx context.Context, vec []float32, f VectorFilter, limit int) ([]VectorHit, error) {
	if m.failAt != nil {
		if err := m.failAt("search"); err != nil {
			return nil, err
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	hits := make([]VectorHit, 0, limit+1)
	for i, v := range m.vecs {
		if len(f.ServerIDs) > 0 && !slices.Contains(f.ServerIDs, m.srv[i]) {
			continue
		}
		s := float64(dot(v, vec))
		if len(hits) == limit && cmpScore(s, hits[limit-1].Score, m.ids[i], hits[limit-1].ID) >= 0 {
			continue
		}
		at, _ := slices.BinarySearchFunc(hits, VectorHit{ID: m.ids[i], Score: s}, func(a, b VectorHit) int {
			return cmpScore(a.Score, b.Score, a.ID, b.ID)
		})
		hits = slices.Insert(hits, at, VectorHit{ID: m.ids[i], Score: s})
		if len(hits) > limit {
			hits = hits[:limit]
		}
	}
	return hits, nil
}

func (m *memIndex) len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.ids)
}

// dot is a 4-way unrolled dot product.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}
