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

// storeRig starts a system on a fresh SQLite store seen through wrap (a store in trouble); the rig reads the store
// itself. Both stop when the test ends.
func storeRig(t *testing.T, cfg actors.Config, wrap func(persistence.Store) persistence.Store) *rig {
	t.Helper()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sys, err := actors.Start(context.Background(), actors.Deps{Store: wrap(st), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	t.Cleanup(r.stop)
	return r
}

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
	var ss *slowStore
	cfg := testConfig()
	cfg.HealthInterval = 100 * time.Millisecond // a health record to write every 100 ms
	r := storeRig(t, cfg, func(st persistence.Store) persistence.Store {
		ss = &slowStore{Store: st, delay: 2 * time.Second}
		return ss
	})
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

// failingToolsStore fails the first writes of every server's tools, as a store in trouble (or one too slow for its
// deadline) would.
type failingToolsStore struct {
	persistence.Store
	fail  atomic.Int64 // writes left to fail
	tries atomic.Int64
}

func (s *failingToolsStore) ReplaceServerTools(ctx context.Context, id string, defs []persistence.ToolDef, fence *persistence.Lease) (persistence.ToolDiff, error) {
	s.tries.Add(1)
	if s.fail.Add(-1) >= 0 {
		return persistence.ToolDiff{}, fmt.Errorf("insert tools: %w", context.DeadlineExceeded)
	}
	return s.Store.ReplaceServerTools(ctx, id, defs, fence)
}

// TestDiscoveryStoreFailureIsRunAgain: a first discovery that listed the tools but could not store them lets the
// server enter CONNECTED (its session works), and the discovery runs again until the tools are stored, so they
// become routable without a reconnect or a list_changed.
func TestDiscoveryStoreFailureIsRunAgain(t *testing.T) {
	t.Parallel()
	var fs *failingToolsStore
	cfg := testConfig()
	r := storeRig(t, cfg, func(st persistence.Store) persistence.Store {
		fs = &failingToolsStore{Store: st}
		fs.fail.Store(2)
		return fs
	})
	sys := r.sys
	cmd, args := peertest.EverythingStdio(t)
	srv := r.register("flaky", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	connected := r.waitServer(srv.ID, persistence.StatusConnected, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		total, _ := sys.Routes().ToolCountsWhere(func(id string) bool { return id == srv.ID })
		if total > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool routable 20 s after CONNECTED (%d tool writes tried)", fs.tries.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := fs.tries.Load(); n < 3 {
		t.Fatalf("%d tool writes, want the 2 failed ones and a successful one", n)
	}
	mustEcho(t, r, srv.ID, "stored at last")
	if s := r.waitServer(srv.ID, persistence.StatusConnected, time.Second); s.ConnectedAt == nil || !s.ConnectedAt.Equal(*connected.ConnectedAt) {
		t.Fatalf("server connected at %v, then at %v: the tools came with a reconnect", connected.ConnectedAt, s.ConnectedAt)
	}
}

// flakyTransitionStore fails the first writes of a server's state changes to CONNECTED, as a store busy past a
// write's deadline would.
type flakyTransitionStore struct {
	persistence.Store
	fail  atomic.Int64 // writes left to fail
	tries atomic.Int64
}

func (s *flakyTransitionStore) RecordTransition(ctx context.Context, t persistence.Transition) error {
	if t.To == persistence.StatusConnected {
		s.tries.Add(1)
		if s.fail.Add(-1) >= 0 {
			return fmt.Errorf("record transition: %w", context.DeadlineExceeded)
		}
	}
	return s.Store.RecordTransition(ctx, t)
}

// TestTransitionWriteIsTriedAgain: a state change whose write fails (not for the lease) is written again, so the
// stored row does not stay in the state before (seen under load: a server serving calls, its row CONNECTING).
func TestTransitionWriteIsTriedAgain(t *testing.T) {
	t.Parallel()
	var fs *flakyTransitionStore
	cfg := testConfig()
	r := storeRig(t, cfg, func(st persistence.Store) persistence.Store {
		fs = &flakyTransitionStore{Store: st}
		fs.fail.Store(2)
		return fs
	})
	cmd, args := peertest.EverythingStdio(t)
	srv := r.register("busy-store", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	r.waitServer(srv.ID, persistence.StatusConnected, 30*time.Second)
	if n := fs.tries.Load(); n != 3 {
		t.Fatalf("%d writes of CONNECTED, want the 2 failed ones and one that worked", n)
	}
}

// leaseLostToolsStore refuses every write of a server's tools under the first lease the process took, as fenced
// writes that find the lease gone would (it lapsed while the process's renewals waited behind the store's writer):
// only a lease asked for again makes them succeed.
type leaseLostToolsStore struct {
	persistence.Store
	takes atomic.Int64
	tries atomic.Int64
}

func (s *leaseLostToolsStore) TakeOverLease(ctx context.Context, id, owner, from string, ttl time.Duration) (persistence.Lease, error) {
	s.takes.Add(1)
	return s.Store.TakeOverLease(ctx, id, owner, from, ttl)
}

func (s *leaseLostToolsStore) ReplaceServerTools(ctx context.Context, id string, defs []persistence.ToolDef, fence *persistence.Lease) (persistence.ToolDiff, error) {
	s.tries.Add(1)
	if s.takes.Load() < 2 {
		return persistence.ToolDiff{}, fmt.Errorf("replace tools: %w", persistence.ErrLeaseLost)
	}
	return s.Store.ReplaceServerTools(ctx, id, defs, fence)
}

// TestDiscoveryLeaseLostRestartsTheSession: a discovery whose tool write finds the server's lease gone gives the
// session up (the actor is told, as when the keeper cannot renew), and the new session under the lease taken again
// lists and stores the tools. Before, the server stayed CONNECTED with no tools for good.
func TestDiscoveryLeaseLostRestartsTheSession(t *testing.T) {
	t.Parallel()
	var fs *leaseLostToolsStore
	cfg := testConfig()
	r := storeRig(t, cfg, func(st persistence.Store) persistence.Store {
		fs = &leaseLostToolsStore{Store: st}
		return fs
	})
	sys := r.sys
	cmd, args := peertest.EverythingStdio(t)
	srv := r.register("lapsed", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		total, _ := sys.Routes().ToolCountsWhere(func(id string) bool { return id == srv.ID })
		if total > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool routable 30 s after registration (%d tool writes tried, lease taken %d times)", fs.tries.Load(), fs.takes.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.waitServer(srv.ID, persistence.StatusConnected, 10*time.Second)
	mustEcho(t, r, srv.ID, "after the lease came back")
}
