package backendauth

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/persistence"
)

// TestRevoke: removing a grant revokes its refresh token, then its access token, at the revocation endpoint (RFC
// 7009), authenticating as the grant's client (client_id in the body for a public client, HTTP Basic for a client
// with a secret); a refusal is logged without any token; a grant without a revocation endpoint, and a secret that
// is not a grant, send nothing.
func TestRevoke(t *testing.T) {
	type seen struct {
		token, hint, clientID, basicUser string
	}
	for _, tc := range []struct {
		name      string
		secret    string
		style     oauth2.AuthStyle
		status    int
		noURL     bool
		raw       string
		wantCalls int
		wantBasic bool
		wantWarn  bool
	}{
		{name: "public client", status: http.StatusOK, wantCalls: 2},
		{name: "client secret in the header", secret: "s3cret", style: oauth2.AuthStyleInHeader, status: http.StatusOK, wantCalls: 2, wantBasic: true},
		{name: "client secret in the body", secret: "s3cret", style: oauth2.AuthStyleInParams, status: http.StatusOK, wantCalls: 2},
		{name: "refused", status: http.StatusServiceUnavailable, wantCalls: 2, wantWarn: true},
		{name: "no revocation endpoint", status: http.StatusOK, noURL: true},
		{name: "not a grant", status: http.StatusOK, raw: "typed-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []seen
			as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				user, _, _ := r.BasicAuth()
				mu.Lock()
				calls = append(calls, seen{r.PostForm.Get("token"), r.PostForm.Get("token_type_hint"), r.PostForm.Get("client_id"), user})
				mu.Unlock()
				w.WriteHeader(tc.status)
			}))
			defer as.Close()
			var logs bytes.Buffer
			f := NewFlows(FlowsConfig{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			g := Grant{Token: &oauth2.Token{AccessToken: "access-tok-1", RefreshToken: "refresh-tok-1"}, ClientID: "cid",
				ClientSecret: tc.secret, AuthStyle: tc.style, TokenURL: as.URL + "/token", RevocationURL: as.URL + "/revoke"}
			if tc.noURL {
				g.RevocationURL = ""
			}
			raw, err := g.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != "" {
				raw = []byte(tc.raw)
			}
			cfg, _ := json.Marshal(map[string]any{"base_url": as.URL + "/mcp"})
			f.Revoke(t.Context(), persistence.Server{ID: "sid", ConnectionConfig: cfg}, raw)
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != tc.wantCalls {
				t.Fatalf("%d revocation requests, want %d", len(calls), tc.wantCalls)
			}
			for i, want := range []struct{ token, hint string }{{"refresh-tok-1", "refresh_token"}, {"access-tok-1", "access_token"}}[:len(calls)] {
				c := calls[i]
				if c.token != want.token || c.hint != want.hint {
					t.Errorf("request %d revoked %q (%s), want %q (%s)", i, c.token, c.hint, want.token, want.hint)
				}
				if tc.wantBasic != (c.basicUser == "cid") || tc.wantBasic == (c.clientID == "cid") {
					t.Errorf("request %d authenticated as basic %q, body client_id %q", i, c.basicUser, c.clientID)
				}
			}
			if strings.Contains(logs.String(), "tok-1") || strings.Contains(logs.String(), "s3cret") {
				t.Fatalf("a token or secret is in the log:\n%s", logs.String())
			}
			if got := strings.Contains(logs.String(), "could not revoke"); got != tc.wantWarn {
				t.Fatalf("warned %v, want %v:\n%s", got, tc.wantWarn, logs.String())
			}
		})
	}
}
