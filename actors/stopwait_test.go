package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TestStopAndWaitFollowsTheContext: Shutdown's wait for an actor to stop ends at the caller's deadline (not at
// protoactor's fixed 10 s of StopFuture), and ends as soon as the actor has stopped, even when it had already
// stopped before the wait began.
func TestStopAndWaitFollowsTheContext(t *testing.T) {
	t.Parallel()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	s := &System{sys: sys}
	release := make(chan struct{})
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Stopping); ok {
			<-release // a session that takes long to close
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.stopAndWait(ctx, pid); !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("stopAndWait of an actor still stopping at the deadline = %v, want a timeout", err)
	}
	close(release)
	if err := s.stopAndWait(context.Background(), pid); err != nil {
		t.Fatalf("stopAndWait once it stopped = %v", err)
	}
	done := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := s.stopAndWait(context.Background(), done); err != nil {
		t.Fatalf("stopAndWait of a running actor = %v", err)
	}
	if err := s.stopAndWait(context.Background(), done); err != nil {
		t.Fatalf("stopAndWait of a stopped actor = %v", err)
	}
}
