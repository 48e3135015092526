package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// droppingNode is a Node whose Ask never reaches an actor: like a request left in a proxy actor's mailbox when it
// stops, it is answered only at the ask's timeout.
type droppingNode struct{ asked chan *proxyRequest }

func (droppingNode) ActorSystem() *actor.ActorSystem { return nil }
func (n droppingNode) Ask(ctx context.Context, _ *actor.PID, m any, timeout time.Duration) (any, error) {
	n.asked <- m.(*proxyRequest)
	select {
	case <-time.After(timeout):
		return nil, errors.New("ask timed out")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (droppingNode) CallDeadline(context.Context) time.Time { return time.Now().Add(time.Minute) }

// TestProxyAskEndsWhenTheActorStopsWithoutIt: a request the proxy actor never received (it reached the mailbox after
// the caller's credential changed and the actor stopped) is answered at once with why the session ended, and is
// given up so that the actor cannot run it afterwards; one the actor had received is waited for. Without it, the
// front end waited for the ask's timeout (30 s by default).
func TestProxyAskEndsWhenTheActorStopsWithoutIt(t *testing.T) {
	why := fmt.Errorf("%w: server s", ErrCredentialChanged)
	for _, tc := range []struct {
		name     string
		received bool
	}{{"not received", false}, {"received", true}} {
		t.Run(tc.name, func(t *testing.T) {
			n := droppingNode{asked: make(chan *proxyRequest, 1)}
			p := &ProxySession{node: n, shared: &proxyShared{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := p.do(ctx, func(context.Context, proxyUpstream) (any, error) { return nil, nil })
				done <- err
			}()
			req := <-n.asked // passed endedWith, on its way to the mailbox
			if tc.received {
				req.taken.Store(true) // as the proxy actor does when it receives a request
			}
			p.shared.end(why)
			p.shared.stop()
			wait := 10 * time.Second // a request given up answers at once; 10 s is only how long to wait for a failure
			if tc.received {
				wait = 500 * time.Millisecond // it must still be waiting for the actor's answer
			}
			select {
			case err := <-done:
				if tc.received {
					t.Fatalf("a request the actor received was not waited for: %v", err)
				}
				if !errors.Is(err, ErrCredentialChanged) {
					t.Fatalf("err %v, want ErrCredentialChanged", err)
				}
				if req.taken.CompareAndSwap(false, true) {
					t.Fatal("the request was not given up: the actor could still run it")
				}
			case <-time.After(wait):
				if !tc.received {
					t.Fatal("the request waited for the ask's timeout")
				}
				cancel() // the received request's answer: here the fake ask ends with the context
				if err := <-done; err == nil {
					t.Fatal("no error")
				}
			}
		})
	}
}
