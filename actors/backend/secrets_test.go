package backend

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func TestScrub(t *testing.T) {
	env := map[string]string{"TOK": "tok-aaaa1111", "PW": "p@ss w0rd!"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	health := "https://mon:health-gggg7777@h.example/health"
	cfg := map[string]any{
		"base_url": "https://user:${PW}@h.example/mcp?api_key=query-eeee5555&page=2",
		"headers": map[string]string{"Authorization": "Bearer ${TOK}", "X-API-Key": "key-bbbb2222",
			"Proxy-Authorization": "Basic dXNlcjpiYXNpYy1oaGhoODg4OA==", "Accept": "application/json"},
		"env":  map[string]string{"SECRET_ENV": "env-cccc3333", "SHORT": "abc"},
		"args": []string{"--token", "arg-ffff6666", "--port", "8080"},
	}
	raw, _ := json.Marshal(cfg)
	s := NewSecrets(persistence.Server{ConnectionConfig: raw, HealthCheckURL: &health}, lookup)

	planted := []string{"tok-aaaa1111", "p@ss w0rd!", "key-bbbb2222", "env-cccc3333", "query-eeee5555", "arg-ffff6666",
		"health-gggg7777", "basic-hhhh8888", "dXNlcjpiYXNpYy1oaGhoODg4OA=="}
	tests := []struct {
		name, text string
		keep       []string // must survive
	}{
		{"url error with escaped password", `Post "https://user:p%40ss%20w0rd%21@h.example/mcp?api_key=query-eeee5555&page=2": dial tcp: refused`, []string{"h.example/mcp", "page=2"}},
		{"go-quoted", "header " + strconv.Quote("Bearer tok-aaaa1111") + " rejected", []string{"Bearer", "rejected"}},
		{"echoed headers", "401: X-API-Key key-bbbb2222 unknown; Authorization: Basic dXNlcjpiYXNpYy1oaGhoODg4OA==", []string{"401", "unknown"}},
		{"decoded basic password", "user user with password basic-hhhh8888 refused", []string{"refused"}},
		{"stderr tail", "exit status 3; stderr: token env-cccc3333 | flag arg-ffff6666", []string{"exit status 3", "stderr"}},
		{"health", `health check request failed: Get "https://mon:***@h.example/health": health-gggg7777`, []string{"h.example/health"}},
		{"json escaped", `{"pw":"p@ss w0rd!"}`, []string{`{"pw":"`}},
		{"short values and plain words stay", "abc 8080 application/json", []string{"abc", "8080", "application/json"}},
		{"foreign userinfo", "see https://someone:else@other.example/x", []string{"other.example/x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Scrub(tc.text)
			for _, sec := range planted {
				if strings.Contains(got, sec) {
					t.Errorf("scrub left %q in %q", sec, got)
				}
			}
			if strings.Contains(got, "someone:else") || strings.Contains(got, "p%40ss") {
				t.Errorf("scrub left URL userinfo in %q", got)
			}
			for _, k := range tc.keep {
				if !strings.Contains(got, k) {
					t.Errorf("scrub removed %q from %q: %q", k, tc.text, got)
				}
			}
		})
	}
	var none *Secrets
	if got := none.Scrub("Get https://a:b@h/x"); got != "Get https://***@h/x" {
		t.Errorf("nil secrets: %q", got)
	}
}

// TestDialTLSRule: a URL resolved at connect time follows the registration's TLS rule.
func TestDialTLSRule(t *testing.T) {
	env := map[string]string{"REMOTE": "http://user:pw-zzzz@h.example/mcp", "LOCAL": "http://127.0.0.1:1/mcp"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		transport, cfg string
		ok             bool
	}{
		{persistence.TransportHTTP, `{"base_url":"${REMOTE}"}`, false},
		{persistence.TransportSSE, `{"url":"${REMOTE}"}`, false},
		{persistence.TransportHTTP, `{"base_url":"${REMOTE}","allow_insecure_http":true}`, true},
		{persistence.TransportHTTP, `{"base_url":"${LOCAL}"}`, true},
		{persistence.TransportHTTP, `{"base_url":"https://h.example/mcp"}`, true},
	}
	for _, tc := range tests {
		b, err := Dial(persistence.Server{TransportType: tc.transport, ConnectionConfig: json.RawMessage(tc.cfg)}, Options{Env: lookup})
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: err %v, want ok=%v", tc.transport, tc.cfg, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "plain http") || strings.Contains(err.Error(), "pw-zzzz")) {
			t.Errorf("error should explain the rule without the URL: %v", err)
		}
		b.closeIdle()
	}
}
