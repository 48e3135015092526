// Package integration_test runs the admin API against the real actor system, the real embedded SQLite store and
// real MCP backends (npm's server-everything, and an in-process go-sdk server). It lives apart from package api so
// the unit tests and the fuzz target of package api do not depend on the whole daemon building.
package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const base = "/api/v1/aggregator"

const sseBody = `{"name":"github-mcp","description":"GitHub MCP Server for repository operations","transport_type":"SSE",
	"connection_config":{"url":"https://github-mcp.example.com/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}},
	"health_check_url":"https://github-mcp.example.com/health","auto_connect":true}`

type env struct {
	app *fiber.App
}

type response struct {
	status int
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object (%v): %q", err, r.body)
	}
	return m
}

func (e *env) do(t *testing.T, method, path, body string) response {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.app.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, body: b}
}

func wantError(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	m := r.json(t)
	if m["error_code"] != code {
		t.Errorf("error_code = %v, want %s", m["error_code"], code)
	}
	return m
}

func wantTime(t *testing.T, v any) {
	t.Helper()
	s, ok := v.(string)
	if _, err := time.Parse(time.RFC3339, s); !ok || err != nil || !strings.HasSuffix(s, "Z") {
		t.Errorf("timestamp %v is not RFC 3339 UTC", v)
	}
}

func ptr[T any](v T) *T { return &v }

// callable reports whether the routing table has the tool on a server that takes calls (CONNECTED or DEGRADED).
func callable(sys *actors.System, name string) bool {
	for _, e := range sys.Routes().Callable() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// goBackend is an in-process go-sdk streamable HTTP server: unlike the TypeScript server, it answers an unknown
// tool with a JSON-RPC error, and its "slow" tool sleeps as long as it is asked.
func goBackend(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "go-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			header := ""
			if r.Extra != nil && r.Extra.Header != nil {
				header = r.Extra.Header.Get("X-Request-ID")
			}
			meta, _ := r.Params.Meta[actors.RequestIDMetaKey].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "header=" + header + " meta=" + meta}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: -32603, Message: "backend exploded"}
		})
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Params.Arguments)}},
				StructuredContent: map[string]any{"args": json.RawMessage(r.Params.Arguments)}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestAPIWithRealActors drives the admin API and POST /api/v1/tools/call through the real actor system against
// real backends: lifecycle, discovery, routing (namespaced, explicit server_id, ambiguous, unknown), results
// passed through unchanged, and 502, 503 and 504.
func TestAPIWithRealActors(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	cfg := actors.DefaultConfig()
	cfg.RequestTimeout = 2 * time.Second
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Logger: logger, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger})}
	waitStatus := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := e.do(t, "GET", base+"/servers/"+id, "")
			if r.json(t)["status"] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s not %s: %s", id, want, r.body)
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
	waitTool := func(name string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ok := sys.Routes().Tool(name); ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tool %s never routable", name)
			}
			time.Sleep(30 * time.Millisecond)
		}
	}

	cmd, args := peertest.EverythingStdio(t)
	stdioCfg, _ := json.Marshal(map[string]any{"command": cmd, "args": args})
	r := e.do(t, "POST", base+"/servers", `{"name":"everything","transport_type":"STDIO","connection_config":`+string(stdioCfg)+`}`)
	if r.status != http.StatusCreated || r.json(t)["status"] != persistence.StatusConnecting {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	every := r.json(t)["id"].(string)
	r = e.do(t, "POST", base+"/servers", `{"name":"gob","transport_type":"HTTP","connection_config":{"base_url":"`+goBackend(t)+`"}}`)
	gob := r.json(t)["id"].(string)
	r = e.do(t, "POST", base+"/servers", `{"name":"offline","transport_type":"HTTP","auto_connect":false,"connection_config":{"base_url":"http://127.0.0.1:1/mcp"}}`)
	if r.status != http.StatusCreated || r.json(t)["status"] != persistence.StatusDisconnected {
		t.Fatalf("register offline: %d %s", r.status, r.body)
	}
	offline := r.json(t)["id"].(string)
	wantError(t, e.do(t, "POST", base+"/servers", `{"name":"gob","transport_type":"HTTP","connection_config":{"base_url":"https://x/mcp"}}`),
		http.StatusConflict, apierror.CodeServerAlreadyExists)

	waitStatus(every, persistence.StatusConnected)
	waitStatus(gob, persistence.StatusConnected)
	waitTool("everything.echo")
	waitTool("gob.echo")

	// Prompts and resources of a server, as stored, with the names /mcp exposes them under.
	for _, kind := range []string{"prompts", "resources"} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			r = e.do(t, "GET", base+"/servers/"+every+"/"+kind+"?limit=2", "")
			if m := r.json(t); r.status == http.StatusOK && m["total"].(float64) > 2 &&
				m["items"].([]any)[0].(map[string]any)["exposed_as"] != "" { // the router follows the store
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s never listed everything's: %d %s", kind, r.status, r.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		items := r.json(t)["items"].([]any)
		if len(items) != 2 {
			t.Fatalf("GET %s?limit=2: %d items", kind, len(items))
		}
		for _, it := range items {
			f := it.(map[string]any)
			want := f["name"].(string) // a URI of one server only is exposed as it is
			if kind == "prompts" {
				want = routing.Alias("everything", want, "__")
			}
			if f["exposed_as"] != want || f["definition"] == nil || f["updated_at"] == nil {
				t.Errorf("GET %s item %v, want exposed_as %q", kind, f, want)
			}
		}
	}
	if r = e.do(t, "GET", base+"/servers/"+gob+"/prompts", ""); r.status != http.StatusOK || r.json(t)["total"].(float64) != 0 {
		t.Errorf("prompts of a server without any: %d %s", r.status, r.body)
	}
	wantError(t, e.do(t, "GET", base+"/servers/00000000-0000-0000-0000-000000000000/resources", ""), http.StatusNotFound, apierror.CodeServerNotFound)
	wantError(t, e.do(t, "GET", base+"/servers/"+every+"/prompts?limit=0", ""), http.StatusUnprocessableEntity, apierror.CodeValidation)

	// Search: the contract's shape, over the connected servers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = e.do(t, "POST", "/api/v1/search", `{"query":"add two numbers","strategy":"direct","include_schemas":true,"limit":3}`)
		if tools, _ := r.json(t)["tools"].([]any); len(tools) > 0 && tools[0].(map[string]any)["name"] == "everything.get-sum" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("search never ranked everything.get-sum first: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sm := r.json(t)
	hit := sm["tools"].([]any)[0].(map[string]any)
	if hit["type"] != "tool" || hit["db_id"] == nil || hit["original_name"] != "get-sum" || hit["input_schema"] == nil ||
		hit["source_server"].(map[string]any)["status"] != persistence.StatusConnected || hit["score"].(float64) <= 0 {
		t.Errorf("search hit %v", hit)
	}
	if md := sm["metadata"].(map[string]any); md["strategy_used"] != "direct" || md["servers_searched"] != 2.0 ||
		md["external_tools_count"].(float64) < 14 || md["total_time_ms"] == nil {
		t.Errorf("search metadata %v", md)
	}
	if len(sm["tools"].([]any)) > 3 {
		t.Errorf("limit not applied: %d tools", len(sm["tools"].([]any)))
	}
	for _, bad := range []string{`{"query":""}`, `{"query":"x","limit":0}`, `{"query":"x","limit":"5"}`, `{"query":"x","strategy":"magic"}`,
		`{"query":"x","tool_threshold":2}`, `{"query":"x","extra":1}`, `{}`} {
		wantError(t, e.do(t, "POST", "/api/v1/search", bad), http.StatusUnprocessableEntity, apierror.CodeValidation)
	}
	r = e.do(t, "GET", "/api/v1/skills", "")
	if m := r.json(t); r.status != 200 || m["total"].(float64) < 15 {
		t.Errorf("skills %d %s", r.status, r.body)
	}

	r = e.do(t, "GET", base+"/servers?status=CONNECTED", "")
	if m := r.json(t); m["total"] != 2.0 {
		t.Errorf("status filter %s", r.body)
	}
	r = e.do(t, "GET", base+"/servers/"+every+"/tools", "")
	if m := r.json(t); m["total"].(float64) < 12 || m["unclassified"] != m["total"] {
		t.Errorf("tools %s", r.body)
	}
	wantTime(t, r.json(t)["tools"].([]any)[0].(map[string]any)["discovered_at"])

	// Routing: namespaced, explicit server_id, the original name when unique, ambiguous, unknown.
	r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"everything.echo","arguments":{"message":"hi there"}}`)
	m := r.json(t)
	if r.status != 200 || !strings.Contains(string(r.body), "hi there") || m["isError"] != false {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	meta := m["metadata"].(map[string]any)
	if meta["routed_to"] != "everything" || meta["server_id"] != every || meta["routing_time_ms"] == nil ||
		meta["execution_time_ms"] == nil || meta["total_time_ms"] == nil {
		t.Errorf("metadata %v", meta)
	}
	r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"echo","server_id":"`+gob+`","arguments":{"a":[1,2,{"b":null}]}}`)
	if r.status != 200 || r.json(t)["structuredContent"].(map[string]any)["args"].(map[string]any)["a"].([]any)[2].(map[string]any)["b"] != nil {
		t.Fatalf("explicit server_id / arguments unchanged: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"get-sum","arguments":{"a":2,"b":3}}`)
	if r.status != 200 || !strings.Contains(string(r.body), "5") || r.json(t)["metadata"].(map[string]any)["strategy"] != routing.StrategyLookupResolved {
		t.Fatalf("unique original name: %d %s", r.status, r.body)
	}
	m = wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"echo"}`), http.StatusBadRequest, apierror.CodeToolAmbiguous)
	if ids := m["context"].(map[string]any)["server_ids"].([]any); len(ids) != 2 {
		t.Errorf("ambiguous context %v", m)
	}
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"everything.nope"}`), http.StatusNotFound, apierror.CodeToolNotFound)
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"nope"}`), http.StatusNotFound, apierror.CodeToolNotFound)
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"echo","server_id":"00000000-0000-0000-0000-000000000000"}`), http.StatusNotFound, apierror.CodeServerNotFound)
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"echo","arguments":[1]}`), http.StatusUnprocessableEntity, apierror.CodeValidation)
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"nam":"echo"}`), http.StatusUnprocessableEntity, apierror.CodeValidation)

	// A tool result with isError is a normal 200; a JSON-RPC error is 502 with the backend's error.
	r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"everything.get-sum","arguments":{"a":"x"}}`)
	if r.status != 200 || r.json(t)["isError"] != true {
		t.Fatalf("isError result: %d %s", r.status, r.body)
	}
	// The caller's request id follows the call through the actors to the backend (header and _meta).
	req := httptest.NewRequest("POST", "/api/v1/tools/call", strings.NewReader(`{"name":"gob.whoami"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-ID", "trace-abc-123")
	resp, err := e.app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "header=trace-abc-123 meta=trace-abc-123") || resp.Header.Get("X-Request-ID") != "trace-abc-123" {
		t.Fatalf("request id did not reach the backend: %s (response id %q)", body, resp.Header.Get("X-Request-ID"))
	}
	m = wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"gob.fail"}`), http.StatusBadGateway, apierror.CodeExecutionFailed)
	if !strings.Contains(logs.String(), `"request_id":`) || !strings.Contains(logs.String(), `"msg":"tool call failed"`) {
		t.Errorf("the failed call is not logged with its request id")
	}
	if c := m["context"].(map[string]any); !strings.Contains(fmt.Sprint(c["backend_error"]), "backend exploded") {
		t.Errorf("502 must carry the backend's error: %v", m)
	}
	// The request timeout gives 504 in the shape, and the backend call is cancelled.
	start := time.Now()
	m = wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"gob.slow"}`), http.StatusGatewayTimeout, apierror.CodeRequestTimeout)
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("504 after %v, want about the 2s request timeout", took)
	}

	// Refresh: 202 for a connected server, 503 with the server for a disconnected one.
	r = e.do(t, "POST", base+"/servers/"+every+"/tools/refresh", "")
	if r.status != http.StatusAccepted || r.json(t)["status"] != "REFRESHING" {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	m = wantError(t, e.do(t, "POST", base+"/servers/"+offline+"/tools/refresh", ""), http.StatusServiceUnavailable, apierror.CodeServerUnavailable)
	if srv := m["server"].(map[string]any); srv["id"] != offline || srv["status"] != persistence.StatusDisconnected {
		t.Errorf("503 server object %v", m)
	}

	// Disconnected: a call is 503 SERVER_UNAVAILABLE with the server object (AG-US4 AC3).
	r = e.do(t, "POST", base+"/servers/"+gob+"/disconnect", `{"force":true}`)
	if r.status != 200 || r.json(t)["status"] != persistence.StatusDisconnected {
		t.Fatalf("disconnect %d %s", r.status, r.body)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"gob.echo"}`)
		if r.status == http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	m = wantError(t, r, http.StatusServiceUnavailable, apierror.CodeServerUnavailable)
	if srv := m["server"].(map[string]any); srv["name"] != "gob" || srv["status"] != persistence.StatusDisconnected || m["detail"] != "Server unavailable: gob" {
		t.Errorf("503 body %v", m)
	}
	// With gob gone from the callable set, the bare name "echo" is still ambiguous: tools stay stored (BR-007).
	wantError(t, e.do(t, "POST", "/api/v1/tools/call", `{"name":"echo"}`), http.StatusBadRequest, apierror.CodeToolAmbiguous)

	r = e.do(t, "GET", base+"/servers/"+every+"/history", "")
	if h := r.json(t)["history"].([]any); len(h) < 2 || h[0].(map[string]any)["event_type"] != persistence.StatusConnected {
		t.Errorf("history %s", r.body)
	}
	r = e.do(t, "GET", base+"/state", "")
	if m := r.json(t); m["total_servers"] != 3.0 || m["connected_servers"] != 1.0 || m["total_tools"].(float64) < 14 {
		t.Errorf("state %s", r.body)
	}

	// Rename: the tools follow, and calls by the new namespaced name work.
	r = e.do(t, "PATCH", base+"/servers/"+every, `{"name":"every2"}`)
	if r.status != 200 || r.json(t)["name"] != "every2" {
		t.Fatalf("rename %d %s", r.status, r.body)
	}
	waitStatus(every, persistence.StatusConnected)
	waitTool("every2.echo")
	r = e.do(t, "POST", "/api/v1/tools/call", `{"name":"every2.echo","arguments":{"message":"renamed"}}`)
	if r.status != 200 {
		t.Fatalf("call after rename %d %s", r.status, r.body)
	}

	r = e.do(t, "DELETE", base+"/servers/"+every, "")
	if r.status != http.StatusNoContent {
		t.Fatalf("delete %d %s", r.status, r.body)
	}
	for _, p := range []string{"", "/tools", "/history"} {
		wantError(t, e.do(t, "GET", base+"/servers/"+every+p, ""), http.StatusNotFound, apierror.CodeServerNotFound)
	}
	wantError(t, e.do(t, "POST", base+"/servers/"+every+"/connect", ""), http.StatusNotFound, apierror.CodeServerNotFound)
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("unexpected error logs: %s", logs.String())
	}
}

// startSystem starts the real actor system on a fresh embedded store, encrypted as the daemon's is (persistence/crypt,
// a fresh key), both stopped when the test ends; logs go to a discarded buffer.
func startSystem(t *testing.T) (persistence.Store, *actors.System, *slog.Logger) {
	t.Helper()
	return startSystemWith(t, actors.DefaultConfig())
}

// startSystemWith is startSystem with the actors' configuration cfg.
func startSystemWith(t *testing.T, cfg actors.Config) (persistence.Store, *actors.System, *slog.Logger) {
	t.Helper()
	inner, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypt.NewKeyring(crypt.NewKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := crypt.Wrap(inner, ring)
	t.Cleanup(st.Close)
	logger := slog.New(slog.NewJSONHandler(&syncbuf.Buffer{}, nil))
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Logger: logger, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	return st, sys, logger
}
