package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkPerClientCall is a call of a tool that asks its client nothing, through /mcp by a 2025-11-25 client that
// declares roots, on two registrations of the same go-sdk backend over streamable HTTP: "shared", whose backend has
// never sent a request (the call runs on the server's own session), and "asking", whose backend has (its roots
// tool was called once): the call runs on the client's own backend session (a proxy actor, proxy_user.go).
func BenchmarkPerClientCall(b *testing.B) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "roots", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if _, err := req.Session.ListRoots(ctx, nil); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	b.Cleanup(hs.Close)
	r := newRig(b)
	for _, name := range []string{"shared", "asking"} {
		r.register(b, name, map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
		waitFor(b, name+"'s tools", func() bool { _, ok := r.sys.Routes().Tool(name + ".echo"); return ok })
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cl.AddRoots(&mcp.Root{URI: "file:///bench"})
	ctx := context.Background()
	sess, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	// The asking backend shows it sends requests: its calls then go to this client's own session.
	if res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asking__roots", Arguments: map[string]any{}}); err != nil || res.IsError {
		b.Fatalf("roots: %v %+v", err, res)
	}
	for _, name := range []string{"shared", "asking"} {
		params := &mcp.CallToolParams{Name: name + "__echo", Arguments: map[string]any{}}
		b.Run(map[string]string{"shared": "shared_session", "asking": "per_client_session"}[name], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := sess.CallTool(ctx, params)
				if err != nil || res.IsError || text(res) != "ok" {
					b.Fatalf("%s: %v %+v", params.Name, err, res)
				}
			}
		})
	}
}
