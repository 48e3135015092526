package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestCrashingPlacementIsSupervisedWithBackoff: the placement actor (the parent of every server actor) crashes 15
// times in a row, more than protoactor's default of 10 restarts in 10 s after which it would stay stopped (and no
// server could be activated on the node again). Our strategy restarts it every time and counts each restart under
// kind "placement"; the server actor it hosted goes with it and is forgotten, and a server is activated again
// afterwards.
func TestCrashingPlacementIsSupervisedWithBackoff(t *testing.T) {
	t.Parallel()
	sys, m := crashTestSystem(t)
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
	crashRepeatedly(t, sys, m, sys.placement, "placement", crashes)
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
