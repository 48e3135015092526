package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence"
)

// testEnv is one app over a fake store and a fake control.
type testEnv struct {
	app     *fiber.App
	store   *fakeStore
	control *fakeControl
	logs    *syncbuf.Buffer
}

func newEnv(t *testing.T, cfg ...Config) *testEnv {
	t.Helper()
	store := newFakeStore()
	control := &fakeControl{
		store:   store,
		connect: actors.ConnectResult{Status: persistence.StatusConnecting, Message: "Connection initiated"},
		discon:  actors.DisconnectResult{Status: persistence.StatusDisconnected, Message: "Server disconnected successfully"},
	}
	logs := &syncbuf.Buffer{}
	var c Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	app := New(Deps{
		Store:   store,
		Control: control,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config:  c,
	})
	return &testEnv{app: app, store: store, control: control, logs: logs}
}

// response is a finished exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic value.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object (%v): %q", err, r.body)
	}
	return m
}

// do sends one request; headers come as "Name: value" strings. A body with no Content-Type header given is sent
// as application/json.
func (e *testEnv) do(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	// Origin form, so that the request carries its Host header (an absolute target is dumped without one, and
	// fasthttp's server refuses an HTTP/1.1 request without Host, as RFC 9112 asks).
	req.RequestURI = req.URL.RequestURI()
	hasCT := false
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		hasCT = hasCT || strings.EqualFold(strings.TrimSpace(k), "Content-Type")
	}
	if body != "" && !hasCT {
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
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantError checks an error answer: status, code, and that it is the shape {detail, error_code[, context]}.
func wantError(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q", ct)
	}
	m := r.json(t)
	if m["error_code"] != code {
		t.Errorf("error_code = %v, want %s; body %s", m["error_code"], code, r.body)
	}
	if _, ok := m["detail"]; !ok {
		t.Errorf("no detail in %s", r.body)
	}
	for k := range m {
		if k != "detail" && k != "error_code" && k != "context" {
			t.Errorf("unexpected key %q in error body %s", k, r.body)
		}
	}
	if c, ok := m["context"]; ok {
		if cm, ok := c.(map[string]any); !ok || len(cm) == 0 {
			t.Errorf("context present but empty or not an object: %s", r.body)
		}
	}
	return m
}

// fieldErrors decodes a 422 body's detail list.
func fieldErrors(t *testing.T, r response) []apierror.FieldError {
	t.Helper()
	wantError(t, r, fiber.StatusUnprocessableEntity, apierror.CodeValidation)
	var body struct {
		Detail []apierror.FieldError `json:"detail"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("422 detail is not a list: %v: %s", err, r.body)
	}
	if len(body.Detail) == 0 {
		t.Fatalf("422 with an empty list: %s", r.body)
	}
	return body.Detail
}

// keysOf lists a JSON object's keys.
func keysOf(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func wantKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	got := keysOf(m)
	for _, k := range keys {
		if !got[k] {
			t.Errorf("missing key %q in %v", k, m)
		}
		delete(got, k)
	}
	for k := range got {
		t.Errorf("unexpected key %q in %v", k, m)
	}
}

// wantTime checks an RFC 3339 UTC timestamp with a Z.
func wantTime(t *testing.T, v any) {
	t.Helper()
	s, ok := v.(string)
	if !ok || !strings.HasSuffix(s, "Z") {
		t.Errorf("timestamp %v is not a UTC string with Z", v)
		return
	}
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		t.Errorf("timestamp %q: %v", s, err)
	}
}

const sseBody = `{"name":"github-mcp","description":"GitHub MCP Server for repository operations","transport_type":"SSE",
	"connection_config":{"url":"https://github-mcp.example.com/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}},
	"health_check_url":"https://github-mcp.example.com/health","auto_connect":true}`

const base = "/api/v1/aggregator"

// hasError reports whether errs holds an error at loc of type typ.
func hasError(errs []apierror.FieldError, loc, typ string) bool {
	for _, e := range errs {
		if e.Path() == loc && e.Type == typ {
			return true
		}
	}
	return false
}
