package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkPerUserCall is a call of a per_user server's tool on the caller's own session against the same call on
// a shared server (same go-sdk backend over streamable HTTP, through /mcp with a 2025-11-25 client), and the memory
// one idle per-user session holds: sessions of 400 callers opened, then the live heap compared with before. The
// backend runs in the benchmark's process, so its side of each session (the go-sdk server session) is counted too.
func BenchmarkPerUserCall(b *testing.B) {
	ctx := context.Background()
	const callers = 400
	st, hs, srv, sys := perUserSystem(b, mcpserver.Options{RequireIdentity: true}, func(c *actors.Config) { c.MaxUserSessions = callers + 10 })
	// A shared server on the same kind of backend: the registration's own key for everyone.
	backend := mcp.NewServer(&mcp.Implementation{Name: "echo-auth", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "auth=" + r.Extra.Header.Get("X-Api-Key")}}}, nil
		})
	bs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	b.Cleanup(bs.Close)
	raw, _ := json.Marshal(map[string]any{"base_url": bs.URL, "headers": map[string]string{"X-Api-Key": "shared-key"}})
	if _, err := sys.Register(ctx, actors.RegisterRequest{Name: "shared", TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "shared.whoami routable", func() bool { _, ok := sys.Routes().Tool("shared.whoami"); return ok })

	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sess, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{clientToken}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	for _, tc := range []struct{ name, tool, want string }{
		{"shared", "shared__whoami", "auth=shared-key"},
		{"per_user", "per__whoami", "auth=ci-own-key"},
	} {
		params := &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := sess.CallTool(ctx, params)
				if err != nil || res.IsError || text(res) != tc.want {
					b.Fatalf("%s: %v %+v", tc.tool, err, res)
				}
			}
		})
	}

	// Measured once, outside b.Run (whose function runs again as b.N grows, with the sessions already open).
	for i := range callers {
		if _, _, err := st.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: fmt.Sprintf("token:u%d", i), Secret: []byte(fmt.Sprintf("key-%d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	cases := gateway.New(sys, gateway.Options{})
	call := func(i int) {
		_, err := cases.Call(ctx, gateway.CallRequest{Caller: auth.Identity{Name: fmt.Sprintf("u%d", i), Scope: auth.ScopeClient},
			Name: "per.whoami", Arguments: json.RawMessage(`{}`)})
		if err != nil {
			b.Fatalf("caller %d: %v", i, err)
		}
	}
	call(0) // the machinery's one-off allocations
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 1; i < callers; i++ {
		call(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(callers-1)
	b.Run("idle_session_memory", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(per/1024, "KiB/session")
	})
}
