package mcpproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// noDelete is a client transport that never sends DELETE, as the conformance suite and the TypeScript SDK's close()
// do not: the session is simply abandoned, its standalone stream closed.
type noDelete struct{}

func (noDelete) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete {
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r, Header: http.Header{}}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestProxyReapsAbandonedSessions: clients that leave without DELETE do not lock the per-server endpoint: 40
// sequential sessions against a cap of 10 all open, and each abandoned session's stdio child is stopped.
func TestProxyReapsAbandonedSessions(t *testing.T) {
	r := newRig(t, mcpproxy.Options{MaxSessionsPerServer: 10, StreamGrace: time.Second})
	marker := fmt.Sprintf("marker-proxy-reap-%d", time.Now().UnixNano())
	srv := r.register("every-reap", persistence.TransportSTDIO, everything(t, persistence.TransportSTDIO, marker))
	hc := &http.Client{Transport: noDelete{}}
	busy := 0
	for i := range 40 {
		c := mcp.NewClient(&mcp.Implementation{Name: "abandoning-client", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var cs *mcp.ClientSession
		var err error
		// A session over the cap is 503 (SERVICE_BUSY) until an abandoned one is reaped, StreamGrace after its
		// stream closed: a client tries again then. Abandoned sessions must not hold the cap for longer.
		for deadline := time.Now().Add(5 * time.Second); ; busy++ {
			cs, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url(srv.Name), HTTPClient: hc, MaxRetries: 1},
				&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
			if err == nil || !strings.Contains(err.Error(), "Service Unavailable") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			cancel()
			t.Fatalf("session %d: %v", i, err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "x"}}); err != nil {
			t.Fatalf("session %d echo: %v", i, err)
		}
		_ = cs.Close() // no DELETE reaches the proxy: only the standalone stream closes
		cancel()
	}
	t.Logf("40 sessions opened; %d attempts found the cap full", busy)
	// Only the server's own session's child remains once the abandoned sessions are reaped.
	waitCount(t, marker, 1, 30*time.Second)
	if pids := peertest.ProcessesWithArg(marker); len(pids) != 1 {
		t.Fatalf("processes %v", pids)
	}
}

// TestProxyReapsIdleSessions: a session that sends nothing for the idle timeout is closed with its child, even
// when its client never opened a stream.
func TestProxyReapsIdleSessions(t *testing.T) {
	r := newRig(t, mcpproxy.Options{IdleTimeout: 2 * time.Second, StreamGrace: -1})
	marker := fmt.Sprintf("marker-proxy-idle-%d", time.Now().UnixNano())
	srv := r.register("every-idle", persistence.TransportSTDIO, everything(t, persistence.TransportSTDIO, marker))
	c := mcp.NewClient(&mcp.Implementation{Name: "idle-client", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.url(srv.Name), HTTPClient: &http.Client{Transport: noDelete{}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	waitCount(t, marker, 2, 30*time.Second)
	waitCount(t, marker, 1, 30*time.Second)
}
