package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// TestWithCallerSecret: the caller's secret goes, as a reference only the session resolves, exactly where the
// registration says: the header (prefix first, replacing the registration's header of that name in any case) or the
// environment variable; a slot that does not fit the transport is refused.
func TestWithCallerSecret(t *testing.T) {
	ref := "${" + callerSecretVar + "}"
	tests := []struct {
		name      string
		transport string
		config    string
		slot      *persistence.UserCredentialSlot
		want      string // the config after injection, "" for an error
	}{
		{"header with prefix", persistence.TransportHTTP, `{"base_url":"https://h/mcp"}`,
			&persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "},
			`{"base_url":"https://h/mcp","headers":{"Authorization":"Bearer ` + ref + `"}}`},
		{"replaces the registration's header in any case", persistence.TransportSSE,
			`{"url":"https://h/sse","headers":{"authorization":"Bearer admin","X-Other":"kept"}}`,
			&persistence.UserCredentialSlot{Header: "Authorization"},
			`{"headers":{"Authorization":"` + ref + `","X-Other":"kept"},"url":"https://h/sse"}`},
		{"env", persistence.TransportSTDIO, `{"command":"x","env":{"OTHER":"1","API_KEY":"admin"}}`,
			&persistence.UserCredentialSlot{Env: "API_KEY"},
			`{"command":"x","env":{"API_KEY":"` + ref + `","OTHER":"1"}}`},
		{"env on HTTP", persistence.TransportHTTP, `{"base_url":"https://h"}`, &persistence.UserCredentialSlot{Env: "K"}, ""},
		{"header on STDIO", persistence.TransportSTDIO, `{"command":"x"}`, &persistence.UserCredentialSlot{Header: "A"}, ""},
		{"no slot", persistence.TransportHTTP, `{"base_url":"https://h"}`, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := persistence.Server{TransportType: tc.transport, ConnectionConfig: json.RawMessage(tc.config), UserCredential: tc.slot}
			got, err := withCallerSecret(rec)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("injected into %s", got.ConnectionConfig)
				}
				return
			}
			if err != nil || string(got.ConnectionConfig) != tc.want {
				t.Fatalf("got %s (%v), want %s", got.ConnectionConfig, err, tc.want)
			}
			if string(rec.ConnectionConfig) != tc.config {
				t.Fatalf("the registration's config was changed: %s", rec.ConnectionConfig)
			}
		})
	}
}

// TestCallerSecretsScrub: the caller's secret, alone or as injected, is scrubbed from error texts.
func TestCallerSecretsScrub(t *testing.T) {
	s := callerSecrets(&persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}, "sk-live-1234")
	out := s.Scrub(`backend said: invalid token "sk-live-1234" (header Bearer sk-live-1234)`)
	if strings.Contains(out, "sk-live-1234") {
		t.Fatalf("secret left in %q", out)
	}
}
