package actors

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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
	sys, m := crashTestSystem(t)
	const crashes = 15
	crashRepeatedly(t, sys, m, sys.router, "router", crashes)
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

// crashTestSystem starts a System on a fresh store whose crashed actors restart after 2 to 10 ms, with metrics.
func crashTestSystem(t *testing.T) (*System, *metrics.Metrics) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m := metrics.New(func() metrics.Snapshot { return metrics.Snapshot{} })
	cfg := DefaultConfig()
	cfg.Restart = supervision.Backoff{Initial: 2 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}
	sys, err := Start(context.Background(), Deps{Store: st, Config: cfg, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	})
	return sys, m
}

// crashRepeatedly crashes the actor at pid n times, each after the restart of the one before (so that each counts
// as its own failure), checks it answers after each restart and that the restarts of kind counted n.
func crashRepeatedly(t *testing.T, sys *System, m *metrics.Metrics, pid *actor.PID, kind string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		sys.sys.Root.Send(pid, &panicForTest{})
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(m.ActorRestarts.WithLabelValues(kind)) < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("%s crash %d was not followed by a restart", kind, i+1)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if _, err := sys.askActor(context.Background(), pid, &readyMsg{}, 10*time.Second); err != nil {
			t.Fatalf("the %s does not answer after crash %d: %v", kind, i+1, err)
		}
	}
	if got := testutil.ToFloat64(m.ActorRestarts.WithLabelValues(kind)); got != float64(n) {
		t.Fatalf("restart metric for %s = %v, want %d", kind, got, n)
	}
}
