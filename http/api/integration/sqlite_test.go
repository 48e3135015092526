// Package integration_test runs the admin API against the real embedded SQLite store. It lives apart from package
// api so the unit tests and the fuzz target of package api do not depend on the store package building.
package integration_test

import (
	"bytes"
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

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const base = "/api/v1/aggregator"

const sseBody = `{"name":"github-mcp","description":"GitHub MCP Server for repository operations","transport_type":"SSE",
	"connection_config":{"url":"https://github-mcp.example.com/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}},
	"health_check_url":"https://github-mcp.example.com/health","auto_connect":true}`

// storeControl stands in for the actor system: it performs each write directly on the store.
type storeControl struct {
	store persistence.Store
}

func (c *storeControl) Register(ctx context.Context, r actors.RegisterRequest) (persistence.Server, error) {
	s := persistence.Server{Name: r.Name, Description: r.Description, TransportType: r.TransportType,
		ConnectionConfig: r.ConnectionConfig, HealthCheckURL: r.HealthCheckURL, AutoConnect: r.AutoConnect,
		Status: persistence.StatusDisconnected}
	if r.AutoConnect {
		s.Status = persistence.StatusConnecting
	}
	err := c.store.CreateServer(ctx, &s)
	return s, err
}

func (c *storeControl) Update(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error) {
	return c.store.UpdateServer(ctx, id, p)
}

func (c *storeControl) Connect(ctx context.Context, id string) (actors.ConnectResult, error) {
	if _, err := c.store.GetServer(ctx, id); err != nil {
		return actors.ConnectResult{}, err
	}
	return actors.ConnectResult{ServerID: id, Status: persistence.StatusConnecting, Message: "Connection initiated"}, nil
}

func (c *storeControl) Disconnect(ctx context.Context, id string, _ bool) (actors.DisconnectResult, error) {
	if _, err := c.store.GetServer(ctx, id); err != nil {
		return actors.DisconnectResult{}, err
	}
	return actors.DisconnectResult{ServerID: id, Status: persistence.StatusDisconnected, Message: "Server disconnected successfully"}, nil
}

func (c *storeControl) Remove(ctx context.Context, id string) error {
	return c.store.DeleteServer(ctx, id)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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

// TestWithSQLiteStore runs the read side and the error mapping against the real embedded store: what the handlers
// assume of a Store (ErrNotFound, ErrAlreadyExists, ordering, paging, counts, history order, JSON round trip of
// connection_config) is what the store does.
func TestWithSQLiteStore(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logs := &syncBuffer{}
	e := &env{app: api.New(api.Deps{Store: st, Control: &storeControl{store: st},
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})}

	r := e.do(t, "POST", base+"/servers", sseBody)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	gh := r.json(t)["id"].(string)
	r = e.do(t, "POST", base+"/servers", `{"name":"local","transport_type":"STDIO","auto_connect":false,
		"connection_config":{"command":"python","args":["-m","srv"],"env":{"TOKEN":"${TOKEN}"}}}`)
	if r.status != http.StatusCreated || r.json(t)["status"] != persistence.StatusDisconnected {
		t.Fatalf("register stdio: %d %s", r.status, r.body)
	}
	local := r.json(t)["id"].(string)

	if m := wantError(t, e.do(t, "POST", base+"/servers", sseBody), http.StatusConflict, api.CodeServerAlreadyExists); m["detail"] != "Server already exists: github-mcp" {
		t.Errorf("409 detail %v", m["detail"])
	}

	r = e.do(t, "GET", base+"/servers/"+local, "")
	var detail struct {
		ConnectionConfig map[string]any `json:"connection_config"`
		Description      *string        `json:"description"`
	}
	if err := json.Unmarshal(r.body, &detail); err != nil || detail.Description != nil ||
		detail.ConnectionConfig["env"].(map[string]any)["TOKEN"] != "${TOKEN}" {
		t.Errorf("detail %s (%v)", r.body, err)
	}

	r = e.do(t, "GET", base+"/servers?limit=1&offset=1", "")
	if m := r.json(t); m["total"] != 2.0 || m["servers"].([]any)[0].(map[string]any)["id"] != local {
		t.Errorf("paging %s", r.body)
	}
	r = e.do(t, "GET", base+"/servers?status=CONNECTING", "")
	if m := r.json(t); m["total"] != 1.0 || m["servers"].([]any)[0].(map[string]any)["id"] != gh {
		t.Errorf("filter %s", r.body)
	}

	// What the actors would do on connection: transition, then tools.
	t0 := time.Now().UTC().Truncate(time.Second)
	must(t, st.RecordTransition(ctx, persistence.Transition{ServerID: gh, From: persistence.StatusConnecting,
		To: persistence.StatusConnected, Reason: "connected", At: t0}))
	if _, err := st.ReplaceServerTools(ctx, gh, []persistence.ToolDef{
		{OriginalName: "create_issue", Description: "Create", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{OriginalName: "list_repos", Description: "List", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}); err != nil {
		t.Fatal(err)
	}
	tools, _, err := st.ListTools(ctx, persistence.ListToolsFilter{ServerID: gh})
	if err != nil || len(tools) != 2 {
		t.Fatalf("tools %v %v", tools, err)
	}
	must(t, st.SetToolClassification(ctx, tools[0].ID, persistence.ToolClassification{
		State: persistence.ClassificationClassified, SkillIDs: []string{"issue_tracking"}, PrimarySkillID: ptr("issue_tracking")}))

	r = e.do(t, "GET", base+"/servers/"+gh+"/tools", "")
	m := r.json(t)
	if m["total"] != 2.0 || m["classified"] != 1.0 || m["unclassified"] != 1.0 {
		t.Errorf("tools %s", r.body)
	}
	first := m["tools"].([]any)[0].(map[string]any)
	if first["name"] != "github-mcp.create_issue" || first["is_classified"] != true || first["primary_skill_id"] != "issue_tracking" {
		t.Errorf("tool %v", first)
	}
	wantTime(t, first["discovered_at"])

	r = e.do(t, "GET", base+"/servers?include_tools=true", "")
	if list := r.json(t)["servers"].([]any); len(list[0].(map[string]any)["tools"].([]any)) != 2 ||
		len(list[1].(map[string]any)["tools"].([]any)) != 0 {
		t.Errorf("include_tools %s", r.body)
	}

	must(t, st.RecordTransition(ctx, persistence.Transition{ServerID: gh, From: persistence.StatusConnected,
		To: persistence.StatusError, Reason: "health", ErrorMessage: ptr("3 failed checks"), At: t0.Add(time.Second)}))
	r = e.do(t, "GET", base+"/servers/"+gh+"/history", "")
	h := r.json(t)["history"].([]any)
	if len(h) != 2 || h[0].(map[string]any)["event_type"] != persistence.StatusError {
		t.Errorf("history %s", r.body)
	}
	r = e.do(t, "GET", base+"/servers/"+gh, "")
	if m := r.json(t); m["error_message"] != "3 failed checks" || m["status"] != persistence.StatusError || m["connected_at"] == nil {
		t.Errorf("after error %s", r.body)
	}

	r = e.do(t, "GET", base+"/health", "")
	if m := r.json(t); r.status != 200 || m["status"] != "degraded" || m["issues"].([]any)[0] != "1 server in error state" {
		t.Errorf("health %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", base+"/state", "")
	if m := r.json(t); m["total_servers"] != 2.0 || m["error_servers"] != 1.0 || m["total_tools"] != 2.0 ||
		m["classified_tools"] != 1.0 || m["last_sync"] == nil {
		t.Errorf("state %s", r.body)
	}

	// A rename renames the tools; a rename onto a taken name is the store's 409.
	r = e.do(t, "PATCH", base+"/servers/"+gh, `{"name":"gh","description":"new"}`)
	if r.status != 200 || r.json(t)["name"] != "gh" {
		t.Fatalf("rename %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", base+"/servers/"+gh+"/tools?limit=1", "")
	if ts := r.json(t)["tools"].([]any); len(ts) != 1 || !strings.HasPrefix(ts[0].(map[string]any)["name"].(string), "gh.") {
		t.Errorf("renamed tools %s", r.body)
	}
	wantError(t, e.do(t, "PATCH", base+"/servers/"+gh, `{"name":"local"}`), http.StatusConflict, api.CodeServerAlreadyExists)

	r = e.do(t, "DELETE", base+"/servers/"+gh, "")
	if r.status != http.StatusNoContent {
		t.Fatalf("delete %d %s", r.status, r.body)
	}
	for _, p := range []string{"", "/tools", "/history"} {
		wantError(t, e.do(t, "GET", base+"/servers/"+gh+p, ""), http.StatusNotFound, api.CodeServerNotFound)
	}
	wantError(t, e.do(t, "POST", base+"/servers/"+gh+"/connect", ""), http.StatusNotFound, api.CodeServerNotFound)
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("unexpected error logs: %s", logs.String())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
