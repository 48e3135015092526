package integration_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// shortTTL is the access tokens' lifetime at the authorization server of TestBackendOAuthTokenExpiresMidSession.
const shortTTL = 6 * time.Second

// TestBackendOAuthTokenExpiresMidSession: access tokens of a few seconds (oidc-provider's ACCESS_TTL) expire while
// the caller's own session of the backend runs. A grant with a refresh token is refreshed before its token expires,
// on the same session, and not on every request; an exchanged token (RFC 8693, no refresh token) that can no longer
// be presented is exchanged again and the call, which never reached the backend, runs once more: no call fails.
func TestBackendOAuthTokenExpiresMidSession(t *testing.T) {
	x := startExchange(t, api.Config{ConsoleURL: "http://console.example/ui/"}, "ACCESS_TTL=6")
	e, st, sys, org, issuer, redirect := x.e, x.st, x.sys, x.org, x.issuer, x.redirect
	obID := x.register(t, "ob", `{"oauth":{}}`)
	xoID := x.register(t, "xo", `{"oauth":{"token_exchange":true}}`)
	waitFor(t, "ob.whoami and xo.whoami routable", func() bool { return callable(sys, "ob.whoami") && callable(sys, "xo.whoami") })
	wantUser := func(t *testing.T, token, tool, user string) {
		t.Helper()
		r := e.authDo(t, token, "POST", "/api/v1/tools/call", `{"name":"`+tool+`","arguments":{}}`)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `user=`+user+`"`) {
			t.Fatalf("%s: %d %s; want user=%s", tool, r.status, r.body, user)
		}
	}
	grantOf := func(t *testing.T, id, subject string) backendauth.Grant {
		t.Helper()
		s, err := st.GetUserSecret(t.Context(), id, subject)
		if err != nil {
			t.Fatalf("grant of %s: %v", subject, err)
		}
		g, err := backendauth.DecodeGrant(s.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	t.Run("refresh token", func(t *testing.T) {
		r := e.authDo(t, credAliceToken, "POST", base+"/servers/"+obID+"/credentials/me/oauth", "")
		if r.status != http.StatusOK {
			t.Fatalf("start: %d %s", r.status, r.body)
		}
		cb := oauthtest.Browse(t, r.json(t)["authorization_url"].(string)+"&login_hint=alice", redirect)
		res, err := e.app.Test(httptest.NewRequest("GET", backendauth.CallbackPath+"?"+cb.RawQuery, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if r := e.authDo(t, credAliceToken, "POST", base+"/oauth/complete", `{"state":"`+cb.Query().Get("state")+`"}`); r.status != http.StatusCreated {
			t.Fatalf("complete: %d %s", r.status, r.body)
		}
		first := grantOf(t, obID, "token:alice")
		if first.Token.RefreshToken == "" || time.Until(first.Token.Expiry) > shortTTL {
			t.Fatalf("want a refresh token and a short-lived access token, got expiry in %s", time.Until(first.Token.Expiry))
		}
		// Early in the token's life, calls use it as it is: no refresh per request.
		wantUser(t, credAliceToken, "ob.whoami", "alice")
		wantUser(t, credAliceToken, "ob.whoami", "alice")
		if g := grantOf(t, obID, "token:alice"); g.Token.AccessToken != first.Token.AccessToken && time.Until(first.Token.Expiry) > shortTTL/2 {
			t.Fatal("the access token was refreshed early in its life")
		}
		// Its session runs on past the token's expiry, and past the next one's: each is refreshed in time.
		for range 2 {
			time.Sleep(time.Until(grantOf(t, obID, "token:alice").Token.Expiry) + 500*time.Millisecond)
			wantUser(t, credAliceToken, "ob.whoami", "alice")
		}
		if g := grantOf(t, obID, "token:alice"); g.Token.AccessToken == first.Token.AccessToken || !g.Token.Expiry.After(time.Now()) {
			t.Fatalf("the stored grant was not refreshed (expiry %s)", g.Token.Expiry)
		}
	})

	t.Run("token exchange", func(t *testing.T) {
		orgToken := peertest.OIDCClientToken(t, org, exchangeAggResource, "client-bot", "aggregator:client")
		before := oauthtest.ASCounts(t, issuer).Exchanges
		wantUser(t, orgToken, "xo.whoami", "client-bot")
		wantUser(t, orgToken, "xo.whoami", "client-bot") // the session and its token as they are
		if n := oauthtest.ASCounts(t, issuer).Exchanges - before; n != 1 {
			t.Fatalf("%d exchanges for two calls early in the token's life, want 1", n)
		}
		g := grantOf(t, xoID, "oauth:client-bot")
		if g.Token.RefreshToken != "" {
			t.Fatal("the exchanged grant has a refresh token: this case needs none")
		}
		for i := range 2 {
			time.Sleep(time.Until(grantOf(t, xoID, "oauth:client-bot").Token.Expiry) + 500*time.Millisecond)
			wantUser(t, orgToken, "xo.whoami", "client-bot")
			if n := oauthtest.ASCounts(t, issuer).Exchanges - before; n != 2+i {
				t.Fatalf("%d exchanges after %d expiries, want %d", n, i+1, 2+i)
			}
		}
	})
}
