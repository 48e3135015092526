package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/supervision"
)

// TestCrashingPlacementIsSupervisedWithBackoff: the placement actor (the parent of every server actor) crashes 15
// times in a row, more than protoactor's default of 10 restarts in 10 s after which it would stay stopped (and no
// server could be activated on the node again). Our strategy restarts it every time and counts each restart under
// kind "placement"; the server actor it hosted goes with it and is forgotten, and a server is activated again
// afterwards.
func TestCrashingPlacementIsSupervisedWithBackoff(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := metrics.New(func() metrics.Snapshot { return metrics.Snapshot{} })
	cfg := DefaultConfig()
	cfg.Restart = supervision.Backoff{Initial: 2 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}
	sys, err := Start(context.Background(), Deps{Store: st, Config: cfg, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	}()
	ctx := context.Background()
	srv, err := sys.Register(ctx, RegisterRequest{Name: "hosted", TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"base_url":"http://127.0.0.1:1/mcp"}`)})
	if err != nil {
		t.Fatal(err)
	}
	before, err := sys.activateLocal(ctx, srv.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	const crashes = 15
	for i := 0; i < crashes; i++ {
		sys.sys.Root.Send(sys.placement, &panicForTest{})
		// Wait for the restart before the next crash, so each one counts as its own failure.
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(m.ActorRestarts.WithLabelValues("placement")) < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("crash %d was not followed by a restart", i+1)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if _, err := sys.askActor(ctx, sys.placement, &readyMsg{}, 10*time.Second); err != nil {
			t.Fatalf("the placement does not answer after crash %d: %v", i+1, err)
		}
	}
	if got := testutil.ToFloat64(m.ActorRestarts.WithLabelValues("placement")); got != crashes {
		t.Fatalf("restart metric for placement = %v, want %d", got, crashes)
	}
	// The server actor went with the first restart, and the node forgot it.
	if _, ok := sys.hostedPID(srv.ID); ok {
		t.Fatal("the node still lists a server actor that stopped with the placement")
	}
	if _, err := sys.askActor(ctx, before, &pb.GetStatus{}, 10*time.Second); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("the server actor hosted before the crashes answers %v; want it stopped (a dead letter)", err)
	}
	// The placement activates servers again, and the new actor answers.
	after, err := sys.activateLocal(ctx, srv.ID, "")
	if err != nil {
		t.Fatalf("activate after %d placement crashes: %v", crashes, err)
	}
	if _, err := sys.askActor(ctx, after, &pb.GetStatus{}, 10*time.Second); err != nil {
		t.Fatalf("the server actor activated after the crashes does not answer: %v", err)
	}
}
