package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// slowBackend is an in-process go-sdk server with echo and sleep (which waits for its context, reporting its start).
func slowBackend(t *testing.T, started chan<- struct{}) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(r.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "sleep", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if started != nil {
				started <- struct{}{}
			}
			select {
			case <-ctx.Done():
			case <-time.After(60 * time.Second):
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

type errRig struct {
	once sync.Once
	sys  *actors.System
	ep   *mcpserver.Server
	url  string
	ids  map[string]string
}

// shutdown stops the actor system once.
func (r *errRig) shutdown(t *testing.T) {
	r.once.Do(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := r.sys.Shutdown(c); err != nil {
			t.Error(err)
		}
	})
}

// newErrRig serves the endpoint with opts and the given backends (name -> URL), waiting until all are callable.
func newErrRig(t *testing.T, opts mcpserver.Options, backends map[string]string) *errRig {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Config: actors.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := &errRig{sys: sys, ids: map[string]string{}}
	t.Cleanup(func() { r.shutdown(t) })
	ep := mcpserver.New(sys, st, opts)
	t.Cleanup(ep.Close)
	hs := httptest.NewServer(ep.StreamableHandler())
	t.Cleanup(hs.Close)
	r.ep, r.url = ep, hs.URL
	for name, u := range backends {
		raw, _ := json.Marshal(map[string]any{"base_url": u})
		srv, err := sys.Register(ctx, actors.RegisterRequest{Name: name, TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true})
		if err != nil {
			t.Fatal(err)
		}
		r.ids[name] = srv.ID
	}
	waitFor(t, "backends callable", func() bool { return len(sys.Routes().Callable()) == 2*len(backends) })
	return r
}

// body decodes the error body of a tool error.
func body(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", text(res))
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text(res)), &m); err != nil {
		t.Fatalf("tool error is not the error body: %q", text(res))
	}
	if m["status"] != "error" {
		t.Fatalf("status %v in %v", m["status"], m)
	}
	return m
}

// TestMCPCallValidationAndErrors: execute_external_tool and direct calls on /mcp follow REST's call rules and
// answer in the shared error vocabulary; metadata is the same as REST's.
func TestMCPCallValidationAndErrors(t *testing.T) {
	r := newErrRig(t, mcpserver.Options{}, map[string]string{"alpha": slowBackend(t, nil), "beta": slowBackend(t, nil)})
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.url})
	call := func(name string, args any) (*mcp.CallToolResult, error) {
		return c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	}
	for _, tc := range []struct {
		name, tool string
		args       any
		code, want string
	}{
		{"unknown field", "execute_external_tool", map[string]any{"tool_name": "alpha.echo", "bogus": 1}, "VALIDATION_ERROR", "extra_forbidden"},
		{"bad server_id", "execute_external_tool", map[string]any{"tool_name": "echo", "server_id": "alpha"}, "VALIDATION_ERROR", "server_id must be a UUID"},
		{"arguments not an object", "execute_external_tool", map[string]any{"tool_name": "alpha.echo", "arguments": []any{1}}, "VALIDATION_ERROR", "arguments must be an object"},
		{"missing tool_name", "execute_external_tool", map[string]any{}, "VALIDATION_ERROR", "missing"},
		{"ambiguous via execute", "execute_external_tool", map[string]any{"tool_name": "echo"}, "TOOL_AMBIGUOUS", "beta__echo"},
		{"unknown tool", "execute_external_tool", map[string]any{"tool_name": "alpha.nope"}, "TOOL_NOT_FOUND", "alpha.nope"},
		{"direct call with array arguments", "alpha__echo", []any{1, 2}, "VALIDATION_ERROR", "arguments must be an object"},
		{"canonical call with string arguments", "alpha.echo", "text", "VALIDATION_ERROR", "arguments must be an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := call(tc.tool, tc.args)
			if err != nil {
				t.Fatalf("want a tool error, got %v", err)
			}
			m := body(t, res)
			if m["error_code"] != tc.code || !strings.Contains(text(res), tc.want) {
				t.Fatalf("got %s, want %s mentioning %q", text(res), tc.code, tc.want)
			}
		})
	}

	// A bare name several servers have: -32602 that says so and names the candidates' aliases.
	_, err := call("echo", map[string]any{})
	if err == nil || !strings.Contains(err.Error(), "several servers") || !strings.Contains(err.Error(), "alpha__echo") || !strings.Contains(err.Error(), "beta__echo") {
		t.Fatalf("ambiguous bare name: %v", err)
	}

	// Metadata: strategy included, on execute_external_tool and on direct calls.
	for _, tc := range []struct {
		tool     string
		args     map[string]any
		strategy string
	}{
		{"execute_external_tool", map[string]any{"tool_name": "alpha.echo", "arguments": map[string]any{"x": 1}}, routing.StrategyNamespaceResolved},
		{"execute_external_tool", map[string]any{"tool_name": "echo", "server_id": r.ids["beta"]}, routing.StrategyExplicitServer},
		{"alpha__echo", map[string]any{"x": 1}, routing.StrategyAlias},
	} {
		res, err := call(tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", tc.tool, err, text(res))
		}
		meta, _ := res.Meta["metadata"].(map[string]any)
		if meta["strategy"] != tc.strategy || meta["routed_to"] == nil || meta["total_time_ms"] == nil {
			t.Fatalf("%s metadata %v, want strategy %s", tc.tool, res.Meta, tc.strategy)
		}
	}

	// A tool of a known server that is not callable: an isError result naming the server and its state.
	if _, err := r.sys.Disconnect(context.Background(), r.ids["beta"], true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "beta not callable", func() bool { return len(r.sys.Routes().Callable()) == 2 })
	for _, name := range []string{"beta__echo", "beta.echo"} {
		res, err := call(name, map[string]any{})
		if err != nil {
			t.Fatalf("%s: want an isError result, got %v", name, err)
		}
		m := body(t, res)
		srv, _ := m["server"].(map[string]any)
		if m["error_code"] != "SERVER_UNAVAILABLE" || srv["name"] != "beta" || srv["status"] == "" {
			t.Fatalf("%s: %s", name, text(res))
		}
	}
}

// TestMCPMetaToolsAfterShutdownAndInstructions: the meta-tools answer a stopped actor system as REST does (503's
// SERVICE_UNAVAILABLE with a fixed sentence, no raw error text); the instructions name the configured separator.
func TestMCPMetaToolsAfterShutdownAndInstructions(t *testing.T) {
	r := newErrRig(t, mcpserver.Options{AliasSeparator: "--", AskTimeout: 2 * time.Second}, map[string]string{"alpha": slowBackend(t, nil)})
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.url})
	if ins := c.sess.InitializeResult().Instructions; !strings.Contains(ins, "{server}--{tool}") || strings.Contains(ins, "__") {
		t.Fatalf("instructions do not name the separator: %q", ins)
	}
	r.shutdown(t)
	res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "connect_mcp_server", Arguments: map[string]any{"server_id": "alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	m := body(t, res)
	if m["error_code"] != "SERVICE_UNAVAILABLE" || m["error"] != "The service is shutting down" {
		t.Fatalf("after shutdown: %s", text(res))
	}
}

// TestMCPDeleteCancelsCalls: a DELETE of a session cancels its calls in flight and returns at once.
func TestMCPDeleteCancelsCalls(t *testing.T) {
	started := make(chan struct{}, 1)
	r := newErrRig(t, mcpserver.Options{}, map[string]string{"alpha": slowBackend(t, started)})
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.url})
	done := make(chan error, 1)
	go func() {
		_, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "alpha__sleep", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not reach the backend")
	}
	req, _ := http.NewRequest(http.MethodDelete, r.url, nil)
	req.Header.Set("Mcp-Session-Id", c.sess.ID())
	req.Header.Set("Mcp-Protocol-Version", actors.ProtocolVersion)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 10*time.Second || resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE took %v (status %d): it waited for the call instead of cancelling it", d, resp.StatusCode)
	}
}

// initialize opens a raw session; it returns the status, the session id and the body.
func initialize(t *testing.T, url string) (int, string, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b), resp.Header
}

func sessionCount(ep *mcpserver.Server) int { return mcpserver.SessionCount(ep) }

// TestMCPSessionCapsAndIdleExpiry: new sessions beyond the per-client and total caps are refused in the error
// shape with Retry-After; idle sessions expire and free their place.
func TestMCPSessionCapsAndIdleExpiry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   mcpserver.Options
		status int
		scope  string
	}{
		{"per client", mcpserver.Options{MaxSessionsPerClient: 3, MaxSessions: 100, SessionIdleTimeout: 2 * time.Second}, http.StatusTooManyRequests, "client"},
		{"total", mcpserver.Options{MaxSessionsPerClient: -1, MaxSessions: 3, SessionIdleTimeout: 2 * time.Second}, http.StatusServiceUnavailable, "total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newErrRig(t, tc.opts, map[string]string{})
			for i := 0; i < 3; i++ {
				if st, sid, b, _ := initialize(t, r.url); st != http.StatusOK || sid == "" {
					t.Fatalf("session %d: %d %s", i, st, b)
				}
			}
			st, _, b, h := initialize(t, r.url)
			var e struct {
				Code    string         `json:"error_code"`
				Detail  string         `json:"detail"`
				Context map[string]any `json:"context"`
			}
			if err := json.Unmarshal([]byte(b), &e); err != nil || st != tc.status || e.Code != "SESSION_LIMIT_REACHED" ||
				e.Context["scope"] != tc.scope || h.Get("Retry-After") == "" {
				t.Fatalf("over the cap: %d %s (Retry-After %q)", st, b, h.Get("Retry-After"))
			}
			waitFor(t, "idle sessions expired", func() bool { return sessionCount(r.ep) == 0 })
			if st, sid, b, _ := initialize(t, r.url); st != http.StatusOK || sid == "" {
				t.Fatalf("after expiry: %d %s", st, b)
			}
		})
	}
}
