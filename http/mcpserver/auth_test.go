package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

const (
	adminToken  = "admin-secret-token-0001"
	clientToken = "client-secret-token-0001"
)

// echoBackend is an in-process go-sdk streamable HTTP server with one tool, echo.
func echoBackend(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", Description: "echoes its arguments", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(r.Params.Arguments)}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

type authRig struct {
	sys     *actors.System
	store   persistence.Store
	url     string
	backend string
	ep      *mcpserver.Server
}

// newAuthRig serves the endpoint behind auth.Middleware as the daemon does (admin "ops", client "ci"), with one
// connected backend "back" whose tool is back__echo.
func newAuthRig(t *testing.T, limiter *auth.Limiter) *authRig {
	ctx := context.Background()
	st, sys := startSystem(t, actors.Deps{Config: actors.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)})
	toks, err := auth.Parse("ops:"+adminToken, "ci:"+clientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := mcpserver.New(sys, st, mcpserver.Options{Limiter: limiter, RequireIdentity: true})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	mux.Handle("/sse", ep.SSEHandler())
	mux.Handle("/mcp/servers/", ep.StreamableHandler()) // stands in for the per-server endpoint
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)
	r := &authRig{sys: sys, store: st, url: hs.URL, backend: echoBackend(t), ep: ep}
	raw, _ := json.Marshal(map[string]any{"base_url": r.backend})
	if _, err := sys.Register(ctx, actors.RegisterRequest{Name: "back", TransportType: persistence.TransportHTTP,
		ConnectionConfig: raw, AutoConnect: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "back.echo routable", func() bool {
		rt, ok := sys.Routes().Tool("back.echo")
		return ok && rt.ServerName == "back" && len(sys.Routes().Callable()) == 1
	})
	// The endpoint follows the table on its own loop: a call before it exposes the tool takes the go-sdk's path,
	// not the fast one the tests count.
	waitFor(t, "back__echo exposed on the endpoint", func() bool {
		_, ok := mcpserver.ToolDescriptions(ep)["back__echo"]
		return ok
	})
	return r
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func (r *authRig) connect(t *testing.T, token string, sse bool) *client {
	hc := &http.Client{Transport: bearer{token}}
	if sse {
		return connect(t, &mcp.SSEClientTransport{Endpoint: r.url + "/sse", HTTPClient: hc})
	}
	return connect(t, &mcp.StreamableClientTransport{Endpoint: r.url + "/mcp", HTTPClient: hc})
}

func callTool(t *testing.T, c *client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestMCPEndpointsNeedToken: /mcp, /sse and /mcp/servers/{name} answer 401 in the error shape, before any MCP
// handling, without a token or with a wrong one.
func TestMCPEndpointsNeedToken(t *testing.T) {
	r := newAuthRig(t, nil)
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/mcp", initBody}, {"GET", "/mcp", ""}, {"DELETE", "/mcp", ""},
		{"GET", "/sse", ""}, {"POST", "/sse?sessionid=abc", initBody},
		{"POST", "/mcp/servers/back", initBody}, {"GET", "/mcp/servers/x", ""},
	} {
		for _, authz := range []string{"", "Bearer wrong-token-0123456789", "Basic " + adminToken, "Bearer " + adminToken + "x"} {
			hr, _ := http.NewRequest(req.method, r.url+req.path, strings.NewReader(req.body))
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("Accept", "application/json, text/event-stream")
			if authz != "" {
				hr.Header.Set("Authorization", authz)
			}
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var m map[string]any
			if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &m) != nil || m["error_code"] != errcode.Unauthorized ||
				m["detail"] == nil || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s %s with %q: %d %s", req.method, req.path, authz, resp.StatusCode, body)
			}
		}
	}
	// A go-sdk client without a token cannot even initialize.
	cl := mcp.NewClient(&mcp.Implementation{Name: "anon", Version: "1"}, nil)
	if s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.url + "/mcp"}, nil); err == nil {
		s.Close()
		t.Fatal("connected without a token")
	}
}

// TestMCPScopes: a client token lists and calls backend tools and the read-only meta-tools but gets FORBIDDEN from
// the admin meta-tools, over streamable HTTP and SSE alike (the identity reaches the shared server's handlers
// per call); an admin token may manage servers, and each of its operations is audited with its name.
func TestMCPScopes(t *testing.T) {
	r := newAuthRig(t, nil)
	for _, sse := range []bool{false, true} {
		c := r.connect(t, clientToken, sse)
		waitFor(t, "back__echo listed", func() bool { return slices.Contains(c.toolNames(t), "back__echo") })
		if res := callTool(t, c, "back__echo", map[string]any{"x": 1}); res.IsError || !strings.Contains(text(res), `echo {"x":1}`) {
			t.Fatalf("sse=%v: client calls a backend tool: %s", sse, text(res))
		}
		if res := callTool(t, c, "execute_external_tool", map[string]any{"tool_name": "back.echo", "arguments": map[string]any{"y": 2}}); res.IsError {
			t.Fatalf("sse=%v: execute_external_tool: %s", sse, text(res))
		}
		for name, args := range map[string]map[string]any{"list_mcp_servers": {}, "search_aggregated_tools": {"query": "echo"},
			"get_server_status": {"server_id": "back"}} {
			if res := callTool(t, c, name, args); res.IsError {
				t.Fatalf("sse=%v: client may use %s: %s", sse, name, text(res))
			}
		}
		for _, name := range []string{"add_mcp_server", "remove_mcp_server", "connect_mcp_server", "disconnect_mcp_server"} {
			res := callTool(t, c, name, map[string]any{"server_id": "back", "name": "x", "transport_type": "HTTP",
				"connection_config": map[string]any{"base_url": r.backend}})
			if !res.IsError || !strings.Contains(text(res), errcode.Forbidden) {
				t.Fatalf("sse=%v: client calling %s: %s", sse, name, text(res))
			}
		}
	}
	if recs, _, _ := r.store.ListAudit(context.Background(), 10, 0); len(recs) != 0 {
		t.Fatalf("refused calls were audited: %+v", recs)
	}
	if _, ok := r.sys.Routes().ServerByName("x"); ok {
		t.Fatal("a client registered a server")
	}

	admin := r.connect(t, adminToken, false)
	res := callTool(t, admin, "add_mcp_server", map[string]any{"name": "second", "transport_type": "HTTP", "auto_connect": false,
		"connection_config": map[string]any{"base_url": r.backend, "headers": map[string]any{"X-Key": "s3cr3t"}}})
	if res.IsError {
		t.Fatalf("admin add_mcp_server: %s", text(res))
	}
	if res := callTool(t, admin, "connect_mcp_server", map[string]any{"server_id": "second"}); res.IsError {
		t.Fatalf("admin connect: %s", text(res))
	}
	adminSSE := r.connect(t, adminToken, true)
	if res := callTool(t, adminSSE, "remove_mcp_server", map[string]any{"server_id": "second"}); res.IsError {
		t.Fatalf("admin remove over SSE: %s", text(res))
	}
	recs, total, err := r.store.ListAudit(context.Background(), 10, 0)
	if err != nil || total != 3 {
		t.Fatalf("audit: %d %v %+v", total, err, recs)
	}
	for i, want := range []string{"server.removed", "server.connected", "server.registered"} {
		rec := recs[i]
		if rec.Event != want || rec.Actor != "ops" || rec.IPAddress != "127.0.0.1" || rec.ServerName == nil || *rec.ServerName != "second" ||
			rec.ServerID == nil || !strings.Contains(string(rec.Details), `"via":"mcp"`) || strings.Contains(string(rec.Details), "s3cr3t") {
			t.Errorf("record %d: %+v %s, want %s by ops", i, rec, rec.Details, want)
		}
	}
}

// TestMCPRateLimit: backend calls and execute_external_tool share the caller's bucket; past the burst they answer
// the tool error RATE_LIMITED; another client is not affected.
func TestMCPRateLimit(t *testing.T) {
	r := newAuthRig(t, auth.NewLimiter(0.01, 2))
	c := r.connect(t, clientToken, false)
	waitFor(t, "back__echo listed", func() bool { return slices.Contains(c.toolNames(t), "back__echo") })
	for i := 0; i < 2; i++ {
		if res := callTool(t, c, "back__echo", nil); res.IsError {
			t.Fatalf("call %d: %s", i, text(res))
		}
	}
	for _, name := range []string{"back__echo", "back.echo", "execute_external_tool"} {
		res := callTool(t, c, name, map[string]any{"tool_name": "back.echo"})
		if !res.IsError || !strings.Contains(text(res), apierror.CodeRateLimited) || !strings.Contains(text(res), "retry_after_seconds") {
			t.Fatalf("%s past the burst: %s", name, text(res))
		}
	}
	// Reading is not limited; another client has its own bucket.
	if res := callTool(t, c, "list_mcp_servers", nil); res.IsError {
		t.Fatalf("list: %s", text(res))
	}
	other := r.connect(t, adminToken, false)
	if res := callTool(t, other, "back__echo", nil); res.IsError {
		t.Fatalf("another client: %s", text(res))
	}
}

// TestRequireIdentityWithoutMiddleware: with tokens configured, a call that carries no identity (an HTTP listener
// mounted without auth.Middleware by mistake) is refused, never treated as an anonymous admin.
func TestRequireIdentityWithoutMiddleware(t *testing.T) {
	st, sys := startSystem(t, actors.Deps{Config: actors.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)})
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true})
	t.Cleanup(ep.Close)
	hs := httptest.NewServer(ep.StreamableHandler())
	t.Cleanup(hs.Close)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL})
	for _, name := range []string{"add_mcp_server", "list_mcp_servers", "execute_external_tool"} {
		if res := callTool(t, c, name, map[string]any{"tool_name": "x.y", "name": "n"}); !res.IsError || !strings.Contains(text(res), errcode.Unauthorized) {
			t.Fatalf("%s without identity: %s", name, text(res))
		}
	}
}
