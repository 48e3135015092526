package actors

import (
	"context"
	"sync"

	"github.com/mcpgw/aggregator/actors/routing"
)

// servedBoard holds, per server, the newest version of its served tools the router published (routing.ServedDelta)
// and the newest the indexer acknowledged: a server's tools are searchable at version N once the indexer has
// acknowledged N. It outlives a restart of either actor, so that versions only grow. Safe for concurrent use.
type servedBoard struct {
	mu      sync.Mutex
	issued  map[string]uint64 // the router's counter (next)
	served  map[string]uint64 // published with a table
	indexed map[string]uint64 // acknowledged by the indexer
	changed chan struct{}     // closed and replaced when indexed moves
}

func newServedBoard() *servedBoard {
	return &servedBoard{issued: map[string]uint64{}, served: map[string]uint64{}, indexed: map[string]uint64{}, changed: make(chan struct{})}
}

// next is the version of a server's next delta.
func (b *servedBoard) next(id string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.issued[id]++
	return b.issued[id]
}

// current is the version of a server's newest delta issued (0: none).
func (b *servedBoard) current(id string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.issued[id]
}

// publish records a delta as served (its table is out).
func (b *servedBoard) publish(d *routing.ServedDelta) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served[d.ServerID] = max(b.served[d.ServerID], d.Version)
}

// ack records that the indexer applied a server's version.
func (b *servedBoard) ack(id string, version uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if version <= b.indexed[id] {
		return
	}
	b.indexed[id] = version
	close(b.changed)
	b.changed = make(chan struct{})
}

// forget drops a removed server.
func (b *servedBoard) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.issued, id)
	delete(b.served, id)
	delete(b.indexed, id)
	close(b.changed)
	b.changed = make(chan struct{})
}

// versions returns a server's served and indexed versions.
func (b *servedBoard) versions(id string) (served, indexed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served[id], b.indexed[id]
}

// awaitIndexed waits until the indexer has acknowledged every version served now (ids nil: of every server), or
// ctx ends.
func (b *servedBoard) awaitIndexed(ctx context.Context, ids []string) error {
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

// ServedVersion is the version of a server's served tools in the routing table, and the version the search index
// has acknowledged: its tools are searchable as served once indexed reaches served (both 0: it serves no tools,
// or has not been loaded yet).
func (s *System) ServedVersion(id string) (served, indexed uint64) { return s.served.versions(id) }

// AwaitSearchable waits until the search index has acknowledged the served tools of the given servers (nil: of
// every server) as the routing table has them now, or ctx ends.
func (s *System) AwaitSearchable(ctx context.Context, ids []string) error {
	return s.served.awaitIndexed(ctx, ids)
}
