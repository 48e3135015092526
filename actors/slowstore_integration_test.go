package actors_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// slowStore answers every status and health write about one server after a delay, the way a database in trouble
// would.
type slowStore struct {
	persistence.Store
	slow  atomic.Value // server id
	delay time.Duration
	hits  atomic.Int64
}

func (s *slowStore) wait(id string) {
	if v, _ := s.slow.Load().(string); v == id {
		s.hits.Add(1)
		time.Sleep(s.delay)
	}
}

func (s *slowStore) RecordHealth(ctx context.Context, h persistence.HealthRecord) error {
	s.wait(h.ServerID)
	return s.Store.RecordHealth(ctx, h)
}

func (s *slowStore) RecordTransition(ctx context.Context, t persistence.Transition) error {
	s.wait(t.ServerID)
	return s.Store.RecordTransition(ctx, t)
}

// TestSlowStoreStallsNoCall: while every status and health write about one server takes 2 s, calls to that server
// and to another one still answer at once: the server actors write the store off their mailboxes.
func TestSlowStoreStallsNoCall(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ss := &slowStore{Store: st, delay: 2 * time.Second}
	cfg := testConfig()
	cfg.HealthInterval = 100 * time.Millisecond // a health record to write every 100 ms
	sys, err := actors.Start(context.Background(), actors.Deps{Store: ss, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	defer r.stop()
	cmd, args := peertest.EverythingStdio(t)
	slow := r.register("slow", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	other := r.register("other", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	r.waitStatus(slow.ID, persistence.StatusConnected, 30*time.Second)
	r.waitStatus(other.ID, persistence.StatusConnected, 30*time.Second)

	ss.slow.Store(slow.ID)
	until := time.Now().Add(3 * time.Second)
	worst := time.Duration(0)
	for i := 0; time.Now().Before(until); i++ {
		for _, id := range []string{slow.ID, other.ID} {
			start := time.Now()
			mustEcho(t, r, id, fmt.Sprintf("call %d", i))
			if took := time.Since(start); took > worst {
				worst = took
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ss.hits.Load() < 1 {
		t.Fatalf("only %d slow writes happened: the test did not exercise the slow store", ss.hits.Load())
	}
	if worst > time.Second {
		t.Fatalf("a call took %v while the store was slow for one server, want well under the 2 s write", worst)
	}
	t.Logf("%d slow writes; the slowest call took %v", ss.hits.Load(), worst)
}
