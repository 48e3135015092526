package placement

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/persistence"
)

// TestReconcilerPass: a pass activates what the plan says on a single node, skips an activation that fails, and
// ends quietly when the node is stopping.
func TestReconcilerPass(t *testing.T) {
	errStopping := errors.New("stopping")
	tests := []struct {
		name      string
		fail      map[string]error
		wantPIDs  []string
		wantTried int
	}{
		{name: "all activated", wantPIDs: []string{"a", "b", "c"}, wantTried: 3},
		{name: "one fails", fail: map[string]error{"b": errors.New("boom")}, wantPIDs: []string{"a", "c"}, wantTried: 3},
		{name: "the node stops", fail: map[string]error{"a": errStopping}, wantTried: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &passStore{}
			for _, id := range []string{"a", "b", "c"} {
				store.servers = append(store.servers, persistence.Server{ID: id, AutoConnect: true, Status: persistence.StatusDisconnected})
			}
			var tried []string
			r := &Reconciler{Store: store, Every: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Hosted: func(string) bool { return false },
				Activate: func(_ context.Context, id, _ string) (*actor.PID, error) {
					tried = append(tried, id)
					if err := tt.fail[id]; err != nil {
						return nil, err
					}
					return actor.NewPID("local", id), nil
				},
				Stopping: func(err error) bool { return errors.Is(err, errStopping) }}
			pids, err := r.Start(context.Background())
			defer r.Stop()
			if err != nil || len(tried) != tt.wantTried {
				t.Fatalf("Start = %v, tried %v; want %d tries", err, tried, tt.wantTried)
			}
			var got []string
			for _, p := range pids {
				got = append(got, p.Id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.wantPIDs) {
				t.Fatalf("activated %v, want %v", got, tt.wantPIDs)
			}
		})
	}
}

// TestReconcilerSoon: after Run, Soon makes a pass happen; a failing first pass is returned.
func TestReconcilerSoon(t *testing.T) {
	var mu sync.Mutex
	passes := 0
	store := &passStore{servers: []persistence.Server{{ID: "a", AutoConnect: true}}}
	r := &Reconciler{Store: store, Every: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hosted: func(string) bool { return false }, Stopping: func(error) bool { return false },
		Activate: func(context.Context, string, string) (*actor.PID, error) {
			mu.Lock()
			defer mu.Unlock()
			passes++
			return actor.NewPID("local", "a"), nil
		}}
	r.Soon() // before Start: coalesced, the first pass of the loop takes it
	if r.Started() {
		t.Fatal("started before Start")
	}
	if _, err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Run()
	defer r.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := passes
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d passes, want a second one after Soon", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	failing := &Reconciler{Store: &passStore{serversErr: errors.New("store down")}, Every: time.Hour}
	if _, err := failing.Start(context.Background()); err == nil {
		t.Fatal("a failing first pass was not returned")
	}
}
