package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
)

var serverListKeys = []string{"id", "name", "description", "transport_type", "status", "health_check_url",
	"tool_count", "last_health_check", "registered_at", "connected_at"}

var serverDetailKeys = append(append([]string{}, serverListKeys...), "connection_config", "error_message",
	"updated_at", "auto_connect", "consecutive_failures", "health_response_time_ms", "credential_mode", "user_credential")

func TestCreateServer(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantStatus string
		wantDesc   any
	}{
		{"auto_connect true is CONNECTING", sseBody, persistence.StatusConnecting, "GitHub MCP Server for repository operations"},
		{"auto_connect false is DISCONNECTED",
			`{"name":"local","transport_type":"STDIO","connection_config":{"command":"python","args":["-m","srv"]},"auto_connect":false}`,
			persistence.StatusDisconnected, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.do(t, "POST", base+"/servers", tt.body, "X-Request-ID: req-123")
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			m := r.json(t)
			wantKeys(t, m, serverDetailKeys...)
			if m["status"] != tt.wantStatus || m["description"] != tt.wantDesc || m["tool_count"] != 0.0 ||
				m["connected_at"] != nil || m["last_health_check"] != nil || m["error_message"] != nil {
				t.Errorf("body %s", r.body)
			}
			wantTime(t, m["registered_at"])
			wantTime(t, m["updated_at"])
			if got := r.header.Get("Location"); got != base+"/servers/"+m["id"].(string) {
				t.Errorf("Location = %q", got)
			}
			calls := e.control.Calls()
			if len(calls) != 1 || calls[0].method != "Register" {
				t.Fatalf("calls = %+v", calls)
			}
			c := calls[0]
			if c.req.Actor != "anonymous" || c.req.IP == "" || !c.deadline || c.requestID != "req-123" {
				t.Errorf("register call actor=%q ip=%q deadline=%v rid=%q", c.req.Actor, c.req.IP, c.deadline, c.requestID)
			}
		})
	}
}

func TestCreateServerKeepsVarReferences(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "POST", base+"/servers", sseBody)
	id := r.json(t)["id"].(string)
	g := e.do(t, "GET", base+"/servers/"+id, "")
	var got struct {
		ConnectionConfig struct {
			Headers map[string]string `json:"headers"`
		} `json:"connection_config"`
	}
	if err := json.Unmarshal(g.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ConnectionConfig.Headers["Authorization"] != "Bearer ${GITHUB_TOKEN}" {
		t.Errorf("connection_config = %s", g.body)
	}
}

func TestCreateServerConflict(t *testing.T) {
	e := newEnv(t)
	if r := e.do(t, "POST", base+"/servers", sseBody); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	r := e.do(t, "POST", base+"/servers", sseBody)
	m := wantError(t, r, http.StatusConflict, apierror.CodeServerAlreadyExists)
	if m["detail"] != "Server already exists: github-mcp" {
		t.Errorf("detail = %v", m["detail"])
	}
	if _, ok := m["context"]; ok {
		t.Errorf("context should be omitted: %s", r.body)
	}
}

// Every BR-001 rule answers 422 with a FastAPI-style list, and the actors are never asked.
func TestCreateServerValidation(t *testing.T) {
	tests := []struct {
		name string
		body string
		loc  string
		typ  string
	}{
		{"empty body", "", "body", apierror.FieldMissing},
		{"malformed JSON", `{"name": "x",`, "body", apierror.FieldJSONInvalid},
		{"not an object", `["x"]`, "body", apierror.FieldTypeError},
		{"name missing", `{"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldMissing},
		{"name format", `{"name":"Bad","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name too long", `{"name":"` + strings.Repeat("a", 256) + `","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name wrong type", `{"name":["a"],"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldTypeError},
		{"transport missing", `{"name":"a","connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldMissing},
		{"transport invalid", `{"name":"a","transport_type":"GRPC","connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldValueError},
		{"config missing", `{"name":"a","transport_type":"SSE"}`, "body.connection_config", apierror.FieldMissing},
		{"config not object", `{"name":"a","transport_type":"SSE","connection_config":"x"}`, "body.connection_config", apierror.FieldTypeError},
		{"STDIO needs command", `{"name":"a","transport_type":"STDIO","connection_config":{}}`, "body.connection_config.command", apierror.FieldValueError},
		{"SSE needs url", `{"name":"a","transport_type":"SSE","connection_config":{"headers":{}}}`, "body.connection_config.url", apierror.FieldValueError},
		{"HTTP needs base_url", `{"name":"a","transport_type":"HTTP","connection_config":{}}`, "body.connection_config.base_url", apierror.FieldValueError},
		{"url not http", `{"name":"a","transport_type":"SSE","connection_config":{"url":"file:///etc/passwd"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"unknown config key", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","proxy":"x"}}`, "body.connection_config.proxy", apierror.FieldExtraForbidden},
		{"args wrong type", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"x","args":[true]}}`, "body.connection_config.args.0", apierror.FieldTypeError},
		{"env wrong type", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"x","env":{"A":1}}}`, "body.connection_config.env.A", apierror.FieldTypeError},
		{"headers wrong type", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":"x"}}`, "body.connection_config.headers", apierror.FieldTypeError},
		{"description too long", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"description":"` + strings.Repeat("d", 1001) + `"}`, "body.description", apierror.FieldValueError},
		{"health url invalid", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"health_check_url":"localhost"}`, "body.health_check_url", apierror.FieldValueError},
		{"auto_connect wrong type", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"auto_connect":"no"}`, "body.auto_connect", apierror.FieldTypeError},
		{"unknown field", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"owner":"me"}`, "body.owner", apierror.FieldExtraForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.do(t, "POST", base+"/servers", tt.body)
			errs := fieldErrors(t, r)
			if !hasError(errs, tt.loc, tt.typ) {
				t.Errorf("want %s (%s) in %s", tt.loc, tt.typ, r.body)
			}
			if len(e.control.Calls()) != 0 {
				t.Errorf("control was asked: %+v", e.control.Calls())
			}
		})
	}
}

// The raw shape of a 422 matches the contract example exactly.
func TestValidationBodyShape(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "POST", base+"/servers", `{"name":"a","transport_type":"SSE","connection_config":{}}`)
	want := `{"detail":[{"loc":["body","connection_config","url"],"msg":"SSE transport requires 'url' in connection_config","type":"value_error"}],"error_code":"VALIDATION_ERROR"}`
	if r.status != http.StatusUnprocessableEntity || string(r.body) != want {
		t.Errorf("got %d %s\nwant %s", r.status, r.body, want)
	}
}

func TestCreateServerControlErrors(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"ask timeout", fmt.Errorf("ask registry: %w", actors.ErrAskTimeout), http.StatusServiceUnavailable, apierror.CodeServiceBusy},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, apierror.CodeServiceBusy},
		{"max servers", fmt.Errorf("x: %w", actors.ErrMaxServers), http.StatusConflict, apierror.CodeServerLimitReached},
		{"shutting down", actors.ErrShuttingDown, http.StatusServiceUnavailable, apierror.CodeServiceUnavailable},
		{"exists", fmt.Errorf("insert: %w", persistence.ErrAlreadyExists), http.StatusConflict, apierror.CodeServerAlreadyExists},
		{"unexpected", errors.New("pq: password authentication failed for user secret-user"), http.StatusInternalServerError, apierror.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.control.err = tt.err
			r := e.do(t, "POST", base+"/servers", sseBody)
			m := wantError(t, r, tt.status, tt.code)
			if strings.Contains(string(r.body), "secret-user") {
				t.Errorf("internal error leaked: %s", r.body)
			}
			if tt.code == apierror.CodeServiceBusy {
				if r.header.Get("Retry-After") == "" || !strings.Contains(m["detail"].(string), "retried") {
					t.Errorf("busy answer: %v %s", r.header, r.body)
				}
			}
			if tt.code == apierror.CodeInternal {
				if m["detail"] != "Internal server error" {
					t.Errorf("detail = %v", m["detail"])
				}
				if !strings.Contains(e.logs.String(), "secret-user") {
					t.Errorf("the real error should be logged: %s", e.logs.String())
				}
			}
		})
	}
}

// A Control that never answers is cut off by the ask deadline: 503 SERVICE_BUSY, not a hung request.
func TestAskTimeout(t *testing.T) {
	e := newEnv(t, Config{AskTimeout: 50 * time.Millisecond})
	e.control.block = true
	id := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusDisconnected}).ID
	for _, req := range []struct{ method, path, body string }{
		{"POST", base + "/servers", sseBody},
		{"POST", base + "/servers/" + id + "/connect", ""},
		{"POST", base + "/servers/" + id + "/disconnect", ""},
		{"PATCH", base + "/servers/" + id, `{"name":"b"}`},
		{"DELETE", base + "/servers/" + id, ""},
	} {
		start := time.Now()
		r := e.do(t, req.method, req.path, req.body)
		wantError(t, r, http.StatusServiceUnavailable, apierror.CodeServiceBusy)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s %s took %v", req.method, req.path, d)
		}
	}
}

func TestGetServer(t *testing.T) {
	e := newEnv(t)
	now := time.Date(2025, 1, 8, 10, 30, 0, 0, time.FixedZone("CET", 3600))
	ms := 12.5
	errMsg := "boom"
	srv := e.store.put(persistence.Server{
		Name: "github-mcp", TransportType: persistence.TransportSSE, Status: persistence.StatusError,
		ConnectionConfig: json.RawMessage(`{"url":"https://h/sse","headers":{"Authorization":"Bearer ${TOKEN}"}}`),
		LastHealthCheck:  &now, ConnectedAt: &now, HealthResponseMs: &ms, ErrorMessage: &errMsg,
		ConsecutiveFailures: 3, AutoConnect: true, ToolCount: 2,
	})

	r := e.do(t, "GET", base+"/servers/"+srv.ID, "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	m := r.json(t)
	wantKeys(t, m, serverDetailKeys...)
	if m["last_health_check"] != "2025-01-08T09:30:00Z" || m["connected_at"] != "2025-01-08T09:30:00Z" {
		t.Errorf("times not UTC: %s", r.body)
	}
	if m["description"] != nil || m["health_check_url"] != nil || m["error_message"] != "boom" ||
		m["consecutive_failures"] != 3.0 || m["health_response_time_ms"] != 12.5 || m["auto_connect"] != true {
		t.Errorf("body %s", r.body)
	}
	cfg := m["connection_config"].(map[string]any)
	if cfg["headers"].(map[string]any)["Authorization"] != "Bearer ${TOKEN}" {
		t.Errorf("config = %v", cfg)
	}

	// Uppercase UUIDs name the same server.
	if r := e.do(t, "GET", base+"/servers/"+strings.ToUpper(srv.ID), ""); r.status != http.StatusOK {
		t.Errorf("uppercase id: %d", r.status)
	}
}

func TestUnknownAndMalformedIDs(t *testing.T) {
	e := newEnv(t)
	unknown := "550e8400-e29b-41d4-a716-446655440000"
	ids := []string{
		unknown, "abc", "123", "550e8400e29b41d4a716446655440000", "{550e8400-e29b-41d4-a716-446655440000}",
		"550e8400-e29b-41d4-a716-44665544000g", "urn:uuid:550e8400-e29b-41d4-a716-446655440000",
		"%00", strings.Repeat("a", 500),
	}
	routes := []struct{ method, suffix, body string }{
		{"GET", "", ""}, {"PATCH", "", `{"name":"x"}`}, {"DELETE", "", ""},
		{"POST", "/connect", ""}, {"POST", "/disconnect", ""}, {"GET", "/tools", ""}, {"GET", "/history", ""},
	}
	for _, id := range ids {
		for _, rt := range routes {
			r := e.do(t, rt.method, base+"/servers/"+id+rt.suffix, rt.body)
			m := wantError(t, r, http.StatusNotFound, apierror.CodeServerNotFound)
			if !strings.HasPrefix(m["detail"].(string), "Server not found: ") {
				t.Errorf("%s %s: detail %v", rt.method, id, m["detail"])
			}
		}
	}
	// Only the well-formed unknown id may reach the actors.
	for _, c := range e.control.Calls() {
		if c.id != unknown {
			t.Errorf("control asked about malformed id %q", c.id)
		}
	}
	r := e.do(t, "GET", base+"/servers/"+unknown, "")
	if m := r.json(t); m["detail"] != "Server not found: "+unknown {
		t.Errorf("detail = %v", m["detail"])
	}
}

func TestListServers(t *testing.T) {
	e := newEnv(t)
	var ids []string
	statuses := []string{persistence.StatusConnected, persistence.StatusError, persistence.StatusConnected,
		persistence.StatusDisconnected, persistence.StatusConnected}
	for i, st := range statuses {
		s := e.store.put(persistence.Server{Name: fmt.Sprintf("s%d", i), Status: st})
		ids = append(ids, s.ID)
	}
	e.store.tools[ids[0]] = []persistence.Tool{{ID: 7, Name: "s0.b", OriginalName: "b", IsClassified: true,
		SkillIDs: []string{"x"}}, {ID: 8, Name: "s0.a", OriginalName: "a"}}

	t.Run("defaults", func(t *testing.T) {
		r := e.do(t, "GET", base+"/servers", "")
		m := r.json(t)
		wantKeys(t, m, "servers", "total", "limit", "offset")
		if m["total"] != 5.0 || m["limit"] != 100.0 || m["offset"] != 0.0 || len(m["servers"].([]any)) != 5 {
			t.Errorf("body %s", r.body)
		}
		first := m["servers"].([]any)[0].(map[string]any)
		wantKeys(t, first, serverListKeys...)
		if first["id"] != ids[0] {
			t.Errorf("order: %v", first["id"])
		}
	})
	t.Run("paging", func(t *testing.T) {
		r := e.do(t, "GET", base+"/servers?limit=2&offset=3", "")
		m := r.json(t)
		list := m["servers"].([]any)
		if m["total"] != 5.0 || m["limit"] != 2.0 || m["offset"] != 3.0 || len(list) != 2 ||
			list[0].(map[string]any)["id"] != ids[3] {
			t.Errorf("body %s", r.body)
		}
		r = e.do(t, "GET", base+"/servers?offset=50", "")
		if m := r.json(t); len(m["servers"].([]any)) != 0 || m["total"] != 5.0 {
			t.Errorf("past the end: %s", r.body)
		}
		if !strings.Contains(string(r.body), `"servers":[]`) {
			t.Errorf("empty page must be [], got %s", r.body)
		}
	})
	t.Run("status filter", func(t *testing.T) {
		for q, want := range map[string]float64{"CONNECTED": 3, "connected": 3, "ERROR": 1, "DEGRADED": 0, "DISCONNECTING": 0} {
			r := e.do(t, "GET", base+"/servers?status="+q, "")
			if m := r.json(t); r.status != 200 || m["total"] != want {
				t.Errorf("status=%s: %d %s", q, r.status, r.body)
			}
		}
	})
	t.Run("include_tools", func(t *testing.T) {
		r := e.do(t, "GET", base+"/servers?include_tools=true&limit=2", "")
		list := r.json(t)["servers"].([]any)
		s0 := list[0].(map[string]any)
		wantKeys(t, s0, append(append([]string{}, serverListKeys...), "tools")...)
		tools := s0["tools"].([]any)
		if len(tools) != 2 || tools[0].(map[string]any)["name"] != "s0.a" {
			t.Errorf("tools %v", tools)
		}
		wantKeys(t, tools[0].(map[string]any), "id", "name", "original_name", "description", "skill_ids",
			"primary_skill_id", "is_classified", "discovered_at")
		if tools[1].(map[string]any)["id"] != "7" {
			t.Errorf("tool id should be a string: %v", tools[1])
		}
		if s1 := list[1].(map[string]any); s1["tools"] == nil || len(s1["tools"].([]any)) != 0 {
			t.Errorf("a server without tools carries tools: [], got %v", s1["tools"])
		}
		r = e.do(t, "GET", base+"/servers?include_tools=false", "")
		if _, ok := r.json(t)["servers"].([]any)[0].(map[string]any)["tools"]; ok {
			t.Errorf("tools without include_tools: %s", r.body)
		}
	})
	t.Run("invalid query", func(t *testing.T) {
		tests := []struct{ query, loc, typ string }{
			{"limit=-1", "query.limit", apierror.FieldValueError},
			{"limit=0", "query.limit", apierror.FieldValueError},
			{"limit=1001", "query.limit", apierror.FieldValueError},
			{"limit=abc", "query.limit", apierror.FieldTypeError},
			{"limit=", "query.limit", apierror.FieldTypeError},
			{"limit=1.5", "query.limit", apierror.FieldTypeError},
			{"limit=99999999999999999999999", "query.limit", apierror.FieldTypeError},
			{"offset=-5", "query.offset", apierror.FieldValueError},
			{"offset=x", "query.offset", apierror.FieldTypeError},
			{"status=BOGUS", "query.status", apierror.FieldValueError},
			{"status=", "query.status", apierror.FieldValueError},
			{"include_tools=maybe", "query.include_tools", apierror.FieldTypeError},
		}
		for _, tt := range tests {
			r := e.do(t, "GET", base+"/servers?"+tt.query, "")
			if errs := fieldErrors(t, r); !hasError(errs, tt.loc, tt.typ) {
				t.Errorf("%s: want %s (%s), got %s", tt.query, tt.loc, tt.typ, r.body)
			}
		}
		r := e.do(t, "GET", base+"/servers?limit=x&offset=-1&status=nope", "")
		if errs := fieldErrors(t, r); len(errs) != 3 {
			t.Errorf("want all 3 errors, got %s", r.body)
		}
	})
	t.Run("store failure is a 500 without details", func(t *testing.T) {
		e.store.mu.Lock()
		e.store.listErr = errors.New("disk on fire at /var/lib/secret.db")
		e.store.mu.Unlock()
		defer func() { e.store.mu.Lock(); e.store.listErr = nil; e.store.mu.Unlock() }()
		r := e.do(t, "GET", base+"/servers", "")
		wantError(t, r, http.StatusInternalServerError, apierror.CodeInternal)
		if strings.Contains(string(r.body), "secret") {
			t.Errorf("leak: %s", r.body)
		}
	})
}

func TestPatchServer(t *testing.T) {
	e := newEnv(t)
	a := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected,
		HealthCheckURL: ptr("https://h/health"), Description: ptr("old")})
	e.store.put(persistence.Server{Name: "taken", Status: persistence.StatusConnected})

	r := e.do(t, "PATCH", base+"/servers/"+a.ID, `{"name":"renamed","description":null,"health_check_url":null,
		"connection_config":{"url":"https://new/sse"}}`)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	m := r.json(t)
	wantKeys(t, m, serverDetailKeys...)
	if m["name"] != "renamed" || m["description"] != nil || m["health_check_url"] != nil ||
		m["connection_config"].(map[string]any)["url"] != "https://new/sse" {
		t.Errorf("body %s", r.body)
	}
	calls := e.control.Calls()
	if len(calls) != 1 || calls[0].method != "Update" || calls[0].id != a.ID || !calls[0].patch.ClearHealthCheckURL {
		t.Errorf("calls %+v", calls)
	}

	r = e.do(t, "PATCH", base+"/servers/"+a.ID, `{"name":"taken"}`)
	if m := wantError(t, r, http.StatusConflict, apierror.CodeServerAlreadyExists); m["detail"] != "Server already exists: taken" {
		t.Errorf("detail %v", m["detail"])
	}

	for body, loc := range map[string]string{
		`{}`:                                  "body",
		`{"transport_type":"STDIO"}`:          "body.transport_type",
		`{"connection_config":{"command":1}}`: "body.connection_config.url",
		`{"name":"UPPER"}`:                    "body.name",
		`{"status":"CONNECTED"}`:              "body.status",
		`not json`:                            "body",
		``:                                    "body",
	} {
		r := e.do(t, "PATCH", base+"/servers/"+a.ID, body)
		errs := fieldErrors(t, r)
		found := false
		for _, fe := range errs {
			found = found || fe.Path() == loc
		}
		if !found {
			t.Errorf("%s: want loc %s, got %s", body, loc, r.body)
		}
	}
	if n := len(e.control.Calls()); n != 2 {
		t.Errorf("invalid patches must not reach the actors: %d calls", n)
	}
}

func TestConnect(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusDisconnected})
	e.control.connect = actors.ConnectResult{ServerID: s.ID, Status: persistence.StatusConnecting, Message: "Connection initiated"}
	r := e.do(t, "POST", base+"/servers/"+s.ID+"/connect", "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := fmt.Sprintf(`{"server_id":%q,"status":"CONNECTING","message":"Connection initiated"}`, s.ID)
	if string(r.body) != want {
		t.Errorf("body %s, want %s", r.body, want)
	}
	// Already connected is a 200 too (BR-002): whatever Control says is passed on.
	e.control.connect = actors.ConnectResult{ServerID: s.ID, Status: persistence.StatusConnected, Message: "Server already connected"}
	r = e.do(t, "POST", base+"/servers/"+s.ID+"/connect", `{"ignored":true}`)
	if r.status != http.StatusOK || r.json(t)["message"] != "Server already connected" {
		t.Errorf("%d %s", r.status, r.body)
	}
	wantError(t, e.do(t, "POST", base+"/servers/6f1c1f8e-4a7e-4c59-9d0b-4f0f0b0b0b0b/connect", ""),
		http.StatusNotFound, apierror.CodeServerNotFound)
}

func TestDisconnect(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		headers   []string
		wantForce bool
		status    int
	}{
		{name: "no body", status: 200},
		{name: "empty JSON object", body: `{}`, status: 200},
		{name: "force false", body: `{"force":false}`, status: 200},
		{name: "force true", body: `{"force":true}`, wantForce: true, status: 200},
		{name: "force wrong type", body: `{"force":"true"}`, status: 422},
		{name: "unknown field", body: `{"force":true,"now":1}`, status: 422},
		{name: "malformed", body: `{"force":`, status: 422},
		{name: "text/plain body", body: `{"force":true}`, headers: []string{"Content-Type: text/plain"}, status: 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
			e.control.discon = actors.DisconnectResult{ServerID: s.ID, Status: persistence.StatusDisconnecting,
				PendingRequests: 3, Message: "Waiting for 3 pending requests to complete"}
			r := e.do(t, "POST", base+"/servers/"+s.ID+"/disconnect", tt.body, tt.headers...)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			calls := e.control.Calls()
			if tt.status != 200 {
				if len(calls) != 0 {
					t.Errorf("control asked on a bad body")
				}
				return
			}
			if len(calls) != 1 || calls[0].force != tt.wantForce || calls[0].id != s.ID {
				t.Errorf("calls %+v", calls)
			}
			m := r.json(t)
			wantKeys(t, m, "server_id", "status", "pending_requests", "message")
			if m["pending_requests"] != 3.0 || m["status"] != "DISCONNECTING" {
				t.Errorf("body %s", r.body)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
	r := e.do(t, "DELETE", base+"/servers/"+s.ID, "")
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	wantError(t, e.do(t, "GET", base+"/servers/"+s.ID, ""), http.StatusNotFound, apierror.CodeServerNotFound)
	wantError(t, e.do(t, "DELETE", base+"/servers/"+s.ID, ""), http.StatusNotFound, apierror.CodeServerNotFound)
}

func TestServerTools(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "gh", Status: persistence.StatusConnected})
	empty := e.store.put(persistence.Server{Name: "empty", Status: persistence.StatusConnected})
	at := time.Date(2025, 1, 8, 10, 0, 10, 0, time.UTC)
	e.store.tools[s.ID] = []persistence.Tool{
		{ID: 1, Name: "gh.create_issue", OriginalName: "create_issue", Description: "Create", IsClassified: true,
			SkillIDs: []string{"code_management", "issue_tracking"}, PrimarySkillID: ptr("issue_tracking"), DiscoveredAt: at},
		{ID: 2, Name: "gh.a", OriginalName: "a", DiscoveredAt: at},
		{ID: 3, Name: "gh.b", OriginalName: "b", DiscoveredAt: at},
	}

	r := e.do(t, "GET", base+"/servers/"+s.ID+"/tools", "")
	m := r.json(t)
	wantKeys(t, m, "tools", "total", "classified", "unclassified")
	if m["total"] != 3.0 || m["classified"] != 1.0 || m["unclassified"] != 2.0 || len(m["tools"].([]any)) != 3 {
		t.Errorf("body %s", r.body)
	}
	issue := m["tools"].([]any)[2].(map[string]any)
	if issue["id"] != "1" || issue["primary_skill_id"] != "issue_tracking" || issue["discovered_at"] != "2025-01-08T10:00:10Z" {
		t.Errorf("tool %v", issue)
	}
	if other := m["tools"].([]any)[0].(map[string]any); other["primary_skill_id"] != nil ||
		fmt.Sprint(other["skill_ids"]) != "[]" {
		t.Errorf("unclassified tool %v", other)
	}

	r = e.do(t, "GET", base+"/servers/"+s.ID+"/tools?limit=1&offset=1", "")
	if m := r.json(t); len(m["tools"].([]any)) != 1 || m["total"] != 3.0 || m["tools"].([]any)[0].(map[string]any)["name"] != "gh.b" {
		t.Errorf("paged %s", r.body)
	}
	r = e.do(t, "GET", base+"/servers/"+empty.ID+"/tools", "")
	if string(r.body) != `{"tools":[],"total":0,"classified":0,"unclassified":0}` {
		t.Errorf("empty %s", r.body)
	}
	fieldErrors(t, e.do(t, "GET", base+"/servers/"+s.ID+"/tools?limit=-1", ""))
	fieldErrors(t, e.do(t, "GET", base+"/servers/"+s.ID+"/tools?offset=a", ""))
	wantError(t, e.do(t, "GET", base+"/servers/550e8400-e29b-41d4-a716-446655440000/tools", ""), 404, apierror.CodeServerNotFound)
}

func TestServerHistory(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "gh", Status: persistence.StatusConnected})
	t0 := time.Date(2025, 1, 8, 10, 0, 0, 0, time.UTC)
	e.store.history[s.ID] = []persistence.HistoryEvent{
		{ID: 1, ServerID: s.ID, EventType: "CONNECTING", Timestamp: t0},
		{ID: 2, ServerID: s.ID, EventType: "CONNECTED", Timestamp: t0.Add(time.Second), Details: json.RawMessage(`{"tools":3}`)},
		{ID: 3, ServerID: s.ID, EventType: "ERROR", Timestamp: t0.Add(2 * time.Second)},
	}
	r := e.do(t, "GET", base+"/servers/"+s.ID+"/history", "")
	m := r.json(t)
	wantKeys(t, m, "server_id", "history", "limit")
	h := m["history"].([]any)
	if len(h) != 3 || h[0].(map[string]any)["event_type"] != "ERROR" || h[0].(map[string]any)["details"] != nil {
		t.Errorf("body %s", r.body)
	}
	wantKeys(t, h[1].(map[string]any), "id", "event_type", "details", "timestamp")
	if h[1].(map[string]any)["details"].(map[string]any)["tools"] != 3.0 {
		t.Errorf("details %v", h[1])
	}
	r = e.do(t, "GET", base+"/servers/"+s.ID+"/history?limit=1", "")
	if m := r.json(t); len(m["history"].([]any)) != 1 || m["limit"] != 1.0 {
		t.Errorf("limit %s", r.body)
	}
	fieldErrors(t, e.do(t, "GET", base+"/servers/"+s.ID+"/history?limit=zero", ""))
}

func ptr[T any](v T) *T { return &v }
