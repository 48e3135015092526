package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestPanickingServerActorRestartsAlone: the actor of one server panics twice; each time the supervisor restarts it
// after a backoff, its old session and child process are released (never two children), it reconnects by itself,
// and a sibling server keeps answering calls throughout.
func TestPanickingServerActorRestartsAlone(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := testConfig()
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	defer r.stop()

	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("panic-marker-%d", time.Now().UnixNano())
	victim := r.register("victim", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	sibling := r.register("sibling", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	r.waitStatus(victim.ID, persistence.StatusConnected, 30*time.Second)
	r.waitStatus(sibling.ID, persistence.StatusConnected, 30*time.Second)

	for crash := 0; crash < 2; crash++ {
		sys.CrashServerForTest(victim.ID)
		// Until the restarted actor reconnects: the sibling answers, and never two children for the victim. The
		// bound is liveness, not speed: a node child starting on a loaded 2-core machine has taken over 20 s.
		deadline := time.Now().Add(60 * time.Second)
		var lastRep any
		var lastErr error
		for {
			if time.Now().After(deadline) {
				t.Fatalf("the victim did not come back after crash %d: %v %v", crash+1, lastRep, lastErr)
			}
			mustEcho(t, r, sibling.ID, "still here")
			if n := len(peertest.ProcessesWithArg(marker)); n > 1 {
				t.Fatalf("%d child processes for one server: the crashed actor leaked its session", n)
			}
			rep, err := r.echo(victim.ID, "back?")
			if err == nil && rep.Error == nil {
				break
			}
			lastRep, lastErr = rep, err
			time.Sleep(20 * time.Millisecond)
		}
	}
	r.waitStatus(victim.ID, persistence.StatusConnected, 30*time.Second)
	mustEcho(t, r, victim.ID, "restarted")
	if n := len(peertest.ProcessesWithArg(marker)); n != 1 {
		t.Fatalf("%d child processes after restart, want exactly 1", n)
	}
	hist, _ := st.ListHistory(context.Background(), victim.ID, 100)
	restarts := 0
	for _, h := range hist {
		if h.EventType == persistence.StatusDisconnected {
			restarts++
		}
	}
	if restarts < 2 {
		t.Fatalf("history shows %d resets, want one per restart (2)", restarts)
	}
	if got, _ := st.GetServer(context.Background(), sibling.ID); got.Status != persistence.StatusConnected {
		t.Fatalf("sibling is %s", got.Status)
	}
}
