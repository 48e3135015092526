package actors

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	"github.com/mcpgw/aggregator/supervision"
)

// TestCrashingRouterIsSupervisedWithBackoff: the router crashes 15 times in a row (more than protoactor's default
// of 10 restarts in 10 s, after which it would stay stopped). Our strategy restarts it every time, counts each
// restart under kind "router", and the routing table keeps following events.
func TestCrashingRouterIsSupervisedWithBackoff(t *testing.T) {
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
	const crashes = 15
	for i := 0; i < crashes; i++ {
		sys.sys.Root.Send(sys.router, &panicForTest{})
		// Wait for the restart before the next crash, so each one counts as its own failure.
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(m.ActorRestarts.WithLabelValues("router")) < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("crash %d was not followed by a restart", i+1)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if _, err := sys.askActor(context.Background(), sys.router, &readyMsg{}, 10*time.Second); err != nil {
			t.Fatalf("router does not answer after crash %d: %v", i+1, err)
		}
	}
	if got := testutil.ToFloat64(m.ActorRestarts.WithLabelValues("router")); got != crashes {
		t.Fatalf("restart metric for router = %v, want %d", got, crashes)
	}
	// The table still follows events: a new registration appears in it.
	srv, err := sys.Register(context.Background(), RegisterRequest{Name: "after-crashes", TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"base_url":"http://127.0.0.1:1/mcp"}`)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := sys.Routes().Server(srv.ID); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the routing table did not follow a registration after %d router crashes", crashes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
