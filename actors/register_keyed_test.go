package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestRegisterKeyedReplay: a keyed registration retried with the same key and fingerprint answers the stored
// server (replayed, its current status) and changes nothing: no second ServerUpdated, no new state change of the
// connected server; another fingerprint is ErrKeyReused.
func TestRegisterKeyedReplay(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	var mu sync.Mutex
	updates := 0
	sub := r.sys.ActorSystem().EventStream.Subscribe(func(evt any) {
		if u, ok := evt.(*pb.ServerUpdated); ok && u.NewName == "keyed" {
			mu.Lock()
			updates++
			mu.Unlock()
		}
	})
	defer r.sys.ActorSystem().EventStream.Unsubscribe(sub)
	_, url := manyTools(t, 1)
	raw, _ := json.Marshal(map[string]any{"base_url": url})
	req := actors.RegisterRequest{Name: "keyed", TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true}
	key := persistence.IdempotencyKey{Scope: "anonymous", Key: "k", Fingerprint: "fp-1", Retention: time.Hour}
	ctx := context.Background()

	first, replayed, err := r.sys.RegisterKeyed(ctx, req, key)
	if err != nil || replayed || first.Status != persistence.StatusConnecting {
		t.Fatalf("first: %s %s replayed %v, %v", first.ID, first.Status, replayed, err)
	}
	waitRoutes(t, r.sys, 30*time.Second, "connected", hasTool("keyed.tool_0000"))
	// The router has CONNECTED before the row and its history do (read-your-writes): wait for the stored one.
	r.waitStatus(first.ID, persistence.StatusConnected, 30*time.Second)
	before, err := r.store.ListHistory(ctx, first.ID, 100)
	if err != nil {
		t.Fatal(err)
	}

	again, replayed, err := r.sys.RegisterKeyed(ctx, req, key)
	if err != nil || !replayed || again.ID != first.ID || again.Status != persistence.StatusConnected {
		t.Fatalf("retry: %s %s replayed %v, %v; want %s CONNECTED, replayed", again.ID, again.Status, replayed, err, first.ID)
	}
	key.Fingerprint = "fp-2"
	if _, _, err := r.sys.RegisterKeyed(ctx, req, key); !errors.Is(err, persistence.ErrKeyReused) {
		t.Fatalf("another fingerprint: %v, want ErrKeyReused", err)
	}

	time.Sleep(300 * time.Millisecond) // what a second activation would have done by now
	after, err := r.store.ListHistory(ctx, first.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the replay changed the server's state: %d history rows, then %d", len(before), len(after))
	}
	mu.Lock()
	defer mu.Unlock()
	if updates != 1 {
		t.Errorf("%d ServerUpdated events for the keyed server, want 1", updates)
	}
}
