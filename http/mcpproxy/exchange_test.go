package mcpproxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestProxyExchangedTokenExpiresMidSession: a per_user server whose callers' backend tokens come by token exchange
// (RFC 8693: no refresh token), with access tokens of a few seconds (oidc-provider's ACCESS_TTL), on
// /mcp/servers/{name}. When the exchanged token expires in the middle of a client's session, the session is not
// lost and the next call on it succeeds: the caller's token is exchanged again before anything is sent with the
// stale one, and the backend runs each call exactly once. With keep-alive pings (the default), the ping that meets
// the stale token renews it (a ping that cannot be sent would close the upstream session); without them, the call
// does. A caller without a grant, or whose grant expired, is exchanged for at initialize, as /mcp exchanges for a
// call.
func TestProxyExchangedTokenExpiresMidSession(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration
	}{
		{"keep-alive pings", time.Second},
		{"no keep-alive", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := startExchangeRig(t, tc.keepAlive)

			t.Run("expires mid-session", func(t *testing.T) {
				orgToken := peertest.OIDCClientToken(t, x.org, x.aggResource, "client-bot", "aggregator:client")
				// The caller's first grant, as a call on /mcp gets it.
				if err := x.flows.Exchange(t.Context(), x.srv, "oauth:client-bot", orgToken); err != nil {
					t.Fatal(err)
				}
				if g := x.grantOf(t, "oauth:client-bot"); g.Token.RefreshToken != "" || time.Until(g.Token.Expiry) > x.ttl {
					t.Fatalf("want an exchanged grant without a refresh token expiring within %s; expiry in %s", x.ttl, time.Until(g.Token.Expiry))
				}
				cs, err := connectAs(t, x.url, orgToken)
				if err != nil {
					t.Fatal(err)
				}
				before := x.exchanges(t)
				ran := x.calls.Load()
				want := func(t *testing.T) {
					t.Helper()
					ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
					defer cancel()
					got, err := whoami(ctx, cs)
					if err != nil || got != "user=client-bot" {
						t.Fatalf("whoami on the same session: %q, %v; want user=client-bot", got, err)
					}
					ran++
					if n := x.calls.Load(); n != ran {
						t.Fatalf("the backend ran whoami %d times, want %d: each call exactly once", n, ran)
					}
				}
				want(t)
				for i := range 2 {
					time.Sleep(time.Until(x.grantOf(t, "oauth:client-bot").Token.Expiry) + 500*time.Millisecond)
					want(t)
					if n := x.exchanges(t) - before; n != i+1 {
						t.Fatalf("%d exchanges after %d expiries, want %d", n, i+1, i+1)
					}
				}
				// A new session whose caller's grant expired meanwhile is exchanged for at initialize.
				_ = cs.Close()
				time.Sleep(time.Until(x.grantOf(t, "oauth:client-bot").Token.Expiry) + 500*time.Millisecond)
				before = x.exchanges(t)
				if cs, err = connectAs(t, x.url, orgToken); err != nil {
					t.Fatalf("a new session after the grant expired: %v", err)
				}
				want(t)
				if n := x.exchanges(t) - before; n != 1 {
					t.Fatalf("%d exchanges for a new session on an expired grant, want 1", n)
				}
			})

			t.Run("no grant yet", func(t *testing.T) {
				orgToken := peertest.OIDCClientToken(t, x.org, x.aggResource, "group-bot", "aggregator:client")
				before, ran := x.exchanges(t), x.calls.Load()
				cs, err := connectAs(t, x.url, orgToken)
				if err != nil {
					t.Fatalf("a caller without a grant, whose token can be exchanged: %v", err)
				}
				if got, err := whoami(t.Context(), cs); err != nil || got != "user=group-bot" {
					t.Fatalf("whoami: %q, %v; want user=group-bot", got, err)
				}
				if n := x.exchanges(t) - before; n != 1 {
					t.Fatalf("%d exchanges, want 1", n)
				}
				if n := x.calls.Load() - ran; n != 1 {
					t.Fatalf("the backend ran whoami %d times for one call", n)
				}
			})
		})
	}
}

// exchangeRig is the daemon's wiring of token exchange around the per-server endpoint: the organisation's issuer
// (oidc-provider) authenticating callers, an OAuth-protected go-sdk backend whose authorization server (oidc-provider,
// ACCESS_TTL=6) exchanges the organisation's tokens, and one exchanger, the gateway's, for /mcp and the proxy.
type exchangeRig struct {
	org, aggResource, issuer, url string
	redirect                      string // the authorization server's redirect to the daemon's callback
	ttl                           time.Duration
	srv                           persistence.Server
	flows                         *backendauth.Flows
	calls                         interface{ Load() int64 }
	store                         persistence.Store
	sys                           *actors.System
}

func startExchangeRig(t *testing.T, keepAlive time.Duration) *exchangeRig {
	t.Helper()
	return startExchangeRigLogged(t, keepAlive, nil)
}

// exchangeConsole is the console's address the rig's proxy sends a caller to.
const exchangeConsole = "https://agg.example/ui/"

// exchangeStatic is the static client token (subject token:ci) the rig also takes: a caller with no OAuth token of
// the organisation to exchange.
const exchangeStatic = "ci-static-client-token"

// startExchangeRigLogged is startExchangeRig whose every log line also goes to logs (nil: none).
func startExchangeRigLogged(t *testing.T, keepAlive time.Duration, logs io.Writer) *exchangeRig {
	t.Helper()
	r := newRigLogged(t, mcpproxy.Options{}, func(c *actors.Config) { c.KeepAlive = keepAlive }, logs)
	x := &exchangeRig{aggResource: "http://aggregator.example/mcp", ttl: 6 * time.Second, store: r.store, sys: r.sys}
	x.org = peertest.StartOIDCScript(t, "oidc-provider.mjs", "RESOURCE="+x.aggResource)
	v, err := oauth.New(t.Context(), oauth.Config{Issuer: x.org, Audience: x.aggResource, Resource: x.aggResource,
		ClientScope: "aggregator:client", AdminScope: "aggregator:admin"})
	if err != nil {
		t.Fatal(err)
	}
	ln, resource := oauthtest.Listen(t)
	redirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	x.redirect = redirect
	x.issuer = oauthtest.StartAS(t, resource, redirect, "ORG_ISSUER="+x.org, "ACCESS_TTL=6")
	x.calls = oauthtest.HostileBackend(t, ln, resource, x.issuer)

	x.flows = backendauth.NewFlows(backendauth.FlowsConfig{Store: r.store, Outbound: r.sys.Outbound(), RedirectURL: redirect,
		EndSession: r.sys.EndUserSession, Logger: r.log})
	gw := gateway.New(r.sys, gateway.Options{ExchangeCredential: x.flows.CallExchanger(r.store.GetServer)})
	proxy := mcpproxy.New(r.sys, mcpproxy.Options{Gateway: gw, Logger: r.log, ConsoleURL: exchangeConsole})
	t.Cleanup(proxy.Close)
	toks, err := auth.Parse("", "ci:"+exchangeStatic, "")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mcpproxy.Prefix, proxy)
	hs := httptest.NewServer(auth.Middleware(toks.WithOAuth(v), auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	cfg, _ := json.Marshal(map[string]any{"base_url": resource, "headers": map[string]string{"Authorization": "Bearer svc-token"}})
	x.srv, err = r.sys.Register(t.Context(), actors.RegisterRequest{Name: "xo", TransportType: persistence.TransportHTTP,
		ConnectionConfig: cfg, AutoConnect: true, CredentialMode: persistence.CredentialPerUser,
		UserCredential: &persistence.UserCredentialSlot{OAuth: &persistence.OAuthSlot{TokenExchange: true}}})
	if err != nil {
		t.Fatal(err)
	}
	r.waitStatus(x.srv.ID, persistence.StatusConnected, 30*time.Second)
	x.url = hs.URL + mcpproxy.Prefix + "xo"
	return x
}

// grantOf is subject's stored grant of the server.
func (x *exchangeRig) grantOf(t *testing.T, subject string) backendauth.Grant {
	t.Helper()
	s, err := x.store.GetUserSecret(t.Context(), x.srv.ID, subject)
	if err != nil {
		t.Fatalf("grant of %s: %v", subject, err)
	}
	g, err := backendauth.DecodeGrant(s.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// exchanges is how many token exchanges the backend's authorization server answered.
func (x *exchangeRig) exchanges(t *testing.T) int {
	t.Helper()
	return oauthtest.ASCounts(t, x.issuer).Exchanges
}
