package integration_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/api"
	httpauth "github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
)

// TestBackendOAuthPerNodeRedirects: two daemons sharing the store with different console URLs (per-node
// MCP_AGGREGATOR_CONSOLE_URL), so different redirect URIs. The first flow registers a client for the first
// daemon's URI; the second daemon's first flow registers one listing both URIs, which replaces it; from then on
// flows alternating between the daemons register nothing more, and each is redirected to its own daemon's URI
// (oidc-provider refuses a redirect URI the client was not registered with).
func TestBackendOAuthPerNodeRedirects(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := httpauth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ln, resource := oauthtest.Listen(t)
	redirects := []string{"http://127.0.0.1:1" + backendauth.CallbackPath, "http://[::1]:1" + backendauth.CallbackPath}
	issuer := oauthtest.StartAS(t, resource, redirects[0])
	oauthtest.Backend(t, ln, resource, issuer)
	nodes := make([]*env, 2)
	for i, r := range redirects {
		nodes[i] = &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks,
			OAuth: backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: r,
				EndSession: sys.EndUserSession, Logger: logger}),
			Config: api.Config{ConsoleURL: "http://console.example/ui/"}})}
	}
	r := nodes[0].authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"ob","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+resource+`","headers":{"Authorization":"Bearer svc-token"}},`+
		`"credential_mode":"per_user","user_credential":{"oauth":{}}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	flow := func(i int) {
		t.Helper()
		n := nodes[i]
		r := n.authDo(t, credAliceToken, "POST", base+"/servers/"+id+"/credentials/me/oauth", "")
		if r.status != http.StatusOK {
			t.Fatalf("start on node %d: %d %s", i+1, r.status, r.body)
		}
		authURL := r.json(t)["authorization_url"].(string)
		if !strings.Contains(authURL, "redirect_uri="+url.QueryEscape(redirects[i])) {
			t.Fatalf("node %d's authorization URL does not redirect to it: %s", i+1, authURL)
		}
		cb := oauthtest.Browse(t, authURL+"&login_hint=alice", redirects[i])
		res, err := n.app.Test(httptest.NewRequest("GET", backendauth.CallbackPath+"?"+cb.RawQuery, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if r := n.authDo(t, credAliceToken, "POST", base+"/oauth/complete", `{"state":"`+cb.Query().Get("state")+`"}`); r.status != http.StatusCreated {
			t.Fatalf("complete on node %d: %d %s", i+1, r.status, r.body)
		}
	}
	registered := func(want int) {
		t.Helper()
		if n := oauthtest.ASCounts(t, issuer).Registrations; n != want {
			t.Fatalf("%d clients registered, want %d", n, want)
		}
	}
	flow(0)
	registered(1)
	flow(1)
	registered(2)
	for _, i := range []int{0, 1, 0, 1} {
		flow(i)
	}
	registered(2)
	c, err := st.GetOAuthClient(t.Context(), id, issuer)
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.Unmarshal(c.Data, &data); err != nil || !slices.Equal(data.RedirectURIs, redirects) {
		t.Fatalf("the stored client lists %v (%v), want %v", data.RedirectURIs, err, redirects)
	}
	if r := nodes[0].authDo(t, credAliceToken, "POST", "/api/v1/tools/call", `{"name":"ob.whoami","arguments":{}}`); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `user=alice"`) {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
}
