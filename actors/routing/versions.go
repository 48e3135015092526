package routing

import (
	"context"
	"sync"
)

// Versions holds, per server, the newest version of its served tools the router issued and published
// (ServedDelta) and the newest the search index acknowledged: a server's tools are searchable at version N once
// the index has acknowledged N. The router issues and publishes, the indexer acknowledges; the board outlives a
// restart of either, so that versions only grow. Safe for concurrent use.
type Versions struct {
	mu      sync.Mutex
	issued  map[string]uint64 // the router's counter (Next)
	served  map[string]uint64 // published with a table
	indexed map[string]uint64 // acknowledged by the indexer
	changed chan struct{}     // closed and replaced when indexed moves
}

// NewVersions returns an empty board.
func NewVersions() *Versions {
	return &Versions{issued: map[string]uint64{}, served: map[string]uint64{}, indexed: map[string]uint64{}, changed: make(chan struct{})}
}

// Next issues the version of a server's next delta.
func (b *Versions) Next(id string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.issued[id]++
	return b.issued[id]
}

// Current is the version of a server's newest delta issued (0: none).
func (b *Versions) Current(id string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.issued[id]
}

// Publish records a delta as served (its table is out).
func (b *Versions) Publish(d *ServedDelta) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served[d.ServerID] = max(b.served[d.ServerID], d.Version)
}

// Ack records that the index applied a server's version.
func (b *Versions) Ack(id string, version uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if version <= b.indexed[id] {
		return
	}
	b.indexed[id] = version
	close(b.changed)
	b.changed = make(chan struct{})
}

// Forget drops a removed server.
func (b *Versions) Forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.issued, id)
	delete(b.served, id)
	delete(b.indexed, id)
	close(b.changed)
	b.changed = make(chan struct{})
}

// Of returns a server's served and indexed versions.
func (b *Versions) Of(id string) (served, indexed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served[id], b.indexed[id]
}

// AwaitIndexed waits until the index has acknowledged every version served now (ids nil: of every server), or
// ctx ends. A server forgotten meanwhile no longer counts.
func (b *Versions) AwaitIndexed(ctx context.Context, ids []string) error {
	b.mu.Lock()
	want := map[string]uint64{}
	if ids == nil {
		for id, v := range b.served {
			want[id] = v
		}
	} else {
		for _, id := range ids {
			want[id] = b.served[id]
		}
	}
	b.mu.Unlock()
	for {
		b.mu.Lock()
		done := true
		for id, v := range want {
			if _, live := b.served[id]; live && b.indexed[id] < v {
				done = false
				break
			}
		}
		ch := b.changed
		b.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
