package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
)

const (
	auditAdminToken  = "admin-secret-token-0001"
	auditClientToken = "client-secret-token-0001"
)

// authDo sends one request with a bearer token.
func (e *env) authDo(t *testing.T, token, method, path, body string) response {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.app.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: b}
}

// TestAuditWithRealActors: on the real actor system and store, every admin operation through the REST API adds its
// audit record (event, server id and name, the token's name, the client IP, a timestamp, small details without
// connection_config); GET /audit pages them newest first, for admins only.
func TestAuditWithRealActors(t *testing.T) {
	ctx := context.Background()
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+auditAdminToken, "ci:"+auditClientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	url := goBackend(t)

	r := e.authDo(t, auditAdminToken, "POST", base+"/servers",
		`{"name":"go","transport_type":"HTTP","connection_config":{"base_url":"`+url+`","headers":{"X-Key":"s3cr3t"}}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if callable(sys, "go.echo") { // CONNECTED, with its tools
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("go.echo never routable")
		}
		time.Sleep(30 * time.Millisecond)
	}
	steps := []struct {
		method, path, body string
		status             int
	}{
		{"POST", base + "/servers/" + id + "/tools/refresh", "", http.StatusAccepted},
		{"PATCH", base + "/servers/" + id, `{"name":"go2","description":"renamed"}`, http.StatusOK},
		{"POST", base + "/servers/" + id + "/disconnect", `{"force":true}`, http.StatusOK},
		{"POST", base + "/servers/" + id + "/connect", "", http.StatusOK},
		{"DELETE", base + "/servers/" + id, "", http.StatusNoContent},
	}
	want := []string{audit.ServerRegistered}
	events := map[string]string{"refresh": audit.ToolsRefreshed, "PATCH": audit.ServerUpdated,
		"disconnect": audit.ServerDisconnected, "connect": audit.ServerConnected, "DELETE": audit.ServerRemoved}
	for _, s := range steps {
		// A client token may not do any of it, and leaves no record.
		if r := e.authDo(t, auditClientToken, s.method, s.path, s.body); r.status != http.StatusForbidden {
			t.Fatalf("client %s %s: %d", s.method, s.path, r.status)
		}
		if r := e.authDo(t, auditAdminToken, s.method, s.path, s.body); r.status != s.status {
			t.Fatalf("%s %s: %d %s", s.method, s.path, r.status, r.body)
		}
		key := s.method
		if i := strings.LastIndex(s.path, "/"); s.method == "POST" {
			key = s.path[i+1:]
		}
		want = append(want, events[key])
		// Each operation added exactly its record.
		recs, total, err := st.ListAudit(ctx, 1, 0)
		if err != nil || total != len(want) || recs[0].Event != events[key] {
			t.Fatalf("after %s %s: total %d %v %+v", s.method, s.path, total, err, recs)
		}
	}

	r = e.authDo(t, auditAdminToken, "GET", base+"/audit", "")
	if r.status != http.StatusOK {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	body := r.json(t)
	recs := body["records"].([]any)
	if body["total"] != float64(len(want)) || len(recs) != len(want) || body["limit"] != float64(100) || body["offset"] != float64(0) {
		t.Fatalf("audit: %s", r.body)
	}
	for i, raw := range recs {
		rec := raw.(map[string]any)
		if rec["event"] != want[len(want)-1-i] || rec["server_id"] != id || rec["actor"] != "ops" || rec["ip_address"] != "0.0.0.0" {
			t.Errorf("record %d: %v, want %s", i, rec, want[len(want)-1-i])
		}
		wantTime(t, rec["timestamp"])
		if name := rec["server_name"]; name != "go" && name != "go2" {
			t.Errorf("record %d: server_name %v", i, name)
		}
		if d, ok := rec["details"].(map[string]any); !ok || d["via"] != "rest" {
			t.Errorf("record %d: details %v", i, rec["details"])
		}
	}
	if strings.Contains(string(r.body), "s3cr3t") || strings.Contains(string(r.body), url) {
		t.Fatalf("audit leaks connection_config: %s", r.body)
	}

	// Paging, newest first.
	for _, p := range []struct{ limit, offset int }{{2, 0}, {2, 2}, {2, 4}, {5, 5}, {1, 10}} {
		r := e.authDo(t, auditAdminToken, "GET", fmt.Sprintf("%s/audit?limit=%d&offset=%d", base, p.limit, p.offset), "")
		page := r.json(t)
		got := page["records"].([]any)
		exp := max(0, min(p.limit, len(want)-p.offset))
		if len(got) != exp || page["total"] != float64(len(want)) {
			t.Fatalf("page %+v: %s", p, r.body)
		}
		for i, raw := range got {
			if ev := raw.(map[string]any)["event"]; ev != want[len(want)-1-p.offset-i] {
				t.Fatalf("page %+v item %d: %v", p, i, ev)
			}
		}
	}
	if r := e.authDo(t, auditClientToken, "GET", base+"/audit", ""); r.status != http.StatusForbidden {
		t.Fatalf("client reading the audit log: %d", r.status)
	}
}
