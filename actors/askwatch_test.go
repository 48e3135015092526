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
// connections): then the answer wins.
func TestAskWatchingLinkBreak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  time.Duration // after the break; negative: never
		wantErr error
	}{
		{"the answer comes with the break", 20 * time.Millisecond, nil},
		{"no answer", -1, errLinkBroken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := actor.NewActorSystem()
			defer sys.Shutdown()
			broken := make(chan struct{})
			pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
				if _, ok := c.Message().(*pb.GetStatus); ok {
					close(broken)
					if tc.answer >= 0 {
						time.Sleep(tc.answer)
						c.Respond(&pb.StatusReply{})
					}
				}
			}))
			s := &System{sys: sys, deps: &Deps{}}
			start := time.Now()
			res, err := s.askWatching(context.Background(), pid, &pb.GetStatus{}, time.Minute, remoteWatch{broken: broken})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("askWatching = %v, %v; want error %v", res, err, tc.wantErr)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("askWatching took %v", took)
			}
		})
	}
}
