package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/peertest"
)

const (
	credAdminToken = "admin-secret-token-0002"
	credAliceToken = "alice-secret-token-0002"
	credBobToken   = "bob00-secret-token-0002"
)

// TestCredentialsPerCaller: on every credential route, a caller stores, replaces and removes only their own
// secret; another client can neither read, list, replace nor remove it (nor name another subject in a body); the
// admin lists subjects without secrets and revokes; no answer and no audit record ever holds a secret.
func TestCredentialsPerCaller(t *testing.T) {
	ctx := t.Context()
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken+",bob:"+credBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	var bodies []string
	do := func(token, method, path, body string, want int) response {
		t.Helper()
		r := e.authDo(t, token, method, path, body)
		if r.status != want {
			t.Fatalf("%s %s as %s: %d, want %d: %s", method, path, token[:5], r.status, want, r.body)
		}
		bodies = append(bodies, string(r.body))
		return r
	}
	r := do(credAdminToken, "POST", base+"/servers", `{"name":"per","transport_type":"STDIO","connection_config":{"command":"true"},`+
		`"auto_connect":false,"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`, http.StatusCreated)
	m := r.json(t)
	id := m["id"].(string)
	if m["credential_mode"] != "per_user" || m["user_credential"].(map[string]any)["env"] != "API_KEY" {
		t.Fatalf("registered %s", r.body)
	}
	cred := base + "/servers/" + id + "/credentials"
	secretOf := func(subject string) string {
		t.Helper()
		v, err := st.GetUserSecret(ctx, id, subject)
		if err != nil {
			return ""
		}
		return string(v.Secret)
	}

	r = do(credAliceToken, "PUT", cred+"/me", `{"secret":"alice-secret-value-1"}`, http.StatusCreated)
	if got := r.json(t); got["subject"] != "token:alice" || got["secret"] != nil {
		t.Fatalf("alice's put answered %s", r.body)
	}
	do(credBobToken, "PUT", cred+"/me", `{"secret":"bob-secret-value-1"}`, http.StatusCreated)
	// A body cannot name another subject.
	do(credBobToken, "PUT", cred+"/me", `{"secret":"bob-secret-value-2","subject":"token:alice"}`, http.StatusUnprocessableEntity)
	// No route lets a client address another caller's credential; the admin has no route that writes one either.
	for _, tc := range []struct {
		token, method, path string
		want                int
	}{
		{credBobToken, "PUT", cred + "/token:alice", http.StatusForbidden},
		{credBobToken, "DELETE", cred + "/token:alice", http.StatusForbidden},
		{credBobToken, "GET", cred, http.StatusForbidden},
		{credBobToken, "GET", cred + "/me", http.StatusForbidden},
		{credBobToken, "GET", cred + "/token:alice", http.StatusForbidden},
		{credAdminToken, "PUT", cred + "/token:alice", http.StatusMethodNotAllowed},
		{credAdminToken, "GET", cred + "/token:alice", http.StatusMethodNotAllowed},
	} {
		body := ""
		if tc.method == "PUT" {
			body = `{"secret":"overwritten"}`
		}
		do(tc.token, tc.method, tc.path, body, tc.want)
	}
	if a, b := secretOf("token:alice"), secretOf("token:bob"); a != "alice-secret-value-1" || b != "bob-secret-value-1" {
		t.Fatalf("after the refused requests: alice %q, bob %q", a, b)
	}
	// Replacing and removing one's own leaves the other's alone.
	do(credBobToken, "PUT", cred+"/me", `{"secret":"bob-secret-value-3"}`, http.StatusOK)
	if a, b := secretOf("token:alice"), secretOf("token:bob"); a != "alice-secret-value-1" || b != "bob-secret-value-3" {
		t.Fatalf("after bob's replace: alice %q, bob %q", a, b)
	}
	do(credBobToken, "DELETE", cred+"/me", "", http.StatusNoContent)
	do(credBobToken, "DELETE", cred+"/me", "", http.StatusNotFound)
	if a, b := secretOf("token:alice"), secretOf("token:bob"); a != "alice-secret-value-1" || b != "" {
		t.Fatalf("after bob's delete: alice %q, bob %q", a, b)
	}
	// The admin lists who has one (no secret) and revokes.
	r = do(credAdminToken, "GET", cred, "", http.StatusOK)
	if got := r.json(t); got["total"] != 1.0 || !strings.Contains(string(r.body), `"subject":"token:alice"`) {
		t.Fatalf("list %s", r.body)
	}
	do(credAdminToken, "DELETE", cred+"/token%3Aalice", "", http.StatusNoContent)
	do(credAdminToken, "DELETE", cred+"/token:alice", "", http.StatusNotFound)
	if secretOf("token:alice") != "" {
		t.Fatal("revoked credential still stored")
	}
	do(credAliceToken, "PUT", cred+"/me", `{"secret":"alice-secret-value-2"}`, http.StatusCreated)
	do(credAdminToken, "GET", base+"/servers/"+id, "", http.StatusOK)
	do(credAliceToken, "GET", base+"/servers", "", http.StatusOK)
	do(credAdminToken, "GET", base+"/export", "", http.StatusOK)
	do(credAdminToken, "GET", base+"/audit", "", http.StatusOK)
	recs, _, err := st.ListAudit(ctx, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for _, rec := range recs {
		if strings.HasPrefix(rec.Event, "credential.") {
			events++
		}
		bodies = append(bodies, string(rec.Details))
	}
	if events != 6 { // alice, bob, bob again, bob's removal, the revocation, alice again
		t.Errorf("%d credential audit records, want 6", events)
	}
	for _, b := range bodies {
		if strings.Contains(b, "secret-value") {
			t.Fatalf("a secret leaked: %s", b)
		}
	}
}

// echoAuthBackend is a go-sdk streamable HTTP server whose whoami tool answers the Authorization header its request
// carried. It refuses "Bearer bad" with 401, and records the Authorization of every DELETE (a client closing its
// session).
func echoAuthBackend(t *testing.T) (url string, closed func() []string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo-auth", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			got := ""
			if r.Extra != nil && r.Extra.Header != nil {
				got = r.Extra.Header.Get("Authorization")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "auth=" + got}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var mu sync.Mutex
	var deletes []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer bad" {
			http.Error(w, "bad credential", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodDelete {
			mu.Lock()
			deletes = append(deletes, r.Header.Get("Authorization"))
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(deletes)
	}
}

// TestPerUserSessions: against a real go-sdk streamable HTTP backend, two callers with different secrets each see
// their own Authorization on a per_user server; a caller without one gets 403 CREDENTIAL_REQUIRED naming where to
// store it; replacing a secret and revoking one end that caller's session; a caller's bad credential fails only
// that caller, and the server stays CONNECTED for the others.
func TestPerUserSessions(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken+",bob:"+credBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	url, closed := echoAuthBackend(t)
	r := e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"per","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+url+`","headers":{"Authorization":"Bearer discovery"}},`+
		`"credential_mode":"per_user","user_credential":{"header":"Authorization","prefix":"Bearer "}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	cred := base + "/servers/" + id + "/credentials"
	deadline := time.Now().Add(30 * time.Second)
	for !callable(sys, "per.whoami") {
		if time.Now().After(deadline) {
			t.Fatal("per.whoami never routable")
		}
		time.Sleep(30 * time.Millisecond)
	}
	call := func(token string) response {
		t.Helper()
		return e.authDo(t, token, "POST", "/api/v1/tools/call", `{"name":"per.whoami","arguments":{}}`)
	}
	wantAuth := func(token, want string) {
		t.Helper()
		r := call(token)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `auth=`+want+`"`) {
			t.Fatalf("call as %s: %d %s; want auth=%s", token[:5], r.status, r.body, want)
		}
	}
	wantRequired := func(token string) {
		t.Helper()
		m := wantError(t, call(token), http.StatusForbidden, "CREDENTIAL_REQUIRED")
		ctx, _ := m["context"].(map[string]any)
		if ctx["credential_url"] != cred+"/me" {
			t.Fatalf("CREDENTIAL_REQUIRED context %v", m["context"])
		}
	}

	wantRequired(credAliceToken)
	if r := e.authDo(t, credAliceToken, "PUT", cred+"/me", `{"secret":"alice-key"}`); r.status != http.StatusCreated {
		t.Fatalf("alice put: %d %s", r.status, r.body)
	}
	if r := e.authDo(t, credBobToken, "PUT", cred+"/me", `{"secret":"bob-key"}`); r.status != http.StatusCreated {
		t.Fatalf("bob put: %d %s", r.status, r.body)
	}
	for range 2 {
		wantAuth(credAliceToken, "Bearer alice-key")
		wantAuth(credBobToken, "Bearer bob-key")
	}
	wantRequired(credAdminToken) // the admin has no credential of their own: the registration's is not lent

	// Replacing a secret ends the caller's session; the next call uses the new one.
	if r := e.authDo(t, credBobToken, "PUT", cred+"/me", `{"secret":"bob-key-2"}`); r.status != http.StatusOK {
		t.Fatalf("bob replace: %d %s", r.status, r.body)
	}
	wantAuth(credBobToken, "Bearer bob-key-2")
	wantAuth(credAliceToken, "Bearer alice-key")

	// Revoking ends the session: the backend sees it closed, and the next call needs a credential again.
	if r := e.authDo(t, credAdminToken, "DELETE", cred+"/token:alice", ""); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	waitFor(t, "alice's session closed at the backend", func() bool { return slices.Contains(closed(), "Bearer alice-key") })
	wantRequired(credAliceToken)

	// A bad credential fails its caller only; the server stays CONNECTED.
	if r := e.authDo(t, credAliceToken, "PUT", cred+"/me", `{"secret":"bad"}`); r.status != http.StatusCreated {
		t.Fatalf("alice bad put: %d %s", r.status, r.body)
	}
	r = call(credAliceToken)
	m := wantError(t, r, http.StatusServiceUnavailable, "SERVER_UNAVAILABLE")
	if strings.Contains(string(r.body), "Bearer bad") {
		t.Fatalf("the secret is in the answer: %s", r.body)
	}
	_ = m
	wantAuth(credBobToken, "Bearer bob-key-2")
	srv, err := st.GetServer(t.Context(), id)
	if err != nil || srv.Status != "CONNECTED" || srv.ConsecutiveFailures != 0 {
		t.Fatalf("server after a caller's bad credential: %s, %d failures, %v", srv.Status, srv.ConsecutiveFailures, err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPerUserStdio: a per_user stdio server runs one child per caller with the caller's secret in the child's
// environment variable (never expanded: a secret holding ${HOME} arrives as written).
func TestPerUserStdio(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken+",bob:"+credBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	bin := peertest.GoBinary(t, "./testdata/envecho")
	r := e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"env","transport_type":"STDIO",`+
		`"connection_config":{"command":"`+bin+`"},"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	cred := base + "/servers/" + r.json(t)["id"].(string) + "/credentials/me"
	waitFor(t, "env.whoami routable", func() bool { return callable(sys, "env.whoami") })
	pids := map[string]string{}
	for _, c := range []struct{ token, secret string }{{credAliceToken, "alice-env-key"}, {credBobToken, "bob ${HOME} key"}} {
		if r := e.authDo(t, c.token, "PUT", cred, `{"secret":"`+c.secret+`"}`); r.status != http.StatusCreated {
			t.Fatalf("put: %d %s", r.status, r.body)
		}
		r := e.authDo(t, c.token, "POST", "/api/v1/tools/call", `{"name":"env.whoami","arguments":{}}`)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "key="+c.secret+" pid=") {
			t.Fatalf("call: %d %s; want key=%s", r.status, r.body, c.secret)
		}
		pid := string(r.body)[strings.Index(string(r.body), "pid=")+4:]
		pids[c.token] = pid[:strings.IndexFunc(pid, func(r rune) bool { return r < '0' || r > '9' })]
	}
	if pids[credAliceToken] == pids[credBobToken] {
		t.Fatalf("both callers ran in one child: %v", pids)
	}
}

// TestPerUserSessionLimits: one per_user server runs at most MaxUserSessions callers' sessions (one more caller
// gets 503 SERVER_BUSY, the callers with one are served), and a session closes after UserSessionIdle without a call,
// which makes room again.
func TestPerUserSessionLimits(t *testing.T) {
	cfg := actors.DefaultConfig()
	cfg.MaxUserSessions, cfg.UserSessionIdle = 1, 500*time.Millisecond
	st, sys, logger := startSystemWith(t, cfg)
	toks, err := auth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken+",bob:"+credBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	url, closed := echoAuthBackend(t)
	r := e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"per","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+url+`"},"credential_mode":"per_user","user_credential":{"header":"Authorization","prefix":"Bearer "}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	cred := base + "/servers/" + r.json(t)["id"].(string) + "/credentials/me"
	waitFor(t, "per.whoami routable", func() bool { return callable(sys, "per.whoami") })
	for _, c := range []struct{ token, secret string }{{credAliceToken, "alice-key"}, {credBobToken, "bob-key"}} {
		if r := e.authDo(t, c.token, "PUT", cred, `{"secret":"`+c.secret+`"}`); r.status != http.StatusCreated {
			t.Fatalf("put: %d %s", r.status, r.body)
		}
	}
	call := func(token string) response {
		return e.authDo(t, token, "POST", "/api/v1/tools/call", `{"name":"per.whoami","arguments":{}}`)
	}
	if r := call(credAliceToken); r.status != http.StatusOK || !strings.Contains(string(r.body), "auth=Bearer alice-key") {
		t.Fatalf("alice: %d %s", r.status, r.body)
	}
	wantError(t, call(credBobToken), http.StatusServiceUnavailable, "SERVER_BUSY")
	waitFor(t, "alice's idle session closed", func() bool { return slices.Contains(closed(), "Bearer alice-key") })
	if r := call(credBobToken); r.status != http.StatusOK || !strings.Contains(string(r.body), "auth=Bearer bob-key") {
		t.Fatalf("bob after alice's session closed: %d %s", r.status, r.body)
	}
}
