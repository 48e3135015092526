package notifyorder

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// newTestGate is a gate whose responses wait at most wait, with read notifications counted and handled of them
// handled.
func newTestGate(stopping context.Context, wait time.Duration, read, handled uint64) *Gate {
	g := New(stopping)
	g.wait, g.read, g.handled = wait, read, handled
	return g
}

// TestHold: a response waits for the notifications counted before it, and for nothing else; a notification that
// never arrives is forgiven after the wait, once; the caller's context and the gate's stopping context end the wait.
func TestHold(t *testing.T) {
	tests := []struct {
		name          string
		read, handled uint64
		wait          time.Duration
		act           func(g *Gate, cancelCtx, stop context.CancelFunc)
		min, max      time.Duration
	}{
		{name: "nothing read", wait: time.Hour, max: time.Second},
		{name: "all handled", read: 3, handled: 3, wait: time.Hour, max: time.Second},
		{name: "waits for the handler", read: 2, handled: 0, wait: time.Hour, min: 40 * time.Millisecond, max: 5 * time.Second,
			act: func(g *Gate, _, _ context.CancelFunc) {
				time.Sleep(20 * time.Millisecond)
				g.done()
				time.Sleep(20 * time.Millisecond)
				g.done()
			}},
		{name: "forgives a lost notification", read: 1, wait: 50 * time.Millisecond, min: 50 * time.Millisecond, max: 5 * time.Second},
		{name: "caller gives up", read: 1, wait: time.Hour, min: 30 * time.Millisecond, max: 5 * time.Second,
			act: func(_ *Gate, cancelCtx, _ context.CancelFunc) {
				time.Sleep(30 * time.Millisecond)
				cancelCtx()
			}},
		{name: "session stops", read: 1, wait: time.Hour, min: 30 * time.Millisecond, max: 5 * time.Second,
			act: func(_ *Gate, _, stop context.CancelFunc) {
				time.Sleep(30 * time.Millisecond)
				stop()
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stopping, stop := context.WithCancel(context.Background())
			defer stop()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := newTestGate(stopping, tc.wait, tc.read, tc.handled)
			if tc.act != nil {
				go tc.act(g, cancel, stop)
			}
			start := time.Now()
			g.hold(ctx)
			if took := time.Since(start); took < tc.min || took > tc.max {
				t.Fatalf("hold took %s, want %s to %s", took, tc.min, tc.max)
			}
		})
	}
}

// TestHoldForgivesOnce: after a lost notification was forgiven, the next response does not wait for it again.
func TestHoldForgivesOnce(t *testing.T) {
	g := newTestGate(context.Background(), 30*time.Millisecond, 1, 0)
	g.hold(context.Background())
	g.wait = time.Hour
	done := make(chan struct{})
	go func() {
		g.hold(context.Background())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the second response waited for the forgiven notification")
	}
}

// TestMiddlewareCounts: the middleware counts the notifications the transport counts (those that reach it), after
// the handlers inside it have returned, and nothing else.
func TestMiddlewareCounts(t *testing.T) {
	tests := []struct {
		method string
		counts bool
	}{
		{"notifications/progress", true},
		{"notifications/message", true},
		{"notifications/resources/updated", true},
		{"notifications/tools/list_changed", true},
		{"notifications/prompts/list_changed", true},
		{"notifications/resources/list_changed", true},
		{"notifications/elicitation/complete", true},
		{"notifications/cancelled", false},
		{"sampling/createMessage", false},
		{"roots/list", false},
		{"ping", false},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			g := New(context.Background())
			g.saw(tc.method)
			if got := g.read == 1; got != tc.counts {
				t.Fatalf("transport counted %v, want %v", got, tc.counts)
			}
			var during uint64
			h := g.Middleware(func(context.Context, string, mcp.Request) (mcp.Result, error) {
				during = g.handled
				return nil, nil
			})
			if _, err := h(context.Background(), tc.method, nil); err != nil {
				t.Fatal(err)
			}
			if during != 0 {
				t.Fatal("counted before the inner handler returned")
			}
			if got := g.handled == 1; got != tc.counts {
				t.Fatalf("middleware counted %v, want %v", got, tc.counts)
			}
		})
	}
}
