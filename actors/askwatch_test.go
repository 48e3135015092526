package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestAskWatchingLinkBreak: a request whose connection breaks gives up with errLinkBroken, unless its answer
// arrives right after the break (a node that hands its servers over answers, then exits and closes its
// connections): then the answer wins. A broken connection alone is no proof the node is gone: while it is still a
// member, the request waits for its answer (the grace). Only the node leaving the membership (confirmed dead)
// ends the wait before the grace, with errDeparted.
func TestAskWatchingLinkBreak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  time.Duration // after the break; negative: never
		depart  time.Duration // after the break, the node leaves the membership; negative: never
		wantErr error
	}{
		{"the answer comes with the break", 20 * time.Millisecond, -1, nil},
		{"the answer comes late in the grace, the node still a member", linkGrace / 2, -1, nil},
		{"no answer", -1, -1, errLinkBroken},
		{"no answer, the node confirmed dead during the grace", -1, 20 * time.Millisecond, errDeparted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken, departed := make(chan struct{}), make(chan struct{})
			s, pid := signalling(t, broken, departed, tc.depart, tc.answer)
			start := time.Now()
			res, err := s.askWatching(context.Background(), pid, &pb.GetStatus{}, time.Minute, remoteWatch{departed: departed, broken: broken})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("askWatching = %v, %v; want error %v", res, err, tc.wantErr)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("askWatching took %v", took)
			}
		})
	}
}

// TestAskWatchingDeparture: a node that leaves the membership gracefully (a hand-over on SIGTERM) still answers the
// requests it took before its connections close: an answer that comes within the grace of the departure wins; the
// connection breaking (a dead node) or the grace running out ends the wait with errDeparted.
func TestAskWatchingDeparture(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  time.Duration // after the departure; negative: never
		brk     time.Duration // after the departure, the connection breaks; negative: never
		wantErr error
		within  time.Duration // the wait ends within this
	}{
		{"the answer comes right after the departure", 20 * time.Millisecond, -1, nil, linkGrace},
		{"the answer comes late in the grace", linkGrace / 2, -1, nil, linkGrace},
		{"no answer, the connection stands: the grace ends it", -1, -1, errDeparted, 2 * linkGrace},
		{"no answer, the connection breaks: at once", -1, 10 * time.Millisecond, errDeparted, linkGrace / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken, departed := make(chan struct{}), make(chan struct{})
			departedAt := time.Now()
			s, pid := signalling(t, departed, broken, tc.brk, tc.answer)
			res, err := s.askWatching(context.Background(), pid, &pb.GetStatus{}, time.Minute, remoteWatch{departed: departed, broken: broken})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("askWatching = %v, %v; want error %v", res, err, tc.wantErr)
			}
			if took := time.Since(departedAt); took > tc.within+time.Second {
				t.Fatalf("askWatching took %v after the departure, want about %v at most", took, tc.within)
			}
		})
	}
}

// signalling is a System over an actor that, asked, closes first at once, second after secondAfter (never when
// negative), and answers after answer (never when negative).
func signalling(t *testing.T, first, second chan struct{}, secondAfter, answer time.Duration) (*System, *actor.PID) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*pb.GetStatus); ok {
			close(first)
			if secondAfter >= 0 {
				time.AfterFunc(secondAfter, func() { close(second) })
			}
			if answer >= 0 {
				time.Sleep(answer)
				c.Respond(&pb.StatusReply{})
			}
		}
	}))
	return &System{sys: sys, deps: &Deps{}}, pid
}
