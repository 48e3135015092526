package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// TestScrubbedProxyErrors: what a caller's proxy session answers never holds the caller's secret: a backend's
// JSON-RPC error keeps its code (and its data when still JSON), a closed or unconnected session keeps its sentinel,
// and an error without the secret is the very same error.
func TestScrubbedProxyErrors(t *testing.T) {
	const secret = "sk-live-5678"
	scrub := callerSecrets(&persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}, secret).Scrub
	plain := errors.New("nothing secret here")
	tests := []struct {
		name     string
		err      error
		sentinel error
		code     int64
		same     bool
	}{
		{"backend's JSON-RPC error", &jsonrpc.Error{Code: -32001, Message: "bad key " + secret, Data: json.RawMessage(`{"key":"` + secret + `"}`)}, nil, -32001, false},
		{"session closed", fmt.Errorf("%w: backend said Bearer %s", ErrProxyClosed, secret), ErrProxyClosed, 0, false},
		{"session could not connect", fmt.Errorf("%w: 401 for %s", ErrProxyConnect, secret), ErrProxyConnect, 0, false},
		{"other", fmt.Errorf("wrapped: %s", secret), nil, 0, false},
		{"no secret", plain, nil, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scrubbed(tc.err, scrub)
			if tc.same {
				if got != tc.err {
					t.Fatalf("an error without the secret was replaced: %v", got)
				}
				return
			}
			if strings.Contains(got.Error(), secret) {
				t.Fatalf("secret left in %q", got)
			}
			if tc.sentinel != nil && !errors.Is(got, tc.sentinel) {
				t.Fatalf("%v lost %v", got, tc.sentinel)
			}
			if tc.code != 0 {
				var je *jsonrpc.Error
				if !errors.As(got, &je) || je.Code != tc.code || strings.Contains(string(je.Data), secret) || !json.Valid(je.Data) {
					t.Fatalf("JSON-RPC error became %#v", got)
				}
			}
		})
	}
	if scrubbed(plain, nil) != plain || scrubbed(nil, scrub) != nil {
		t.Fatal("nothing to scrub changed the error")
	}
}

// TestScrubToolError: a tool error result of a caller's session has the caller's token removed from its texts and
// its structured content; a successful result, and a session without secrets of its own, pass as they came.
func TestScrubToolError(t *testing.T) {
	scrub := func(s string) string { return strings.ReplaceAll(s, "tok-123", "***") }
	tests := []struct {
		name  string
		res   *mcp.CallToolResult
		scrub func(string) string
		want  string
	}{
		{"tool error text and structured", &mcp.CallToolResult{IsError: true,
			Content: []mcp.Content{&mcp.TextContent{Text: "sent Bearer tok-123"}}, StructuredContent: map[string]any{"h": "Bearer tok-123"}},
			scrub, `{"content":[{"type":"text","text":"sent Bearer ***"}],"structuredContent":{"h":"Bearer ***"},"isError":true}`},
		{"success passes", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "tok-123"}}},
			scrub, `{"content":[{"type":"text","text":"tok-123"}]}`},
		{"no secrets of its own", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "tok-123"}}},
			nil, `{"content":[{"type":"text","text":"tok-123"}],"isError":true}`},
		{"nil result", nil, scrub, `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scrubToolError(tc.res, tc.scrub)
			b, err := json.Marshal(tc.res)
			if err != nil || string(b) != tc.want {
				t.Fatalf("got %s (%v), want %s", b, err, tc.want)
			}
		})
	}
}
