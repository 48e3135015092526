package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// leaseTTL is long enough for a test's steps and short enough to sleep past.
const leaseTTL = 300 * time.Millisecond

func mustAcquire(t *testing.T, s persistence.Store, id, owner string, ttl time.Duration) persistence.Lease {
	t.Helper()
	l, err := s.AcquireLease(t.Context(), id, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", id, owner, err)
	}
	if l.ServerID != id || l.Owner != owner || l.Epoch < 1 || !l.ExpiresAt.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("AcquireLease(%q, %q) = %+v", id, owner, l)
	}
	return l
}

// testLeaseOwnership walks a server's lease through its life: taken, re-taken by its owner (same epoch), refused to
// another owner while live, taken over (epoch + 1) once expired, renewed only by its current owner, released, and
// taken again with a higher epoch.
func testLeaseOwnership(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "leased")

	a1 := mustAcquire(t, s, srv.ID, "node-a", leaseTTL)
	if a1.Epoch != 1 {
		t.Errorf("first epoch %d, want 1", a1.Epoch)
	}
	a2 := mustAcquire(t, s, srv.ID, "node-a", time.Minute)
	if a2.Epoch != a1.Epoch || !a2.ExpiresAt.After(a1.ExpiresAt) {
		t.Errorf("re-acquire by the owner = %+v after %+v: want the same epoch, a later expiry", a2, a1)
	}
	holder, err := s.AcquireLease(ctx, srv.ID, "node-b", leaseTTL)
	if !errors.Is(err, persistence.ErrLeaseHeld) || holder.Owner != "node-a" || holder.Epoch != a2.Epoch {
		t.Fatalf("AcquireLease by another owner while held = %+v, %v; want ErrLeaseHeld naming node-a", holder, err)
	}
	// Shorten a's lease, let it lapse; b takes over with the next epoch.
	a3 := mustAcquire(t, s, srv.ID, "node-a", leaseTTL)
	time.Sleep(leaseTTL + 50*time.Millisecond)
	b1 := mustAcquire(t, s, srv.ID, "node-b", time.Minute)
	if b1.Epoch != a3.Epoch+1 {
		t.Errorf("takeover epoch %d, want %d", b1.Epoch, a3.Epoch+1)
	}
	if got, err := s.RenewLeases(ctx, "node-a", time.Minute); err != nil || len(got) != 0 {
		t.Errorf("RenewLeases of the old owner = %+v, %v; want none", got, err)
	}
	renewed, err := s.RenewLeases(ctx, "node-b", 2*time.Minute)
	if err != nil || len(renewed) != 1 || renewed[0].ServerID != srv.ID || renewed[0].Epoch != b1.Epoch ||
		!renewed[0].ExpiresAt.After(b1.ExpiresAt) {
		t.Fatalf("RenewLeases of the owner = %+v, %v; want the lease, extended", renewed, err)
	}
	// Releasing an old lease does nothing; releasing the current one frees the server at once.
	if err := s.ReleaseLease(ctx, a3); err != nil {
		t.Fatalf("ReleaseLease of a lost lease: %v", err)
	}
	if _, err := s.AcquireLease(ctx, srv.ID, "node-c", time.Minute); !errors.Is(err, persistence.ErrLeaseHeld) {
		t.Fatalf("release of a lost lease freed the server: %v", err)
	}
	if err := s.ReleaseLease(ctx, b1); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	c1 := mustAcquire(t, s, srv.ID, "node-c", time.Minute)
	if c1.Epoch != b1.Epoch+1 {
		t.Errorf("epoch after release %d, want %d", c1.Epoch, b1.Epoch+1)
	}

	leases, now, err := s.ListLeases(ctx)
	if err != nil || len(leases) != 1 || leases[0].Owner != "node-c" || !leases[0].ExpiresAt.After(now) {
		t.Fatalf("ListLeases = %+v (now %v), %v", leases, now, err)
	}
	if _, err := s.AcquireLease(ctx, "00000000-0000-4000-8000-000000000000", "node-a", time.Minute); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("AcquireLease of an unknown server: %v, want ErrNotFound", err)
	}
	if _, err := s.AcquireLease(ctx, "not-a-uuid", "node-a", time.Minute); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("AcquireLease of a malformed id: %v, want ErrNotFound", err)
	}
	// The lease goes with its server.
	if err := s.DeleteServer(ctx, srv.ID); err != nil {
		t.Fatal(err)
	}
	if leases, _, err := s.ListLeases(ctx); err != nil || len(leases) != 0 {
		t.Errorf("leases after delete = %+v, %v; want none", leases, err)
	}
}

// testReleaseOwnerLeases: a clean shutdown frees every server of its owner and no other's.
func testReleaseOwnerLeases(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	var mine []persistence.Lease
	for i := range 3 {
		mine = append(mine, mustAcquire(t, s, mustCreate(t, s, fmt.Sprintf("mine-%d", i)).ID, "node-a", time.Minute))
	}
	other := mustAcquire(t, s, mustCreate(t, s, "theirs").ID, "node-b", time.Minute)
	if n, err := s.ReleaseOwnerLeases(ctx, "node-a"); err != nil || n != 3 {
		t.Fatalf("ReleaseOwnerLeases = %d, %v; want 3", n, err)
	}
	if n, err := s.ReleaseOwnerLeases(ctx, "node-a"); err != nil || n != 0 {
		t.Errorf("second ReleaseOwnerLeases = %d, %v; want 0", n, err)
	}
	for _, l := range mine {
		mustAcquire(t, s, l.ServerID, "node-c", time.Minute)
	}
	if _, err := s.AcquireLease(ctx, other.ServerID, "node-c", time.Minute); !errors.Is(err, persistence.ErrLeaseHeld) {
		t.Errorf("another owner's lease was released: %v", err)
	}
}

// testFencedWrites: a status, health or tools write fenced by a lease that is no longer current writes nothing and
// says ErrLeaseLost; fenced by the current lease, it is made.
func testFencedWrites(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "fenced")
	old := mustAcquire(t, s, srv.ID, "node-a", leaseTTL)
	time.Sleep(leaseTTL + 50*time.Millisecond)
	cur := mustAcquire(t, s, srv.ID, "node-b", time.Minute)
	mustReplace(t, s, srv.ID, []persistence.ToolDef{toolDef("kept", "", "")})
	before := mustGet(t, s, srv.ID)

	stale := []struct {
		name  string
		fence persistence.Lease
	}{
		{"old epoch", old},
		{"right epoch, other owner", persistence.Lease{ServerID: srv.ID, Owner: "node-a", Epoch: cur.Epoch}},
		{"right owner, other epoch", persistence.Lease{ServerID: srv.ID, Owner: "node-b", Epoch: cur.Epoch + 1}},
	}
	for _, tc := range stale {
		t.Run(tc.name, func(t *testing.T) {
			fence := tc.fence
			err := s.RecordTransition(ctx, persistence.Transition{ServerID: srv.ID, From: before.Status,
				To: persistence.StatusConnecting, Reason: "stale", Fence: &fence})
			if !errors.Is(err, persistence.ErrLeaseLost) {
				t.Errorf("RecordTransition: %v, want ErrLeaseLost", err)
			}
			err = s.RecordHealth(ctx, persistence.HealthRecord{ServerID: srv.ID, ConsecutiveFailures: 7, Fence: &fence})
			if !errors.Is(err, persistence.ErrLeaseLost) {
				t.Errorf("RecordHealth: %v, want ErrLeaseLost", err)
			}
			_, err = s.ReplaceServerTools(ctx, srv.ID, []persistence.ToolDef{toolDef("stale", "", "")}, &fence)
			if !errors.Is(err, persistence.ErrLeaseLost) {
				t.Errorf("ReplaceServerTools: %v, want ErrLeaseLost", err)
			}
			after := mustGet(t, s, srv.ID)
			if after.Status != before.Status || after.ConsecutiveFailures != before.ConsecutiveFailures ||
				!slices.Equal(toolNames(mustTools(t, s, srv.ID)), []string{"fenced.kept"}) {
				t.Errorf("a stale write changed the server: %+v, tools %v", after, toolNames(mustTools(t, s, srv.ID)))
			}
			if h, err := s.ListHistory(ctx, srv.ID, 0); err != nil || len(h) != 0 {
				t.Errorf("a stale transition left history %+v, %v", h, err)
			}
		})
	}

	if err := s.RecordTransition(ctx, persistence.Transition{ServerID: srv.ID, From: before.Status,
		To: persistence.StatusConnecting, Reason: "owner", Fence: &cur}); err != nil {
		t.Fatalf("RecordTransition fenced by the current lease: %v", err)
	}
	if err := s.RecordHealth(ctx, persistence.HealthRecord{ServerID: srv.ID, ConsecutiveFailures: 2, Fence: &cur}); err != nil {
		t.Fatalf("RecordHealth fenced by the current lease: %v", err)
	}
	if _, err := s.ReplaceServerTools(ctx, srv.ID, []persistence.ToolDef{toolDef("new", "", "")}, &cur); err != nil {
		t.Fatalf("ReplaceServerTools fenced by the current lease: %v", err)
	}
	if got := mustGet(t, s, srv.ID); got.Status != persistence.StatusConnecting || got.ConsecutiveFailures != 2 ||
		!slices.Equal(toolNames(mustTools(t, s, srv.ID)), []string{"fenced.new"}) {
		t.Errorf("writes of the owner not made: %+v", got)
	}
	// Released, the lease fences nothing any more.
	if err := s.ReleaseLease(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordHealth(ctx, persistence.HealthRecord{ServerID: srv.ID, Fence: &cur}); !errors.Is(err, persistence.ErrLeaseLost) {
		t.Errorf("RecordHealth fenced by a released lease: %v, want ErrLeaseLost", err)
	}
}

// testConcurrentAcquire: owners racing for a free server get exactly one winner, round after round.
func testConcurrentAcquire(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "contended")
	const owners, rounds = 8, 20
	var lastEpoch int64
	for round := range rounds {
		var wg sync.WaitGroup
		won := make([]persistence.Lease, owners)
		errs := make([]error, owners)
		for i := range owners {
			wg.Go(func() {
				won[i], errs[i] = s.AcquireLease(t.Context(), srv.ID, fmt.Sprintf("r%d-owner-%d", round, i), time.Minute)
			})
		}
		wg.Wait()
		var winner *persistence.Lease
		for i, err := range errs {
			switch {
			case err == nil && winner != nil:
				t.Fatalf("round %d: two winners, %s and %s", round, winner.Owner, won[i].Owner)
			case err == nil:
				winner = &won[i]
			case !errors.Is(err, persistence.ErrLeaseHeld):
				t.Fatalf("round %d: owner %d: %v", round, i, err)
			}
		}
		if winner == nil {
			t.Fatalf("round %d: no winner", round)
		}
		for i, err := range errs {
			if err != nil && won[i].Owner != winner.Owner {
				t.Errorf("round %d: loser told the holder is %q, winner is %q", round, won[i].Owner, winner.Owner)
			}
		}
		if winner.Epoch != lastEpoch+1 {
			t.Errorf("round %d: epoch %d, want %d", round, winner.Epoch, lastEpoch+1)
		}
		lastEpoch = winner.Epoch
		if err := s.ReleaseLease(t.Context(), *winner); err != nil {
			t.Fatal(err)
		}
	}
}

// testNodes: heartbeats make a node listed while it is alive; it drops out once silent, or at once when removed.
func testNodes(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	if err := s.Heartbeat(ctx, persistence.Node{ID: "n1", Address: "http://127.0.0.1:1/mcp"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(leaseTTL)
	if err := s.Heartbeat(ctx, persistence.Node{ID: "n2", Address: "http://127.0.0.1:2/mcp"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, persistence.Node{ID: "n2", Address: "http://127.0.0.1:3/mcp"}); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.ListNodes(ctx, time.Minute)
	if err != nil || len(nodes) != 2 || nodes[0].ID != "n2" || nodes[0].Address != "http://127.0.0.1:3/mcp" || nodes[1].ID != "n1" {
		t.Fatalf("ListNodes = %+v, %v; want n2 (moved) then n1", nodes, err)
	}
	if nodes, err := s.ListNodes(ctx, leaseTTL/2); err != nil || len(nodes) != 1 || nodes[0].ID != "n2" {
		t.Errorf("ListNodes(recent) = %+v, %v; want n2 alone", nodes, err)
	}
	if err := s.RemoveNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if nodes, err := s.ListNodes(ctx, time.Minute); err != nil || len(nodes) != 1 || nodes[0].ID != "n1" {
		t.Errorf("ListNodes after remove = %+v, %v", nodes, err)
	}
}

// testTakeOverLease: a lease whose owner is known to be gone (from) can be taken before it lapses, with the next
// epoch; the departed owner's renewals then find nothing; naming an owner that does not hold it takes nothing;
// GetLease reads the row with the database's time.
func testTakeOverLease(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "taken")
	if _, _, err := s.GetLease(ctx, srv.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("GetLease before any lease: %v, want ErrNotFound", err)
	}
	a := mustAcquire(t, s, srv.ID, "node-a", time.Hour)
	got, now, err := s.GetLease(ctx, srv.ID)
	if err != nil || got.Owner != "node-a" || got.Epoch != a.Epoch || !got.ExpiresAt.After(now) || now.IsZero() {
		t.Fatalf("GetLease = %+v at %v, %v; want node-a's live lease", got, now, err)
	}
	if held, err := s.TakeOverLease(ctx, srv.ID, "node-b", "node-c", time.Minute); !errors.Is(err, persistence.ErrLeaseHeld) || held.Owner != "node-a" {
		t.Fatalf("TakeOverLease from an owner that does not hold it = %+v, %v; want ErrLeaseHeld naming node-a", held, err)
	}
	b, err := s.TakeOverLease(ctx, srv.ID, "node-b", "node-a", time.Minute)
	if err != nil || b.Owner != "node-b" || b.Epoch != a.Epoch+1 {
		t.Fatalf("TakeOverLease from the departed owner = %+v, %v; want node-b at epoch %d", b, err, a.Epoch+1)
	}
	if renewed, err := s.RenewLeases(ctx, "node-a", time.Minute); err != nil || len(renewed) != 0 {
		t.Errorf("the departed owner renewed %+v, %v; want nothing", renewed, err)
	}
	if again, err := s.TakeOverLease(ctx, srv.ID, "node-b", "node-a", time.Minute); err != nil || again.Epoch != b.Epoch {
		t.Errorf("the new owner taking its own lease again = %+v, %v; want the same epoch %d", again, err, b.Epoch)
	}
	if _, err := s.TakeOverLease(ctx, "00000000-0000-4000-8000-000000000000", "node-b", "node-a", time.Minute); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("TakeOverLease of an unknown server: %v, want ErrNotFound", err)
	}
}

// testServerLimit: with a limit, registrations racing for the last free places get exactly that many through;
// the rest fail with ErrLimitReached, and nothing beyond the limit is stored.
func testServerLimit(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	const limit = 5
	for i := 0; i < limit-2; i++ {
		srv := newServer(fmt.Sprintf("pre-%d", i))
		if err := s.CreateServer(ctx, srv, limit); err != nil {
			t.Fatalf("CreateServer under the limit: %v", err)
		}
	}
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateServer(ctx, newServer(fmt.Sprintf("racer-%d", i)), limit)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, persistence.ErrLimitReached):
			t.Errorf("CreateServer at the limit: %v, want ErrLimitReached", err)
		}
	}
	_, total, err := s.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil || ok != 2 || total != limit {
		t.Fatalf("%d of %d racers got through, %d servers stored (%v); want 2 and %d", ok, racers, total, err, limit)
	}
	if err := s.CreateServer(ctx, newServer("unlimited"), 0); err != nil {
		t.Errorf("CreateServer without a limit: %v", err)
	}
}

// testLapsedLeaseRenewed: a lease that lapsed while its owner could not reach the store, and that nobody took over
// or released since, still fences its owner's writes and is its owner's again at the next renewal (same epoch: its
// fenced writes go on); one taken over or released is not, and a released lease names no owner.
func testLapsedLeaseRenewed(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	kept := mustAcquire(t, s, mustCreate(t, s, "lapsed-kept").ID, "node-a", leaseTTL)
	taken := mustAcquire(t, s, mustCreate(t, s, "lapsed-taken").ID, "node-a", leaseTTL)
	released := mustAcquire(t, s, mustCreate(t, s, "lapsed-released").ID, "node-a", leaseTTL)
	time.Sleep(leaseTTL + 50*time.Millisecond)
	// Lapsed and not taken over: the owner's fenced write goes through before any renewal (the store's return after
	// an outage, before the keeper's next tick).
	if err := s.ReplaceServerFeatures(ctx, kept.ServerID, nil, &kept); err != nil {
		t.Errorf("a write fenced by a lapsed lease nobody took over: %v", err)
	}
	b := mustAcquire(t, s, taken.ServerID, "node-b", time.Minute)
	if err := s.ReplaceServerFeatures(ctx, taken.ServerID, nil, &taken); !errors.Is(err, persistence.ErrLeaseLost) {
		t.Errorf("a write fenced by a lapsed lease taken over, before any renewal: %v, want ErrLeaseLost", err)
	}
	if err := s.ReleaseLease(ctx, released); err != nil {
		t.Fatalf("ReleaseLease of a lapsed lease: %v", err)
	}
	renewed, err := s.RenewLeases(ctx, "node-a", time.Minute)
	if err != nil || len(renewed) != 1 || renewed[0].ServerID != kept.ServerID || renewed[0].Epoch != kept.Epoch {
		t.Fatalf("RenewLeases after a lapse = %+v, %v; want only %s at epoch %d", renewed, err, kept.ServerID, kept.Epoch)
	}
	if err := s.ReplaceServerFeatures(ctx, kept.ServerID, nil, &kept); err != nil {
		t.Errorf("a write fenced by the lease renewed after its lapse: %v", err)
	}
	if err := s.ReplaceServerFeatures(ctx, taken.ServerID, nil, &taken); !errors.Is(err, persistence.ErrLeaseLost) {
		t.Errorf("a write fenced by the lease taken over: %v, want ErrLeaseLost", err)
	}
	if l, now, err := s.GetLease(ctx, released.ServerID); err != nil || l.Owner != "" || l.ExpiresAt.After(now) {
		t.Errorf("released lease = %+v at %v, %v; want no owner, expired", l, now, err)
	}
	if c, err := s.AcquireLease(ctx, released.ServerID, "node-c", time.Minute); err != nil || c.Epoch != released.Epoch+1 {
		t.Errorf("AcquireLease of a released lease = %+v, %v; want epoch %d", c, err, released.Epoch+1)
	}
	if got, err := s.RenewLeases(ctx, "node-b", time.Minute); err != nil || len(got) != 1 || got[0].Epoch != b.Epoch {
		t.Errorf("RenewLeases of the taker = %+v, %v", got, err)
	}
}
