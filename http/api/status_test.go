package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

func TestState(t *testing.T) {
	start := time.Date(2025, 1, 8, 9, 0, 0, 0, time.UTC)
	now := start.Add(86400 * time.Second)
	e := newEnv(t, Config{StartedAt: start, Now: func() time.Time { return now }, HealthCheckInterval: 45 * time.Second})

	t.Run("empty", func(t *testing.T) {
		r := e.do(t, "GET", base+"/state", "")
		m := r.json(t)
		wantKeys(t, m, "total_servers", "connected_servers", "disconnected_servers", "error_servers",
			"connecting_servers", "degraded_servers", "total_tools", "classified_tools", "unclassified_tools",
			"last_sync", "health_check_interval_seconds", "uptime_seconds")
		if m["last_sync"] != nil || m["total_servers"] != 0.0 || m["uptime_seconds"] != 86400.0 ||
			m["health_check_interval_seconds"] != 45.0 {
			t.Errorf("body %s", r.body)
		}
	})

	t.Run("counts", func(t *testing.T) {
		latest := time.Date(2025, 1, 9, 8, 0, 0, 0, time.FixedZone("X", -2*3600))
		for i, st := range []string{persistence.StatusConnected, persistence.StatusConnected, persistence.StatusError,
			persistence.StatusConnecting, persistence.StatusDegraded, persistence.StatusDisconnected, persistence.StatusDisconnecting} {
			s := persistence.Server{Name: string(rune('a' + i)), Status: st}
			if i == 3 {
				s.UpdatedAt = latest
			}
			s = e.store.put(s)
			if i == 0 {
				e.store.tools[s.ID] = []persistence.Tool{{ID: 1, IsClassified: true}, {ID: 2}, {ID: 3, IsClassified: true}}
			}
		}
		r := e.do(t, "GET", base+"/state", "")
		m := r.json(t)
		want := map[string]float64{"total_servers": 7, "connected_servers": 2, "disconnected_servers": 1,
			"error_servers": 1, "connecting_servers": 1, "degraded_servers": 1, "total_tools": 3,
			"classified_tools": 2, "unclassified_tools": 1}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%s = %v, want %v", k, m[k], v)
			}
		}
		if m["last_sync"] != "2025-01-09T10:00:00Z" {
			t.Errorf("last_sync = %v", m["last_sync"])
		}
	})
}

func TestHealth(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		e := newEnv(t)
		e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
		e.store.put(persistence.Server{Name: "b", Status: persistence.StatusDisconnected})
		r := e.do(t, "GET", base+"/health", "")
		want := `{"status":"healthy","checks":{"database":"ok","qdrant":"not_configured","sessions":"ok"},"servers":{"total":2,"connected":1,"error":0}}`
		if r.status != 200 || string(r.body) != want {
			t.Errorf("%d %s\nwant %s", r.status, r.body, want)
		}
	})
	t.Run("degraded when servers are in ERROR", func(t *testing.T) {
		e := newEnv(t)
		e.store.put(persistence.Server{Name: "a", Status: persistence.StatusConnected})
		e.store.put(persistence.Server{Name: "b", Status: persistence.StatusConnected})
		for _, n := range []string{"c", "d", "e"} {
			e.store.put(persistence.Server{Name: n, Status: persistence.StatusError})
		}
		r := e.do(t, "GET", base+"/health", "")
		want := `{"status":"degraded","checks":{"database":"ok","qdrant":"not_configured","sessions":"degraded"},"servers":{"total":5,"connected":2,"error":3},"issues":["3 servers in error state"]}`
		if r.status != 200 || string(r.body) != want {
			t.Errorf("%d %s\nwant %s", r.status, r.body, want)
		}
	})
	t.Run("unhealthy when Ping fails", func(t *testing.T) {
		e := newEnv(t)
		e.store.pingErr = errors.New("dial tcp 10.0.0.5:5432: connection refused (user=admin)")
		r := e.do(t, "GET", base+"/health", "")
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("status %d", r.status)
		}
		m := r.json(t)
		if m["status"] != "unhealthy" || m["checks"].(map[string]any)["database"] != "error: unavailable" {
			t.Errorf("body %s", r.body)
		}
		if strings.Contains(string(r.body), "10.0.0.5") || strings.Contains(string(r.body), "admin") {
			t.Errorf("leak: %s", r.body)
		}
		if !strings.Contains(e.logs.String(), "connection refused") {
			t.Errorf("the cause should be logged")
		}
	})
	t.Run("unhealthy when Ping hangs", func(t *testing.T) {
		e := newEnv(t, Config{HealthTimeout: 50 * time.Millisecond})
		e.store.pingWait = 500 * time.Millisecond // the fake ignores ctx, as a wedged driver might
		start := time.Now()
		r := e.do(t, "GET", base+"/health", "")
		if d := time.Since(start); d > 400*time.Millisecond {
			t.Errorf("health waited %v", d)
		}
		if r.status != http.StatusServiceUnavailable || r.json(t)["checks"].(map[string]any)["database"] != "error: timeout" {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
}

// TestHealthReportsTheVectorIndex: /health shows the vector index's state; an unreachable Qdrant degrades the
// daemon (search falls back to lexical ranking) without making it unhealthy.
func TestHealthReportsTheVectorIndex(t *testing.T) {
	cases := []struct {
		name       string
		health     func(context.Context) (string, error)
		wantCheck  string
		wantStatus string
		wantIssue  bool
	}{
		{"not configured", nil, "not_configured", "healthy", false},
		{"in process", func(context.Context) (string, error) { return "in_process", nil }, "in_process", "healthy", false},
		{"qdrant answers", func(context.Context) (string, error) { return "ok", nil }, "ok", "healthy", false},
		{"qdrant down", func(context.Context) (string, error) { return "", errors.New("dial tcp 10.0.0.9:6334: refused") }, "error: unavailable", "degraded", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.app = New(Deps{Store: e.store, Control: e.control, VectorHealth: c.health})
			r := e.do(t, "GET", base+"/health", "")
			m := r.json(t)
			if r.status != 200 || m["status"] != c.wantStatus || m["checks"].(map[string]any)["qdrant"] != c.wantCheck {
				t.Fatalf("health %d %s", r.status, r.body)
			}
			if strings.Contains(string(r.body), "10.0.0.9") {
				t.Fatalf("health leaks the connection error: %s", r.body)
			}
			if _, has := m["issues"]; has != c.wantIssue {
				t.Fatalf("issues present=%v, want %v: %s", has, c.wantIssue, r.body)
			}
		})
	}
}
