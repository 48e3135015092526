package integration_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
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
