package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence"
)

// newGuardedEnv is newEnv with the daemon's host guard for a loopback listener and a settled flag.
func newGuardedEnv(t *testing.T, settled *atomic.Bool) *testEnv {
	t.Helper()
	store := newFakeStore()
	control := &fakeControl{store: store}
	logs := &syncbuf.Buffer{}
	app := New(Deps{Store: store, Control: control,
		Logger:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		HostGuard: auth.NewHostGuard([]string{"127.0.0.1:8081"}, nil, nil),
		Settled:   settled.Load})
	return &testEnv{app: app, store: store, control: control, logs: logs}
}

// TestHostGuardOnREST: the DNS-rebinding request of the issue (Host and Origin of the attacker's name) is 403
// HOST_NOT_ALLOWED before any handler runs; a foreign Origin with a good Host is 403 ORIGIN_NOT_ALLOWED; loopback
// requests pass.
func TestHostGuardOnREST(t *testing.T) {
	var settled atomic.Bool
	settled.Store(true)
	e := newGuardedEnv(t, &settled)
	body := `{"name":"pwn","transport_type":"STDIO","connection_config":{"command":"touch","args":["/tmp/x"]}}`
	tests := []struct {
		name   string
		host   string
		origin string
		status int
		code   string
	}{
		{"rebinding", "evil.example:8081", "http://evil.example:8081", 403, errcode.HostNotAllowed},
		{"cross origin", "127.0.0.1:8081", "http://evil.example", 403, errcode.OriginNotAllowed},
		{"loopback", "127.0.0.1:8081", "", 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{"Host: " + tt.host}
			if tt.origin != "" {
				hdr = append(hdr, "Origin: "+tt.origin)
			}
			r := e.doHost(t, "POST", base+"/servers", body, tt.host, hdr...)
			if tt.code != "" {
				wantError(t, r, tt.status, tt.code)
			} else if r.status != tt.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
		})
	}
	e.control.mu.Lock()
	n := 0
	for _, c := range e.control.calls {
		if c.method == "Register" {
			n++
		}
	}
	e.control.mu.Unlock()
	if n != 1 {
		t.Fatalf("Register called %d times, want only the loopback one", n)
	}
}

// TestProbes: /livez is 200 always; /readyz is 503 while startup has not settled or the store is down, 200 after;
// neither needs a token; both log at debug.
func TestProbes(t *testing.T) {
	var settled atomic.Bool
	e := newGuardedEnv(t, &settled)
	get := func(path string) response { return e.doHost(t, "GET", path, "", "127.0.0.1:8081") }
	if r := get(LivePath); r.status != 200 {
		t.Fatalf("livez %d %s", r.status, r.body)
	}
	r := get(ReadyPath)
	if r.status != 503 || !strings.Contains(string(r.body), `"startup":"reconnecting"`) {
		t.Fatalf("readyz before settling: %d %s", r.status, r.body)
	}
	settled.Store(true)
	if r := get(ReadyPath); r.status != 200 {
		t.Fatalf("readyz settled: %d %s", r.status, r.body)
	}
	e.store.mu.Lock()
	e.store.pingErr = fmt.Errorf("dial: %w", persistence.ErrUnavailable)
	e.store.mu.Unlock()
	r = get(ReadyPath)
	if r.status != 503 || !strings.Contains(string(r.body), `"store":"error: unavailable"`) || strings.Contains(string(r.body), "dial") {
		t.Fatalf("readyz with the store down: %d %s", r.status, r.body)
	}
	if r := get(LivePath); r.status != 200 {
		t.Fatalf("livez with the store down: %d", r.status)
	}
	for _, l := range accessLines(t, e.logs.String()) {
		if l["level"] != "DEBUG" {
			t.Errorf("probe logged at %v: %v", l["level"], l)
		}
	}
}

// TestAccessLogFields: one line per request with listener, method, route, status, duration_ms, request_id,
// client, client_ip and bytes; ordinary requests at INFO, health at DEBUG.
func TestAccessLogFields(t *testing.T) {
	var settled atomic.Bool
	e := newGuardedEnv(t, &settled)
	e.doHost(t, "GET", base+"/servers", "", "127.0.0.1:8081", "X-Request-ID: f-1")
	e.doHost(t, "GET", base+"/health", "", "127.0.0.1:8081", "X-Request-ID: f-2")
	lines := accessLines(t, e.logs.String())
	if len(lines) != 2 {
		t.Fatalf("want 2 lines: %s", e.logs)
	}
	for _, k := range []string{"listener", "method", "route", "status", "duration_ms", "request_id", "client", "client_ip", "bytes"} {
		if _, ok := lines[0][k]; !ok {
			t.Errorf("no %q in %v", k, lines[0])
		}
	}
	if lines[0]["level"] != "INFO" || lines[0]["client"] != "anonymous" || lines[0]["bytes"].(float64) <= 0 {
		t.Errorf("line %v", lines[0])
	}
	if lines[1]["level"] != "DEBUG" || lines[1]["route"] != base+"/health" {
		t.Errorf("health line %v", lines[1])
	}
}

// TestStoreUnavailableIs503: a store that cannot be reached answers 503 STORE_UNAVAILABLE with Retry-After, on
// reads and on writes, never 500.
func TestStoreUnavailableIs503(t *testing.T) {
	e := newEnv(t)
	down := fmt.Errorf("postgres: list servers: %w", errors.Join(persistence.ErrUnavailable, errors.New("connection refused")))
	e.store.listErr = down
	r := e.do(t, "GET", base+"/servers", "")
	wantError(t, r, http.StatusServiceUnavailable, apierror.CodeStoreUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	e.control.err = fmt.Errorf("register: %w", down)
	r = e.do(t, "POST", base+"/servers", sseBody)
	wantError(t, r, http.StatusServiceUnavailable, apierror.CodeStoreUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on the write")
	}
}

// doHost is do with the request's Host set (httptest defaults to example.com).
func (e *testEnv) doHost(t *testing.T, method, path, body, host string, headers ...string) response {
	t.Helper()
	return e.do(t, method, "http://"+host+path, body, headers...)
}

func accessLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			continue
		}
		if m["msg"] == "http request" {
			out = append(out, m)
		}
	}
	return out
}

// TestReadinessOfAClusterNode: a cluster node is not ready until it has joined its cluster, whatever else holds;
// a single node (no cluster probe) reports no cluster check.
func TestReadinessOfAClusterNode(t *testing.T) {
	store := newFakeStore()
	settled := func() bool { return true }
	for _, c := range []struct {
		name      string
		cluster   ClusterProbe
		wantReady bool
		wantCheck string
	}{
		{"single node", nil, true, ""},
		{"not joined", func() (string, int, bool) { return "n1", 0, false }, false, "not_joined"},
		{"joined", func() (string, int, bool) { return "n1", 3, true }, true, "joined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ready, probe := Readiness(context.Background(), store, settled, c.cluster, time.Second, slog.New(slog.DiscardHandler))
			if ready != c.wantReady || probe.Checks["cluster"] != c.wantCheck {
				t.Fatalf("ready %v with checks %v; want %v and cluster %q", ready, probe.Checks, c.wantReady, c.wantCheck)
			}
		})
	}
}
