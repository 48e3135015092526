package integration_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
)

const (
	curAdmin = "admin-secret-token-0002"
	curBot   = "bot-client-token-00002"
	curFree  = "free-client-token-0002"
)

// TestCurationThroughREST: filters, overrides, profiles and token bindings through the REST API on the real actor
// system: hidden tools 404 (not 403), overrides renamed and redescribed in search and call, a bound client token
// sees its profile only, curation routes are admin-only and audited, bad input is a 422 with the field.
func TestCurationThroughREST(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+curAdmin, "bot:"+curBot+",free:"+curFree, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Curation: sys, Logger: logger, Tokens: toks})}
	url := goBackend(t)
	r := e.authDo(t, curAdmin, "POST", base+"/servers", `{"name":"go","transport_type":"HTTP","connection_config":{"base_url":"`+url+`"},"auto_connect":true}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
	waitFor("echo routable", func() bool { _, ok := sys.Routes().Tool("go.echo"); return ok })
	call := func(token, body string) response { return e.authDo(t, token, "POST", "/api/v1/tools/call", body) }

	// Curation routes are admin-only, reads included.
	for _, path := range []string{base + "/servers/" + id + "/tool-filter", base + "/profiles", base + "/servers/" + id + "/tools/changes"} {
		if r := e.authDo(t, curFree, "GET", path, ""); r.status != http.StatusForbidden {
			t.Errorf("client GET %s: %d", path, r.status)
		}
	}
	// Filter: bad input is a 422 naming the field; a deny list hides "fail" (404 TOOL_NOT_FOUND).
	r = e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tool-filter", `{"mode":"deny","patterns":["[x"]}`)
	if b := wantError(t, r, http.StatusUnprocessableEntity, apierror.CodeValidation); !strings.Contains(string(r.body), "patterns") {
		t.Fatalf("422 without the field: %v", b)
	}
	r = e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tool-filter", `{"mode":"deny","patterns":["fai*"]}`)
	if r.status != http.StatusOK || r.json(t)["mode"] != "deny" {
		t.Fatalf("put filter: %d %s", r.status, r.body)
	}
	waitFor("fail hidden", func() bool { _, ok := sys.Routes().Tool("go.fail"); return !ok })
	wantError(t, call(curFree, `{"name":"go.fail"}`), http.StatusNotFound, apierror.CodeToolNotFound)
	// A client token's tool listings show what clients are served: no hidden name. Admins see every stored tool.
	if r := e.authDo(t, curFree, "GET", base+"/servers/"+id+"/tools", ""); r.status != http.StatusOK ||
		strings.Contains(string(r.body), `"go.fail"`) || !strings.Contains(string(r.body), `"go.echo"`) {
		t.Fatalf("client listing shows a hidden tool (or lacks a served one): %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curFree, "GET", base+"/servers/"+id+"/tools/fail", ""), http.StatusNotFound, apierror.CodeToolNotFound)
	if r := e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/tools", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"go.fail"`) {
		t.Fatalf("admin listing lacks the hidden tool: %d %s", r.status, r.body)
	}
	if r := e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/tools/fail", ""); r.status != http.StatusOK {
		t.Fatalf("admin reads the hidden tool: %d %s", r.status, r.body)
	}

	// Override: exposed name and description; calling by the exposed name works, a clash is 409.
	r = e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tools/echo/override", `{"exposed_name":"say_back","description":"Repeat the arguments back"}`)
	if r.status != http.StatusOK {
		t.Fatalf("put override: %d %s", r.status, r.body)
	}
	waitFor("say_back routable", func() bool { _, ok := sys.Routes().Tool("say_back"); return ok })
	if r := call(curFree, `{"name":"say_back","arguments":{"a":1}}`); r.status != http.StatusOK {
		t.Fatalf("call by exposed name: %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tools/slow/override", `{"exposed_name":"say_back"}`), http.StatusConflict, apierror.CodeToolNameTaken)
	wantError(t, e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tools/slow/override", `{"exposed_name":"go__echo"}`), http.StatusConflict, apierror.CodeToolNameTaken)
	wantError(t, e.authDo(t, curAdmin, "PUT", base+"/servers/"+id+"/tools/slow/override", `{"exposed_name":"a.b"}`), http.StatusUnprocessableEntity, apierror.CodeValidation)
	r = e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/tools/overrides", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"say_back"`) {
		t.Fatalf("list overrides: %d %s", r.status, r.body)
	}
	// A client reads the overridden description, an admin the backend's own.
	if r := e.authDo(t, curFree, "GET", base+"/servers/"+id+"/tools/echo", ""); r.status != http.StatusOK ||
		r.json(t)["description"] != "Repeat the arguments back" {
		t.Fatalf("client tool detail is not what clients are served: %d %s", r.status, r.body)
	}
	if r := e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/tools/echo", ""); r.status != http.StatusOK ||
		r.json(t)["description"] == "Repeat the arguments back" {
		t.Fatalf("admin tool detail is not the backend's: %d %s", r.status, r.body)
	}
	waitFor("search finds the override text", func() bool {
		r := e.authDo(t, curFree, "POST", "/api/v1/search", `{"query":"repeat the arguments back","strategy":"direct"}`)
		var res struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		_ = json.Unmarshal(r.body, &res)
		return r.status == http.StatusOK && len(res.Tools) > 0 && res.Tools[0].Name == "go.echo"
	})

	// Profiles: bot is bound to "team" (whoami only); free is unbound.
	wantError(t, e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{"selectors":[{}]}`), http.StatusUnprocessableEntity, apierror.CodeValidation)
	r = e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{"selectors":[{"server":"go","tools":["whoami"]},{"server":"not-yet"}],"clients":["bot"]}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create profile: %d %s", r.status, r.body)
	}
	if v, ok := r.json(t)["token_budget"]; !ok || v != nil {
		t.Fatalf("a profile without a token budget shows token_budget %v (present %v)", v, ok)
	}
	// A token budget (issue 31): validated, stored, shown; the profile endpoint's tools/list uses it.
	teamBody := `"selectors":[{"server":"go","tools":["whoami"]},{"server":"not-yet"}],"clients":["bot"]`
	for _, bad := range []string{`-5`, `"8000"`, `1.5`, `1000000001`} {
		wantError(t, e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{`+teamBody+`,"token_budget":`+bad+`}`), http.StatusUnprocessableEntity, apierror.CodeValidation)
	}
	if r := e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{`+teamBody+`,"token_budget":8000}`); r.status != http.StatusOK || r.json(t)["token_budget"] != float64(8000) {
		t.Fatalf("set a token budget: %d %s", r.status, r.body)
	}
	if r := e.authDo(t, curAdmin, "GET", base+"/profiles/team", ""); r.status != http.StatusOK || r.json(t)["token_budget"] != float64(8000) {
		t.Fatalf("get the token budget: %d %s", r.status, r.body)
	}
	waitFor("profile built", func() bool { p, ok := sys.Routes().Profile("team"); return ok && p.Count() == 1 })
	if r := e.authDo(t, curAdmin, "GET", base+"/profiles/team/tools", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"go.whoami"`) {
		t.Fatalf("profile tools: %d %s", r.status, r.body)
	}
	if r := call(curBot, `{"name":"go.whoami"}`); r.status != http.StatusOK {
		t.Fatalf("bound token calls its profile's tool: %d %s", r.status, r.body)
	}
	wantError(t, call(curBot, `{"name":"say_back"}`), http.StatusNotFound, apierror.CodeToolNotFound)
	if r := e.authDo(t, curBot, "GET", base+"/servers/"+id+"/tools", ""); r.status != http.StatusOK ||
		r.json(t)["total"] != float64(1) || !strings.Contains(string(r.body), `"go.whoami"`) {
		t.Fatalf("bound token's listing is not its profile: %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curBot, "GET", base+"/servers/"+id+"/tools/echo", ""), http.StatusNotFound, apierror.CodeToolNotFound)
	wantError(t, call(curBot, `{"name":"go.whoami","profile":"other"}`), http.StatusNotFound, apierror.CodeProfileNotFound)
	if r := call(curFree, `{"name":"say_back","arguments":{},"profile":"team"}`); r.status != http.StatusNotFound {
		t.Fatalf("an unbound token asking a profile is restricted to it: %d %s", r.status, r.body)
	}
	r = e.authDo(t, curBot, "POST", "/api/v1/search", `{"query":"repeat the arguments back"}`)
	if r.status != http.StatusOK || strings.Contains(string(r.body), `"go.echo"`) {
		t.Fatalf("bound token search leaks other tools: %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curAdmin, "DELETE", base+"/profiles/team", ""), http.StatusConflict, apierror.CodeProfileInUse)
	wantError(t, e.authDo(t, curAdmin, "GET", base+"/profiles/nope", ""), http.StatusNotFound, apierror.CodeProfileNotFound)

	// Pinning is on by default; turning it off and on again is audited, changes list is empty.
	r = e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/pinning", "")
	if r.status != http.StatusOK || r.json(t)["enabled"] != true {
		t.Fatalf("pinning: %d %s", r.status, r.body)
	}
	r = e.authDo(t, curAdmin, "GET", base+"/servers/"+id+"/tools/changes", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"changes":[]`) {
		t.Fatalf("changes: %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curAdmin, "POST", base+"/servers/"+id+"/tools/changes/echo/approve", ""), http.StatusNotFound, apierror.CodeNotFound)

	// Audited.
	r = e.authDo(t, curAdmin, "GET", base+"/audit?limit=100", "")
	for _, ev := range []string{"server.tool_filter_updated", "tool.override_set", "profile.created"} {
		if !strings.Contains(string(r.body), ev) {
			t.Errorf("audit lacks %s: %s", ev, r.body)
		}
	}
	// Removing the override restores the tool's name.
	if r := e.authDo(t, curAdmin, "DELETE", base+"/servers/"+id+"/tools/echo/override", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete override: %d %s", r.status, r.body)
	}
	wantError(t, e.authDo(t, curAdmin, "DELETE", base+"/servers/"+id+"/tools/echo/override", ""), http.StatusNotFound, apierror.CodeNotFound)
}
