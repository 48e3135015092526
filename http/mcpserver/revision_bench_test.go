package mcpserver_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkCallByRevision is one tools/call through /mcp to a go-sdk streamable HTTP backend, by a client of each
// protocol revision: 2025-11-25 (a session; the stateful handler) and 2026-07-28 (no session; the stateless
// handler builds a temporary session per request). Plain calls, then calls whose backend elicits (on the client's
// session, or by a multi-round-trip retry).
func BenchmarkCallByRevision(b *testing.B) {
	r := newRig(b)
	gob := startGoBackend(b)
	close(gob.release) // reads answer at once
	gob.release = make(chan struct{})
	r.register(b, "gob", map[string]any{"base_url": gob.url}, persistence.TransportHTTP)
	url, _ := relayBackend(b)
	r.register(b, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(b, "both backends routable", func() bool {
		_, e := r.sys.Routes().Tool("gob.echo")
		_, a := r.sys.Routes().Tool("asker.ask")
		return e && a
	})
	for _, version := range []string{actors.ProtocolVersion, mcpserver.ModernProtocol} {
		cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "b"}}, nil
			},
		})
		sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			b.Fatal(err)
		}
		if got := sess.InitializeResult().ProtocolVersion; got != version {
			b.Fatalf("negotiated %s, want %s", got, version)
		}
		for _, tc := range []struct {
			name, tool, want string
			args             map[string]any
		}{
			{"call", "gob__echo", "x", map[string]any{"msg": "x"}},
			{"elicit", "asker__ask", "accept:b", map[string]any{}},
		} {
			b.Run(version+"/"+tc.name, func(b *testing.B) {
				for b.Loop() {
					res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
					if err != nil || text(res) != tc.want {
						b.Fatalf("%s: %v %q", tc.tool, err, text(res))
					}
				}
			})
		}
		sess.Close()
	}
}
