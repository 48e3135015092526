package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
)

func TestRequestID(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, sent string
		echoed     bool
	}{
		{"echoed", "abc-123_X.y:z", true},
		{"generated when absent", "", false},
		{"replaced when unsafe", "bad id\twith spaces", false},
		{"replaced when too long", strings.Repeat("a", 200), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.sent != "" {
				hdr = append(hdr, "X-Request-ID: "+tt.sent)
			}
			r := e.do(t, "GET", base+"/state", "", hdr...)
			got := r.header.Get("X-Request-ID")
			if tt.echoed && got != tt.sent {
				t.Errorf("got %q, want %q", got, tt.sent)
			}
			if !tt.echoed && (len(got) != 36 || got == tt.sent) {
				t.Errorf("want a fresh UUID, got %q", got)
			}
		})
	}
	// Error answers carry it too.
	r := e.do(t, "GET", "/nope", "", "X-Request-ID: err-1")
	if r.header.Get("X-Request-ID") != "err-1" {
		t.Errorf("404 without the request id: %v", r.header)
	}
}

// One line per request with method, route pattern, status, duration and request id; never bodies or headers.
func TestAccessLog(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
	e.do(t, "GET", base+"/servers/"+s.ID, "", "X-Request-ID: log-1", "Authorization: Bearer top-secret-token")
	e.do(t, "POST", base+"/servers", strings.Replace(sseBody, "github-mcp", "body-secret", 1), "X-Request-ID: log-2")
	e.do(t, "GET", "/unknown/path-secret", "", "X-Request-ID: log-3")

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "http request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("want 3 access lines, got %d: %s", len(lines), e.logs.String())
	}
	want := []struct {
		rid, method, route string
		status             float64
	}{
		{"log-1", "GET", "/api/v1/aggregator/servers/:id", 200},
		{"log-2", "POST", "/api/v1/aggregator/servers", 201},
		{"log-3", "GET", "unmatched", 404},
	}
	for i, w := range want {
		l := lines[i]
		if l["request_id"] != w.rid || l["method"] != w.method || l["route"] != w.route || l["status"] != w.status {
			t.Errorf("line %d = %v, want %+v", i, l, w)
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("line %d has no duration", i)
		}
	}
	all := e.logs.String()
	for _, secret := range []string{"top-secret-token", "body-secret", "GITHUB_TOKEN", "path-secret", s.ID} {
		if strings.Contains(all, secret) {
			t.Errorf("log contains %q: %s", secret, all)
		}
	}
}

func TestFiberErrorsAreShaped(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(t, "GET", "/nope", ""), http.StatusNotFound, apierror.CodeNotFound)
	wantError(t, e.do(t, "GET", base+"/servers/x/y/z", ""), http.StatusNotFound, apierror.CodeNotFound)
	wantError(t, e.do(t, "POST", base+"/nothing-here", "{}"), http.StatusNotFound, apierror.CodeNotFound)

	r := e.do(t, "PUT", base+"/servers", "{}")
	wantError(t, r, http.StatusMethodNotAllowed, apierror.CodeMethodNotAllowed)
	if !strings.Contains(r.header.Get("Allow"), "GET") || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("Allow = %q", r.header.Get("Allow"))
	}
	wantError(t, e.do(t, "DELETE", base+"/state", ""), http.StatusMethodNotAllowed, apierror.CodeMethodNotAllowed)
	wantError(t, e.do(t, "GET", base+"/servers/550e8400-e29b-41d4-a716-446655440000/connect", ""),
		http.StatusMethodNotAllowed, apierror.CodeMethodNotAllowed)
}

func TestPanicIsShaped500(t *testing.T) {
	e := newEnv(t)
	e.control.panics = "kaboom with internal detail"
	r := e.do(t, "POST", base+"/servers", sseBody, "X-Request-ID: p-1")
	m := wantError(t, r, http.StatusInternalServerError, apierror.CodeInternal)
	if strings.Contains(string(r.body), "kaboom") || m["detail"] != "Internal server error" {
		t.Errorf("leak: %s", r.body)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "kaboom") || !strings.Contains(logs, "p-1") {
		t.Errorf("panic not logged with its request id: %s", logs)
	}
	// The app keeps serving.
	if r := e.do(t, "GET", base+"/state", ""); r.status != 200 {
		t.Errorf("after panic: %d", r.status)
	}
}

func TestUnsupportedMediaType(t *testing.T) {
	e := newEnv(t)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "garbage;;"} {
		r := e.do(t, "POST", base+"/servers", sseBody, "Content-Type: "+ct)
		wantError(t, r, http.StatusUnsupportedMediaType, apierror.CodeUnsupportedMediaType)
	}
	for i, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json", "APPLICATION/JSON"} {
		name := "n" + strconv.Itoa(i)
		if r := e.do(t, "POST", base+"/servers", strings.Replace(sseBody, "github-mcp", name, 1), "Content-Type: "+ct); r.status != 201 {
			t.Errorf("%s: %d %s", ct, r.status, r.body)
		}
	}
	if n := len(e.control.Calls()); n != 3 {
		t.Errorf("calls = %d", n)
	}
}

// Bodies over MaxBodyBytes are refused by the server before routing, with the shaped 413. app.Test cannot show
// this (fasthttp reports the refusal as a connection error), so the app listens on a real socket here.
func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t, Config{MaxBodyBytes: 1024})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.app.Listener(ln) }()
	t.Cleanup(func() { _ = e.app.ShutdownWithTimeout(5 * time.Second) })
	url := "http://" + ln.Addr().String() + base

	client := &http.Client{Timeout: 5 * time.Second}
	post := func(path string, body []byte) response {
		req, _ := http.NewRequest("POST", url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}

	big := []byte(`{"name":"a","description":"` + strings.Repeat("x", 2000) + `"}`)
	r := post("/servers", big)
	m := wantError(t, r, http.StatusRequestEntityTooLarge, apierror.CodeRequestTooLarge)
	if m["context"].(map[string]any)["max_bytes"] != 1024.0 {
		t.Errorf("body %s", r.body)
	}
	if r.header.Get("X-Request-ID") == "" {
		t.Errorf("413 without request id")
	}
	if !strings.Contains(e.logs.String(), `"status":413`) {
		t.Errorf("413 not logged: %s", e.logs.String())
	}
	wantError(t, post("/servers/550e8400-e29b-41d4-a716-446655440000/disconnect", big), http.StatusRequestEntityTooLarge, apierror.CodeRequestTooLarge)

	// Just under the limit is processed normally.
	if r := post("/servers", []byte(sseBody)); r.status != http.StatusCreated {
		t.Errorf("small body: %d %s", r.status, r.body)
	}
}

// Hostile or odd input answers 4xx, never 500.
func TestBadInputNever500(t *testing.T) {
	e := newEnv(t)
	s := e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
	bodies := []string{
		`{`, `}`, `[]`, `null`, `0`, `"x"`, `true`, "\x00", "\xff\xfe", `{"name":"\ud800"}`,
		`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"description":"\u0000"}`,
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
		`{"a":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5001),
		`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X":"` + strings.Repeat("v", 5000) + `"}}}`,
		`{"name":1e999,"transport_type":-0,"connection_config":1.5e-400}`,
		`{"force":true}{"force":false}`,
		`{"name":"a","name":"b","name":"c"}`,
	}
	targets := []struct{ method, path string }{
		{"POST", base + "/servers"},
		{"PATCH", base + "/servers/" + s.ID},
		{"POST", base + "/servers/" + s.ID + "/disconnect"},
	}
	for _, tg := range targets {
		for _, b := range bodies {
			r := e.do(t, tg.method, tg.path, b)
			// Only the disconnect body may be fine ("null" means no body); nothing may be a 5xx.
			okStatus := r.status >= 400 && r.status < 500 || strings.HasSuffix(tg.path, "/disconnect") && r.status == 200
			if !okStatus {
				t.Errorf("%s %s %.40q: %d %s", tg.method, tg.path, b, r.status, r.body)
			}
		}
	}
	queries := []string{"limit=%00", "offset=1e3", "status=%ff", "include_tools=%00", "limit=-0x10", "limit[]=1&limit=2x"}
	for _, q := range queries {
		if r := e.do(t, "GET", base+"/servers?"+q, ""); r.status != 422 {
			t.Errorf("%s: %d %s", q, r.status, r.body)
		}
	}
}
