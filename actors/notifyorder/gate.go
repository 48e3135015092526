package notifyorder

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxWait bounds how long a response waits for the notifications before it.
const maxWait = 5 * time.Second

// gated reports whether a notification reaches the client's middleware (notifications/cancelled does not: the
// go-sdk handles it itself), and so is counted by the gate.
func gated(method string) bool {
	switch method {
	case "notifications/progress", "notifications/message", "notifications/resources/updated",
		"notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/resources/list_changed", "notifications/elicitation/complete":
		return true
	}
	return false
}

// Gate holds a session's responses back until the notifications read before them have been handled. One Gate
// serves one client session: its transport (Transport or RoundTripper) and its middleware (Middleware) must both be
// installed. It is safe for concurrent use.
type Gate struct {
	stopping context.Context
	wait     time.Duration // maxWait; tests shorten it

	mu      sync.Mutex
	read    uint64        // notifications passed up by the transport
	handled uint64        // notifications the middleware has seen through
	changed chan struct{} // closed and replaced whenever handled moves
}

// New returns a gate for one client session. When stopping ends (the session's owner stops), responses are no
// longer held.
func New(stopping context.Context) *Gate {
	return &Gate{stopping: stopping, wait: maxWait, changed: make(chan struct{})}
}

// saw counts a notification passed up by the transport.
func (g *Gate) saw(method string) {
	if gated(method) {
		g.mu.Lock()
		g.read++
		g.mu.Unlock()
	}
}

// done counts a notification handled and wakes the waiting responses.
func (g *Gate) done() {
	g.mu.Lock()
	g.handled++
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// hold returns once every notification counted so far has been handled, or after g.wait (the missing ones are
// then forgiven, so that a lost notification delays one response, not all later ones), or when ctx or the gate's
// stopping context ends.
func (g *Gate) hold(ctx context.Context) {
	g.mu.Lock()
	target := g.read
	g.mu.Unlock()
	t := time.NewTimer(g.wait)
	defer t.Stop()
	for {
		g.mu.Lock()
		if g.handled >= target {
			g.mu.Unlock()
			return
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-g.stopping.Done():
			return
		case <-t.C:
			g.mu.Lock()
			if g.handled < target {
				g.handled = target
				close(g.changed)
				g.changed = make(chan struct{})
			}
			g.mu.Unlock()
			return
		}
	}
}

// Middleware counts the notifications handled. It must be the client's outermost receiving middleware (the last
// one added with mcp.Client.AddReceivingMiddleware), so that a notification counts once every handler is done with
// it.
func (g *Gate) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !gated(method) {
			return next(ctx, method, req)
		}
		defer g.done()
		return next(ctx, method, req)
	}
}
