package mcpserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPerUserOAuthRefreshIsScrubbed: on /mcp, a caller who authorized a per_user OAuth backend (authorization code,
// refresh token; oidc-provider with 6 s access tokens) keeps one client session while the token their backend
// session holds expires and is refreshed inside it. A hostile backend echoes the Authorization header it was sent
// into a JSON-RPC error and into a tool error result: neither the first token nor the refreshed one (nor the
// refresh token) reaches the client, and none is in any log line (actors, endpoint, flows, at debug).
func TestPerUserOAuthRefreshIsScrubbed(t *testing.T) {
	ctx := context.Background()
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, sys := encryptedSystemLogged(t, logger)
	toks, err := auth.Parse("", "ci:"+clientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true, Logger: logger})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	ln, resource := oauthtest.Listen(t)
	redirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	oauthtest.HostileBackend(t, ln, resource, oauthtest.StartAS(t, resource, redirect, "ACCESS_TTL=6"))
	raw, _ := json.Marshal(map[string]any{"base_url": resource, "headers": map[string]any{"Authorization": "Bearer svc-token"}})
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "ho", TransportType: persistence.TransportHTTP, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser,
		UserCredential: &persistence.UserCredentialSlot{OAuth: &persistence.OAuthSlot{}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ho's tools routable", func() bool { return len(sys.Routes().Callable()) >= 3 })
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: redirect,
		EndSession: sys.EndUserSession, Logger: logger})
	started, err := flows.Start(ctx, srv, "token:ci")
	if err != nil {
		t.Fatal(err)
	}
	cb := oauthtest.Browse(t, started.AuthorizationURL+"&login_hint=alice", redirect)
	q := cb.Query()
	if err := flows.Callback(ctx, q.Get("state"), q.Get("code"), q.Get("iss"), q.Get("error"), q.Get("error_description")); err != nil {
		t.Fatal(err)
	}
	if _, err := flows.Complete(ctx, "token:ci", q.Get("state")); err != nil {
		t.Fatal(err)
	}
	grant := func() backendauth.Grant {
		s, err := st.GetUserSecret(ctx, srv.ID, "token:ci")
		if err != nil {
			t.Fatal(err)
		}
		g, err := backendauth.DecodeGrant(s.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first := grant().Token
	if first.RefreshToken == "" {
		t.Fatal("the grant has no refresh token: this test needs one")
	}

	c := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{clientToken}}})
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// echo calls both hostile tools and returns what the client got of each.
	echo := func(t *testing.T) []string {
		t.Helper()
		var outs []string
		for _, tool := range []string{"ho__echo_auth", "ho__echo_auth_result"} {
			res, err := c.sess.CallTool(rctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
			b, _ := json.Marshal(res)
			out := string(b)
			if err != nil {
				out = err.Error()
			}
			if !strings.Contains(out, "you sent Authorization: Bearer ***") {
				t.Fatalf("%s: want the backend's error with the token scrubbed: %s", tool, out)
			}
			outs = append(outs, out)
		}
		return outs
	}
	leaked := func(outs []string, tokens ...string) bool {
		for _, o := range append(outs, logs.String()) {
			for _, tok := range tokens {
				if tok != "" && strings.Contains(o, tok) {
					return true
				}
			}
		}
		return false
	}
	if outs := echo(t); leaked(outs, first.AccessToken, first.RefreshToken) {
		t.Fatalf("the first token reached the client or the log: %q", outs)
	}
	// The token expires: the next request on the same session's backend session refreshes it before it is sent,
	// and the backend echoes the refreshed one.
	time.Sleep(time.Until(first.Expiry) + 500*time.Millisecond)
	outs := echo(t)
	renewed := grant().Token
	if renewed.AccessToken == first.AccessToken {
		t.Fatal("the session did not refresh its token")
	}
	if leaked(outs, renewed.AccessToken, renewed.RefreshToken, first.AccessToken, first.RefreshToken) {
		t.Fatalf("a token reached the client or the log after the refresh: %q", outs)
	}
}
