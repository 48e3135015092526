package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestSearchThroughREST: POST /api/v1/search on the real daemon. An empty catalogue answers 200 with no tools for
// either strategy; bad input answers 422 with every faulty field listed; once a server is connected, the default
// strategy (hierarchical) answers with the contract's fields and each tool's alias.
func TestSearchThroughREST(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Config: actors.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	e := &env{app: api.New(api.Deps{Store: st, Control: sys})}

	for _, body := range []string{`{"query":"send an email"}`, `{"query":"send an email","strategy":"direct"}`,
		`{"query":"send an email","item_type":"skill"}`} {
		r := e.do(t, "POST", "/api/v1/search", body)
		if r.status != http.StatusOK {
			t.Fatalf("%s on an empty catalogue: %d %s", body, r.status, r.body)
		}
		m := r.json(t)
		if tools, ok := m["tools"].([]any); !ok || len(tools) != 0 {
			t.Errorf("%s on an empty catalogue: tools %v, want []", body, m["tools"])
		}
		md := m["metadata"].(map[string]any)
		if md["servers_searched"] != 0.0 || md["total_tools_searched"] != 0.0 {
			t.Errorf("%s on an empty catalogue: metadata %v", body, md)
		}
	}

	tests := []struct {
		body string
		want [][]any // loc of every field error expected
	}{
		{`{"query":"","limit":0,"strategy":"magic","extra":1}`,
			[][]any{{"body", "extra"}, {"body", "query"}, {"body", "strategy"}, {"body", "limit"}}},
		{`{"limit":"5","tool_threshold":2}`, [][]any{{"body", "query"}, {"body", "limit"}, {"body", "tool_threshold"}}},
		{`{"query":"x","item_type":"prompt","server_filter":"github"}`, [][]any{{"body", "item_type"}, {"body", "server_filter"}}},
	}
	for _, tc := range tests {
		m := wantError(t, e.do(t, "POST", "/api/v1/search", tc.body), http.StatusUnprocessableEntity, apierror.CodeValidation)
		detail, _ := m["detail"].([]any)
		var locs []string
		for _, d := range detail {
			fe := d.(map[string]any)
			if fe["msg"] == "" || fe["type"] == "" {
				t.Errorf("%s: field error without msg or type: %v", tc.body, fe)
			}
			b, _ := json.Marshal(fe["loc"])
			locs = append(locs, string(b))
		}
		for _, w := range tc.want {
			b, _ := json.Marshal(w)
			if !slices.Contains(locs, string(b)) {
				t.Errorf("%s: detail %v lacks %s", tc.body, locs, b)
			}
		}
		if len(locs) != len(tc.want) {
			t.Errorf("%s: %d field errors %v, want %d", tc.body, len(locs), locs, len(tc.want))
		}
	}

	raw, _ := json.Marshal(map[string]string{"base_url": goBackend(t)})
	if _, err := sys.Register(ctx, actors.RegisterRequest{Name: "gob", TransportType: persistence.TransportHTTP,
		ConnectionConfig: raw, AutoConnect: true}); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(30 * time.Millisecond) {
		r := e.do(t, "POST", "/api/v1/search", `{"query":"echo","tool_threshold":0}`)
		if r.status != http.StatusOK {
			t.Fatalf("search: %d %s", r.status, r.body)
		}
		m = r.json(t)
		if tools := m["tools"].([]any); len(tools) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 4 tools of gob never all found: %s", r.body)
		}
	}
	first := m["tools"].([]any)[0].(map[string]any)
	if first["name"] != "gob.echo" || first["alias"] != "gob__echo" || first["original_name"] != "echo" {
		t.Errorf("first hit %v, want gob.echo with alias gob__echo", first)
	}
	for _, hit := range m["tools"].([]any) {
		h := hit.(map[string]any)
		if h["alias"] != fmt.Sprintf("gob__%s", h["original_name"]) {
			t.Errorf("hit %v: alias %v", h["name"], h["alias"])
		}
	}
	md := m["metadata"].(map[string]any)
	if md["strategy_used"] != actors.StrategyHierarchical {
		t.Errorf("default strategy_used %v", md["strategy_used"])
	}
	if _, ok := md["fallback"].(bool); !ok {
		t.Errorf("metadata.fallback %v is not a boolean", md["fallback"])
	}
	if _, ok := m["matched_skills"].([]any); !ok {
		t.Errorf("matched_skills %v is not a list", m["matched_skills"])
	}
}
