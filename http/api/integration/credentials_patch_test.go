package integration_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPatchCredentialMode: PATCH switches a live server between shared and per_user (issue 28) against a real
// go-sdk backend that answers the Authorization it got: shared calls carry the registration's header; per_user
// calls need the caller's own secret and carry it, a new user_credential ends the caller's session and the next one
// carries the new form; back to shared, the caller's session is closed at the backend, calls carry the
// registration's header again and the callers' stored secrets are gone. Bad bodies are 422 and change nothing.
func TestPatchCredentialMode(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+credAdminToken, "alice:"+credAliceToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	url, closed := echoAuthBackend(t)
	r := e.authDo(t, credAdminToken, "POST", base+"/servers", `{"name":"sw","transport_type":"HTTP",`+
		`"connection_config":{"base_url":"`+url+`","headers":{"Authorization":"Bearer discovery"}}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	srvPath, cred := base+"/servers/"+id, base+"/servers/"+id+"/credentials/me"
	waitFor(t, "sw.whoami routable", func() bool { return callable(sys, "sw.whoami") })
	call := func() response {
		t.Helper()
		return e.authDo(t, credAliceToken, "POST", "/api/v1/tools/call", `{"name":"sw.whoami","arguments":{}}`)
	}
	wantAuth := func(want string) {
		t.Helper()
		r := call()
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `auth=`+want+`"`) {
			t.Fatalf("call: %d %s; want auth=%s", r.status, r.body, want)
		}
	}
	// A PATCH answers the stored row; the server's actor and the routing table reload it right after (as for
	// every PATCH): the calls follow once both have.
	switched := func(perUser bool) {
		t.Helper()
		waitFor(t, "the routing table has the new credential_mode", func() bool {
			srv, ok := sys.Routes().Server(id)
			return ok && srv.PerUser == perUser
		})
	}
	eventually := func(what string, ok func(r response) bool) {
		t.Helper()
		var last response
		waitFor(t, what, func() bool { last = call(); return ok(last) })
	}
	patch := func(body string, want int) map[string]any {
		t.Helper()
		r := e.authDo(t, credAdminToken, "PATCH", srvPath, body)
		if r.status != want {
			t.Fatalf("PATCH %s: %d, want %d: %s", body, r.status, want, r.body)
		}
		if want != http.StatusOK {
			return nil
		}
		return r.json(t)
	}
	wantAuth("Bearer discovery")

	// Bad input on a shared HTTP server: 422, nothing changed.
	for _, body := range []string{
		`{"credential_mode":"per_user"}`,
		`{"credential_mode":"everyone"}`,
		`{"credential_mode":42}`,
		`{"user_credential":{"header":"Authorization"}}`,
		`{"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`,
		`{"credential_mode":"per_user","user_credential":{"header":"Content-Type"}}`,
		`{"credential_mode":"per_user","user_credential":{"header":"Authorization","extra":1}}`,
		`{"credential_mode":"shared","user_credential":{"header":"Authorization"}}`,
	} {
		patch(body, http.StatusUnprocessableEntity)
	}
	if got := patch(`{"description":"still shared"}`, http.StatusOK); got["credential_mode"] != "shared" {
		t.Fatalf("after refused patches: %v", got)
	}
	wantAuth("Bearer discovery")

	// To per_user: the caller needs their own secret, and their calls carry it.
	got := patch(`{"credential_mode":"per_user","user_credential":{"header":"Authorization","prefix":"Bearer "}}`, http.StatusOK)
	if got["credential_mode"] != "per_user" || got["user_credential"].(map[string]any)["header"] != "Authorization" {
		t.Fatalf("to per_user: %v", got)
	}
	switched(true)
	eventually("calls need the caller's own credential", func(r response) bool {
		return r.status == http.StatusForbidden && strings.Contains(string(r.body), "CREDENTIAL_REQUIRED")
	})
	if r := e.authDo(t, credAliceToken, "PUT", cred, `{"secret":"alice-key"}`); r.status != http.StatusCreated {
		t.Fatalf("alice put: %d %s", r.status, r.body)
	}
	wantAuth("Bearer alice-key")

	// Another slot of a per_user server: alice's session ends; her next call carries the new form.
	patch(`{"user_credential":{"header":"Authorization","prefix":"Token "}}`, http.StatusOK)
	waitFor(t, "alice's first session closed at the backend", func() bool { return slices.Contains(closed(), "Bearer alice-key") })
	eventually("alice's calls carry the new form", func(r response) bool {
		return r.status == http.StatusOK && strings.Contains(string(r.body), `auth=Token alice-key"`)
	})
	// per_user again without a slot keeps the one it has; env on an HTTP server is still refused.
	if got := patch(`{"credential_mode":"per_user"}`, http.StatusOK); got["user_credential"].(map[string]any)["prefix"] != "Token " {
		t.Fatalf("per_user again: %v", got)
	}
	patch(`{"user_credential":{"env":"API_KEY"}}`, http.StatusUnprocessableEntity)
	patch(`{"credential_mode":null}`, http.StatusUnprocessableEntity)

	// Back to shared: alice's session is closed, her secret is gone, calls use the registration's header.
	got = patch(`{"credential_mode":"shared"}`, http.StatusOK)
	if got["credential_mode"] != "shared" || got["user_credential"] != nil {
		t.Fatalf("to shared: %v", got)
	}
	if _, err := st.GetUserSecret(t.Context(), id, "token:alice"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("alice's secret after the switch to shared: %v", err)
	}
	switched(false)
	waitFor(t, "alice's session closed at the backend", func() bool { return slices.Contains(closed(), "Token alice-key") })
	eventually("calls carry the registration's header again", func(r response) bool {
		return r.status == http.StatusOK && strings.Contains(string(r.body), `auth=Bearer discovery"`)
	})
	if r := e.authDo(t, credAliceToken, "PUT", cred, `{"secret":"x"}`); r.status != http.StatusConflict {
		t.Fatalf("put on a shared server: %d %s", r.status, r.body)
	}
}
