package integration_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/api"
	httpauth "github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestBackendOAuth: a per_user server whose backend is an OAuth-protected go-sdk server (auth.RequireBearerToken)
// behind panva's oidc-provider. Two callers each run the authorization code flow with PKCE through the aggregator
// (dynamic client registration, the provider's login and consent, our callback, our completion) and each sees
// their own identity in the backend's answers; no caller can complete another's flow, reuse a state, or store a
// plain secret instead; a flow started on one daemon returns to and completes on another sharing the store; the
// client registered for the first flow serves the second (one registration); an expired access token and one the
// backend refuses (401) are refreshed; revocation (by an admin, or the caller's own removal) ends the session and
// revokes the tokens at the authorization server (RFC 7009); no answer holds a token.
func TestBackendOAuth(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := httpauth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken+",bob:"+credBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, resource := oauthtest.Listen(t)
	// The browser never reaches this address: browse stops at it and the test hands the query to the app.
	redirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	issuer := oauthtest.StartAS(t, resource, redirect)
	oauthtest.Backend(t, ln, resource, issuer)

	var skew atomic.Int64 // the flows' clock runs ahead by this much
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: redirect,
		EndSession: sys.EndUserSession, Logger: logger, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks, OAuth: flows,
		Config: api.Config{ConsoleURL: "http://console.example/ui/"}})}
	// A second daemon sharing the store (another node of a cluster): its own flow runner, nothing in common with
	// the first but the store.
	other := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks,
		OAuth: backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: redirect,
			EndSession: sys.EndUserSession, Logger: logger}),
		Config: api.Config{ConsoleURL: "http://console.example/ui/"}})}
	var bodies []string
	do := func(token, method, path, body string, want int) response {
		t.Helper()
		var r response
		if token == "" {
			r = e.do(t, method, path, body)
		} else {
			r = e.authDo(t, token, method, path, body)
		}
		bodies = append(bodies, string(r.body))
		if r.status != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, r.status, want, r.body)
		}
		return r
	}
	r := do(credAdminToken, "POST", base+"/servers", `{"name":"ob","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+resource+`","headers":{"Authorization":"Bearer svc-token"}},`+
		`"credential_mode":"per_user","user_credential":{"oauth":{}}}`, http.StatusCreated)
	id := r.json(t)["id"].(string)
	cred := base + "/servers/" + id + "/credentials"
	waitFor(t, "ob.whoami routable", func() bool { return callable(sys, "ob.whoami") })

	call := func(token string) response {
		t.Helper()
		r := e.authDo(t, token, "POST", "/api/v1/tools/call", `{"name":"ob.whoami","arguments":{}}`)
		bodies = append(bodies, string(r.body))
		return r
	}
	wantUser := func(token, user string) {
		t.Helper()
		if r := call(token); r.status != http.StatusOK || !strings.Contains(string(r.body), `user=`+user+`"`) {
			t.Fatalf("call as %s: %d %s; want user=%s", token[:5], r.status, r.body, user)
		}
	}
	start := func(token string) string {
		t.Helper()
		m := do(token, "POST", cred+"/me/oauth", "", http.StatusOK).json(t)
		u, _ := m["authorization_url"].(string)
		if !strings.Contains(u, "code_challenge_method=S256") || !strings.Contains(u, "resource=") {
			t.Fatalf("authorization URL %q", u)
		}
		return u
	}
	// backTo follows the authorization URL as user and hands the redirect to the callback of daemon at; it returns
	// the state.
	backTo := func(at *env, authURL, user string) string {
		t.Helper()
		cb := oauthtest.Browse(t, authURL+"&login_hint="+user, redirect)
		req := httptest.NewRequest("GET", backendauth.CallbackPath+"?"+cb.RawQuery, nil)
		res, err := at.app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		state := cb.Query().Get("state")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "http://console.example/ui/#oauth="+url.QueryEscape(state) {
			t.Fatalf("callback: %d to %q", res.StatusCode, res.Header.Get("Location"))
		}
		// The same redirect again is refused, on either daemon: a state is taken once.
		for _, again := range []*env{e, other} {
			res, err = again.app.Test(httptest.NewRequest("GET", backendauth.CallbackPath+"?"+cb.RawQuery, nil), -1)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound {
				t.Fatalf("callback replay: %d", res.StatusCode)
			}
		}
		return state
	}
	back := func(authURL, user string) string { t.Helper(); return backTo(e, authURL, user) }
	complete := func(token, state string, want int) response {
		t.Helper()
		return do(token, "POST", base+"/oauth/complete", `{"state":"`+state+`"}`, want)
	}

	// Without a grant: CREDENTIAL_REQUIRED naming the route that starts the authorization.
	m := wantError(t, call(credAliceToken), http.StatusForbidden, "CREDENTIAL_REQUIRED")
	if !strings.Contains(fmt.Sprint(m["detail"]), cred+"/me/oauth") {
		t.Fatalf("CREDENTIAL_REQUIRED says %v", m["detail"])
	}
	if c, _ := m["context"].(map[string]any); c["credential_url"] != cred+"/me/oauth" || c["method"] != "POST" || c["body"] != nil {
		t.Fatalf("CREDENTIAL_REQUIRED context %v must name the route that starts the authorization", m["context"])
	}
	// A plain secret is not what this server takes.
	do(credAliceToken, "PUT", cred+"/me", `{"secret":"typed-key"}`, http.StatusConflict)

	aliceURL := start(credAliceToken)
	aliceState := back(aliceURL, "alice")
	// Bob cannot complete Alice's flow, nor can anyone without a token; the flow stays Alice's.
	complete(credBobToken, aliceState, http.StatusNotFound)
	do("", "POST", base+"/oauth/complete", `{"state":"`+aliceState+`"}`, http.StatusUnauthorized)
	r = complete(credAliceToken, aliceState, http.StatusCreated)
	if got := r.json(t); got["subject"] != "token:alice" || got["server_id"] != id {
		t.Fatalf("alice's completion answered %s", r.body)
	}
	complete(credAliceToken, aliceState, http.StatusNotFound) // single use

	// Bob completes his own; a flow whose callback has not come is not completable yet. His flow starts on the
	// first daemon, and the authorization server's redirect and his completion land on the other one.
	bobURL := start(credBobToken)
	bobState := url.Values{}
	if u, err := url.Parse(bobURL); err == nil {
		bobState = u.Query()
	}
	complete(credBobToken, bobState.Get("state"), http.StatusConflict)
	bobBack := backTo(other, bobURL, "bob")
	if r := other.authDo(t, credAliceToken, "POST", base+"/oauth/complete", `{"state":"`+bobBack+`"}`); r.status != http.StatusNotFound {
		t.Fatalf("alice completed bob's flow on the other daemon: %d %s", r.status, r.body)
	}
	if r := other.authDo(t, credBobToken, "POST", base+"/oauth/complete", `{"state":"`+bobBack+`"}`); r.status != http.StatusCreated {
		t.Fatalf("bob's completion on the other daemon: %d %s", r.status, r.body)
	}
	complete(credBobToken, bobBack, http.StatusNotFound) // taken, on every daemon
	// The client registered for Alice's flow served Bob's: one registration at the authorization server.
	if n := oauthtest.ASCounts(t, issuer).Registrations; n != 1 {
		t.Fatalf("%d clients registered for two users' flows, want 1", n)
	}

	for range 2 {
		wantUser(credAliceToken, "alice")
		wantUser(credBobToken, "bob")
	}
	wantError(t, call(credAdminToken), http.StatusForbidden, "CREDENTIAL_REQUIRED") // no grant of the admin's

	grantOf := func(subject string) backendauth.Grant {
		t.Helper()
		v, err := st.GetUserSecret(t.Context(), id, subject)
		if err != nil {
			t.Fatalf("grant of %s: %v", subject, err)
		}
		g, err := backendauth.DecodeGrant(v.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	putGrant := func(subject string, g backendauth.Grant) {
		t.Helper()
		raw, err := g.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.PutUserSecret(t.Context(), persistence.UserSecret{ServerID: id, Subject: subject, Secret: raw}); err != nil {
			t.Fatal(err)
		}
		if err := sys.EndUserSession(t.Context(), id, subject); err != nil {
			t.Fatal(err)
		}
	}
	first := grantOf("token:alice")
	if first.Token.RefreshToken == "" {
		t.Fatal("no refresh token was issued")
	}
	seen := []string{first.Token.AccessToken, first.Token.RefreshToken, grantOf("token:bob").Token.AccessToken}

	// An access token about to expire is refreshed before it is sent.
	expiring := first
	tok := *first.Token
	tok.Expiry = time.Now().Add(10 * time.Second)
	expiring.Token = &tok
	putGrant("token:alice", expiring)
	wantUser(credAliceToken, "alice")
	second := grantOf("token:alice")
	if second.Token.AccessToken == first.Token.AccessToken || !second.Token.Expiry.After(time.Now().Add(time.Minute)) {
		t.Fatalf("the expiring token was not refreshed (expiry %s)", second.Token.Expiry)
	}
	seen = append(seen, second.Token.AccessToken, second.Token.RefreshToken)

	// A token the backend refuses (401) is refreshed and the request retried.
	refused := second
	tok = *second.Token
	tok.AccessToken = "not-a-token-the-backend-takes"
	tok.Expiry = time.Now().Add(time.Hour)
	refused.Token = &tok
	putGrant("token:alice", refused)
	wantUser(credAliceToken, "alice")
	third := grantOf("token:alice")
	if third.Token.AccessToken == tok.AccessToken {
		t.Fatal("the refused token was not replaced")
	}
	seen = append(seen, third.Token.AccessToken, third.Token.RefreshToken)
	wantUser(credBobToken, "bob")

	// A flow past its time is gone: its callback is refused, and it cannot be completed.
	late, err := url.Parse(start(credAdminToken))
	if err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(backendauth.DefaultFlowTTL + time.Minute))
	lateState := late.Query().Get("state")
	res, err := e.app.Test(httptest.NewRequest("GET", backendauth.CallbackPath+"?code=c0de&state="+url.QueryEscape(lateState), nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("callback of an expired flow: %d", res.StatusCode)
	}
	complete(credAdminToken, lateState, http.StatusNotFound)
	skew.Store(0)

	// The per-server endpoint (/mcp/servers/ob) runs each caller on their own grant too.
	proxyURL := proxyEndpoint(t, sys, toks) + "ob"
	aliceProxy := proxySession(t, proxyURL, credAliceToken)
	bobProxy := proxySession(t, proxyURL, credBobToken)
	wantProxyUser(t, aliceProxy, "alice")
	wantProxyUser(t, bobProxy, "bob")
	// Revocation ends Alice's session (on both endpoints): her next call needs an authorization again; Bob is
	// untouched. Her tokens are revoked at the authorization server: her last refresh token no longer refreshes.
	revoked := grantOf("token:alice")
	do(credAdminToken, "DELETE", cred+"/token:alice", "", http.StatusNoContent)
	wantError(t, call(credAliceToken), http.StatusForbidden, "CREDENTIAL_REQUIRED")
	wantUser(credBobToken, "bob")
	waitSessionEnd(t, aliceProxy)
	wantProxyUser(t, bobProxy, "bob")
	req, _ := http.NewRequest(http.MethodPost, proxyURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize",`+
		`"params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err = (&http.Client{Transport: bearerTransport{credAliceToken}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(again), `"error_code":"CREDENTIAL_REQUIRED"`) ||
		!strings.Contains(string(again), cred+"/me/oauth") {
		t.Fatalf("alice's new proxy session after the revocation: %d %s", res.StatusCode, again)
	}
	if n := oauthtest.ASCounts(t, issuer).Revocations; n < 1 {
		t.Fatalf("%d revocations at the authorization server after an admin revoked a grant", n)
	}
	if code := oauthtest.RefreshStatus(t, revoked, resource); code != http.StatusBadRequest {
		t.Fatalf("a revoked refresh token refreshed (%d)", code)
	}
	// Bob removes his own: revoked too; the still-valid refresh token of his grant is refused afterwards.
	bobGrant := grantOf("token:bob")
	before := oauthtest.ASCounts(t, issuer).Revocations
	do(credBobToken, "DELETE", cred+"/me", "", http.StatusNoContent)
	if n := oauthtest.ASCounts(t, issuer).Revocations; n <= before {
		t.Fatalf("no revocation at the authorization server when bob removed his credential (%d, before %d)", n, before)
	}
	if code := oauthtest.RefreshStatus(t, bobGrant, resource); code != http.StatusBadRequest {
		t.Fatalf("bob's revoked refresh token refreshed (%d)", code)
	}

	for _, b := range bodies {
		for _, s := range seen {
			if s != "" && strings.Contains(b, s) {
				t.Fatalf("a token is in an answer: %s", b)
			}
		}
	}
}

// TestBackendOAuthOutboundPolicy: OAuth discovery follows the outbound policy. A backend whose protected resource
// metadata names an authorization server at an address the operator denies (MCP_AGGREGATOR_OUTBOUND_DENY; the
// cloud metadata addresses the go-sdk refuses by itself) gets no request sent there: the start answers 502 saying
// the target was refused, the denied server sees nothing, and no flow is left pending. A backend that does not
// challenge, and a server without oauth, are refused with their own answers.
func TestBackendOAuthOutboundPolicy(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := httpauth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken, "")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	resource := hs.URL + "/mcp"
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer svc-token" {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+oauth.MetadataURL(resource)+`"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		http.Error(w, "not an MCP server", http.StatusNotFound)
	})
	denied, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	var hits atomic.Int64
	deniedSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.NotFound(w, nil)
	})}
	go func() { _ = deniedSrv.Serve(denied) }()
	t.Cleanup(func() { _ = deniedSrv.Close() })
	mux.HandleFunc(oauth.WellKnownPath+"/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"resource":%q,"authorization_servers":["http://%s"]}`, resource, denied.Addr())
	})
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(open.Close)

	out := backend.NewOutbound(backend.OutboundConfig{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}, "")
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: out,
		RedirectURL: "http://127.0.0.1:1" + backendauth.CallbackPath, Logger: logger})
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks, OAuth: flows})}
	register := func(name, url, slot string) string {
		t.Helper()
		r := e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"`+name+`","transport_type":"HTTP","auto_connect":false,`+
			`"connection_config":{"base_url":"`+url+`"},"credential_mode":"per_user","user_credential":`+slot+`}`)
		if r.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", name, r.status, r.body)
		}
		return r.json(t)["id"].(string)
	}
	start := func(id string) response {
		t.Helper()
		return e.authDo(t, credAliceToken, "POST", base+"/servers/"+id+"/credentials/me/oauth", "")
	}
	r := start(register("meta", resource, `{"oauth":{}}`))
	m := wantError(t, r, http.StatusBadGateway, "SERVER_UNAVAILABLE")
	if d := fmt.Sprint(m["detail"]); !strings.Contains(d, "127.0.0.2") || !strings.Contains(d, "refused") {
		t.Fatalf("start against a denied authorization server: %s", r.body)
	}
	if hits.Load() != 0 {
		t.Fatalf("the denied authorization server got %d requests", hits.Load())
	}
	wantError(t, start(register("open", open.URL+"/mcp", `{"oauth":{}}`)), http.StatusBadGateway, "SERVER_UNAVAILABLE")
	wantError(t, start(register("keyed", open.URL+"/mcp", `{"header":"Authorization","prefix":"Bearer "}`)), http.StatusConflict, "CREDENTIAL_NOT_ACCEPTED")
	if n, err := flows.Pending(t.Context()); err != nil || n != 0 {
		t.Fatalf("%d flows pending after refused starts (%v)", n, err)
	}
}

// TestBackendOAuthTokenExchange: a per_user server that allows token exchange (user_credential.oauth.token_exchange)
// gets a caller who came with an access token of the organisation's issuer (oidc-provider.mjs) their backend grant
// without asking: the aggregator exchanges that token (RFC 8693) at the backend's authorization server
// (oidc-backend-as.mjs trusting the organisation's issuer) and the call goes on with the caller's own identity at
// the backend. The grant is stored and reused; an expired exchanged token is exchanged again; a static-token caller
// and a server that does not allow it still get CREDENTIAL_REQUIRED, without any exchange.
func TestBackendOAuthTokenExchange(t *testing.T) {
	x := startExchange(t, api.Config{})
	e, st, sys, org, issuer := x.e, x.st, x.sys, x.org, x.issuer
	id := x.register(t, "xo", `{"oauth":{"token_exchange":true}}`)
	x.register(t, "ask", `{"oauth":{}}`)
	waitFor(t, "xo.whoami and ask.whoami routable", func() bool { return callable(sys, "xo.whoami") && callable(sys, "ask.whoami") })
	call := func(token, tool string) response {
		t.Helper()
		return e.authDo(t, token, "POST", "/api/v1/tools/call", `{"name":"`+tool+`","arguments":{}}`)
	}
	orgToken := peertest.OIDCClientToken(t, org, exchangeAggResource, "client-bot", "aggregator:client")
	wantBot := func() {
		t.Helper()
		if r := call(orgToken, "xo.whoami"); r.status != http.StatusOK || !strings.Contains(string(r.body), `user=client-bot"`) {
			t.Fatalf("call with the organisation's token: %d %s", r.status, r.body)
		}
	}

	wantBot()
	if n := oauthtest.ASCounts(t, issuer).Exchanges; n != 1 {
		t.Fatalf("%d exchanges for the first call, want 1", n)
	}
	raw, err := st.GetUserSecret(t.Context(), id, "oauth:client-bot")
	if err != nil {
		t.Fatalf("no grant stored for the exchanged token: %v", err)
	}
	g, err := backendauth.DecodeGrant(raw.Secret)
	if err != nil {
		t.Fatal(err)
	}
	wantBot() // the stored grant: no second exchange
	if n := oauthtest.ASCounts(t, issuer).Exchanges; n != 1 {
		t.Fatalf("%d exchanges after a second call, want 1", n)
	}

	// An exchanged token that expired (no refresh token renews it) is exchanged again.
	tok := *g.Token
	tok.Expiry = time.Now().Add(-time.Minute)
	g.Token = &tok
	enc, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.PutUserSecret(t.Context(), persistence.UserSecret{ServerID: id, Subject: "oauth:client-bot", Secret: enc}); err != nil {
		t.Fatal(err)
	}
	if err := sys.EndUserSession(t.Context(), id, "oauth:client-bot"); err != nil {
		t.Fatal(err)
	}
	wantBot()
	if n := oauthtest.ASCounts(t, issuer).Exchanges; n != 2 {
		t.Fatalf("%d exchanges after the token expired, want 2", n)
	}

	// No exchange for a static token, nor on a server that does not allow it.
	m := wantError(t, call(credAliceToken, "xo.whoami"), http.StatusForbidden, "CREDENTIAL_REQUIRED")
	if c, _ := m["context"].(map[string]any); c["credential_url"] != base+"/servers/"+id+"/credentials/me/oauth" {
		t.Fatalf("CREDENTIAL_REQUIRED context %v", m["context"])
	}
	wantError(t, call(orgToken, "ask.whoami"), http.StatusForbidden, "CREDENTIAL_REQUIRED")
	if n := oauthtest.ASCounts(t, issuer).Exchanges; n != 2 {
		t.Fatalf("%d exchanges after calls that must not exchange, want 2", n)
	}
}

// exchangeAggResource is the aggregator's resource in the token exchange tests: the audience of the organisation's
// access tokens.
const exchangeAggResource = "http://aggregator.example/mcp"

// exchangeFixture is the setting of the token exchange tests: callers bring the static tokens (credAdminToken,
// credAliceToken) or access tokens of the organisation's issuer (oidc-provider.mjs); per_user servers of one backend
// (oauthtest.Backend) whose authorization server trusts that issuer; the API with backend OAuth flows that exchange
// a caller's token for a backend grant.
type exchangeFixture struct {
	e        *env
	st       persistence.Store
	sys      *actors.System
	org      string // the organisation's issuer
	resource string // the backend's MCP endpoint
	redirect string // the flows' callback
	issuer   string // the backend's authorization server
}

// startExchange starts the fixture; the API runs with cfg, the backend's authorization server with asEnv (e.g.
// "ACCESS_TTL=6") besides its trust of the organisation's issuer.
func startExchange(t *testing.T, cfg api.Config, asEnv ...string) *exchangeFixture {
	t.Helper()
	st, sys, logger := startSystem(t)
	x := &exchangeFixture{st: st, sys: sys}
	x.org = peertest.StartOIDCScript(t, "oidc-provider.mjs", "RESOURCE="+exchangeAggResource)
	v, err := oauth.New(t.Context(), oauth.Config{Issuer: x.org, Audience: exchangeAggResource, Resource: exchangeAggResource,
		ClientScope: "aggregator:client", AdminScope: "aggregator:admin"})
	if err != nil {
		t.Fatal(err)
	}
	static, err := httpauth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, resource := oauthtest.Listen(t)
	x.resource, x.redirect = resource, "http://127.0.0.1:1"+backendauth.CallbackPath
	x.issuer = oauthtest.StartAS(t, resource, x.redirect, append([]string{"ORG_ISSUER=" + x.org}, asEnv...)...)
	oauthtest.Backend(t, ln, resource, x.issuer)

	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: x.redirect,
		EndSession: sys.EndUserSession, Logger: logger})
	gw := gateway.New(sys, gateway.Options{ExchangeCredential: flows.CallExchanger(st.GetServer)})
	x.e = &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: static.WithOAuth(v), OAuth: flows, Gateway: gw,
		Config: cfg})}
	return x
}

// register registers a per_user server of the backend with the user_credential slot (JSON); it returns its id.
func (x *exchangeFixture) register(t *testing.T, name, slot string) string {
	t.Helper()
	r := x.e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"`+name+`","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+x.resource+`","headers":{"Authorization":"Bearer svc-token"}},`+
		`"credential_mode":"per_user","user_credential":`+slot+`}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register %s: %d %s", name, r.status, r.body)
	}
	return r.json(t)["id"].(string)
}

// proxyEndpoint serves sys's per-server endpoint behind toks; it returns its prefix URL (append a server's name).
func proxyEndpoint(t *testing.T, sys *actors.System, toks *httpauth.Tokens) string {
	t.Helper()
	proxy := mcpproxy.New(sys, mcpproxy.Options{})
	t.Cleanup(proxy.Close)
	mux := http.NewServeMux()
	mux.Handle(mcpproxy.Prefix, proxy)
	hs := httptest.NewServer(httpauth.Middleware(toks, httpauth.Policy{}, mux))
	t.Cleanup(hs.Close)
	return hs.URL + mcpproxy.Prefix
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// proxySession opens a session of the per-server endpoint url as token.
func proxySession(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "proxied", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatalf("open a proxy session: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// wantProxyUser calls whoami on a proxy session and wants the backend to have seen user.
func wantProxyUser(t *testing.T, cs *mcp.ClientSession, user string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("whoami through the proxy: %v %+v", err, res)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "user="+user {
		t.Fatalf("whoami through the proxy: %q, want user=%s", got, user)
	}
}

// waitSessionEnd waits until the proxy ends the client's session.
func waitSessionEnd(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the proxy session is still open after its credential was revoked")
	}
}
