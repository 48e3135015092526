package integration_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// notREST are routes of the app that are not part of the REST API and so not in the OpenAPI document: the
// console's static files.
func notREST(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// TestOpenAPIMatchesRouter: the OpenAPI document served at /api/v1/openapi.json documents exactly the routes the
// app has (walking Fiber's router), and real answers of every route, against the real actor system, store and a
// real go-sdk backend, validate against the document's schema for their status (success and error answers alike).
// Every documented route must be exercised with a success answer here, so a new route needs a step below too.
func TestOpenAPIMatchesRouter(t *testing.T) {
	ctx := context.Background()
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+auditAdminToken, "ci:"+auditClientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	mgr := tasks.New(tasks.Config{Store: st, Node: "node-1"})
	t.Cleanup(mgr.Close)
	// OAuth to a protected backend (issue 28): a go-sdk backend behind oidc-provider.
	oauthLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	oauthResource := "http://" + oauthLn.Addr().String() + "/mcp"
	oauthRedirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	oauthtest.Backend(t, oauthLn, oauthResource, oauthtest.StartAS(t, oauthResource, oauthRedirect))
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: oauthRedirect,
		EndSession: sys.EndUserSession, Logger: logger})
	app := api.New(api.Deps{Store: st, Control: sys, Curation: sys, Logger: logger, Tokens: toks, Tasks: mgr, OAuth: flows,
		Metrics: metrics.New(func() metrics.Snapshot { return metrics.Snapshot{} })})
	e := &env{app: app}

	// 1. The router and the document list the same routes.
	var routes []string
	seen := map[string]bool{}
	for _, r := range app.GetRoutes(true) {
		if r.Method == "HEAD" || notREST(r.Path) { // Fiber adds HEAD to every GET
			continue
		}
		k := r.Method + " " + r.Path
		if !seen[k] {
			seen[k] = true
			routes = append(routes, k)
		}
	}
	slices.Sort(routes)
	documented := api.OperationKeys()
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in the OpenAPI document (add an entry to http/api/openapi.go operations)", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("the OpenAPI document has %s, which the app does not route", d)
		}
	}

	docResp := e.authDo(t, auditClientToken, "GET", api.OpenAPIPath, "")
	if docResp.status != http.StatusOK {
		t.Fatalf("openapi.json: %d %s", docResp.status, docResp.body)
	}
	doc := docResp.body
	var parsed struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}

	// 2. Real answers validate against the document.
	exercised := map[string]bool{}
	check := func(route, token, method, path, body string, want int) response {
		t.Helper()
		var r response
		if token == "" { // an open route (the OAuth callback: a browser without a token)
			r = e.do(t, method, path, body)
		} else {
			r = e.authDo(t, token, method, path, body)
		}
		if r.status != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
		}
		rm, _ := strings.CutPrefix(route, method+" ")
		op, ok := parsed.Paths[api.OpenAPIPathOf(rm)][strings.ToLower(method)]
		if !ok {
			t.Fatalf("%s: not documented", route)
		}
		resp, ok := op.Responses[strconv.Itoa(r.status)]
		if !ok {
			t.Fatalf("%s answered %d, which the document does not list: %s", route, r.status, r.body)
		}
		if r.status < 300 {
			exercised[route] = true
		}
		media, ok := resp.Content["application/json"]
		if !ok {
			if len(resp.Content) == 0 && len(r.body) > 0 {
				t.Errorf("%s %d: a body the document does not describe: %s", route, r.status, r.body)
			}
			return r
		}
		name := strings.TrimPrefix(media.Schema.Ref, "#/components/schemas/")
		schema, err := api.ComponentSchema(doc, name)
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		var v any
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatalf("%s %d: not JSON: %s", route, r.status, r.body)
		}
		if err := schema.Validate(v); err != nil {
			t.Errorf("%s %d: answer does not validate against %s: %v\n%s", route, r.status, name, err, r.body)
		}
		return r
	}
	const b = "/api/v1/aggregator"
	adm, cli := auditAdminToken, auditClientToken
	backend := goBackend(t)

	check("POST "+b+"/servers", adm, "POST", b+"/servers", `{"name":"bad"}`, 422)
	check("POST "+b+"/servers", "", "POST", b+"/servers", `{}`, 401)
	check("POST "+b+"/servers", cli, "POST", b+"/servers", `{}`, 403)
	r := check("POST "+b+"/servers", adm, "POST", b+"/servers",
		`{"name":"go","description":"a go-sdk backend","transport_type":"HTTP","connection_config":{"base_url":"`+backend+`","headers":{"X-Key":"s3cr3t"}}}`, 201)
	id := r.json(t)["id"].(string)
	check("POST "+b+"/servers", adm, "POST", b+"/servers", `{"name":"go","transport_type":"HTTP","connection_config":{"base_url":"`+backend+`"}}`, 409)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if callable(sys, "go.echo") { // CONNECTED, with its tools
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("go.echo never routable")
		}
		time.Sleep(30 * time.Millisecond)
	}
	check("GET "+b+"/servers", cli, "GET", b+"/servers", "", 200)
	check("GET "+b+"/servers", cli, "GET", b+"/servers?include_tools=true", "", 200)
	check("GET "+b+"/servers", cli, "GET", b+"/servers?limit=0", "", 422)
	check("GET "+b+"/servers/:id", cli, "GET", b+"/servers/"+id, "", 200)
	check("GET "+b+"/servers/:id", cli, "GET", b+"/servers/00000000-0000-0000-0000-000000000000", "", 404)
	check("GET "+b+"/servers/:id/tools", cli, "GET", b+"/servers/"+id+"/tools", "", 200)
	check("GET "+b+"/servers/:id/tools/:tool", cli, "GET", b+"/servers/"+id+"/tools/go.echo", "", 200)
	check("GET "+b+"/servers/:id/tools/:tool", cli, "GET", b+"/servers/"+id+"/tools/echo", "", 200)
	check("GET "+b+"/servers/:id/tools/:tool", cli, "GET", b+"/servers/"+id+"/tools/nope", "", 404)
	check("GET "+b+"/servers/:id/history", cli, "GET", b+"/servers/"+id+"/history", "", 200)
	check("GET "+b+"/servers/:id/prompts", cli, "GET", b+"/servers/"+id+"/prompts", "", 200)
	check("GET "+b+"/servers/:id/prompts", cli, "GET", b+"/servers/00000000-0000-0000-0000-000000000000/prompts", "", 404)
	check("GET "+b+"/servers/:id/resources", cli, "GET", b+"/servers/"+id+"/resources", "", 200)
	check("POST "+b+"/servers/:id/tools/refresh", adm, "POST", b+"/servers/"+id+"/tools/refresh", "", 202)
	check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.echo","arguments":{"x":1}}`, 200)
	check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.fail","arguments":{}}`, 502)
	check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"nope.nope"}`, 404)
	// Tasks.
	task := check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.echo","arguments":{"x":1},"task":{"ttl_ms":60000}}`, 202)
	taskPath := api.TasksPath + "/" + task.json(t)["task_id"].(string)
	check("GET "+api.TasksPath+"/:id", cli, "GET", taskPath+"?wait=30", "", 200)
	check("GET "+api.TasksPath+"/:id", cli, "GET", taskPath+"?wait=99", "", 422)
	check("GET "+api.TasksPath+"/:id", adm, "GET", api.TasksPath+"/nope", "", 404)
	check("DELETE "+api.TasksPath+"/:id", cli, "DELETE", taskPath, "", 409)
	check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.echo","task":{"ttl_ms":1}}`, 422)
	slow := check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.slow","task":{}}`, 202)
	check("DELETE "+api.TasksPath+"/:id", cli, "DELETE", api.TasksPath+"/"+slow.json(t)["task_id"].(string), "", 200)
	check("DELETE "+api.TasksPath+"/:id", cli, "DELETE", api.TasksPath+"/nope", "", 404)
	check("GET "+api.TasksPath, cli, "GET", api.TasksPath+"?limit=10", "", 200)
	check("GET "+api.TasksPath, adm, "GET", api.TasksPath+"?all=true", "", 200)
	check("GET "+api.TasksPath, cli, "GET", api.TasksPath+"?all=true", "", 403)
	check("GET "+api.TasksPath, cli, "GET", api.TasksPath+"?limit=0", "", 422)
	failed := check("POST /api/v1/tools/call", cli, "POST", "/api/v1/tools/call", `{"name":"go.fail","task":{}}`, 202)
	check("GET "+api.TasksPath+"/:id", cli, "GET", api.TasksPath+"/"+failed.json(t)["task_id"].(string)+"?wait=30", "", 200)
	check("POST /api/v1/search", cli, "POST", "/api/v1/search", `{"query":"echo","include_schemas":true}`, 200)
	check("POST /api/v1/search", cli, "POST", "/api/v1/search", `{"query":""}`, 422)
	check("GET /api/v1/skills", cli, "GET", "/api/v1/skills", "", 200)
	check("PATCH "+b+"/servers/:id", adm, "PATCH", b+"/servers/"+id, `{"description":"changed"}`, 200)
	check("PATCH "+b+"/servers/:id", adm, "PATCH", b+"/servers/"+id, `{}`, 422)
	check("POST "+b+"/servers/:id/disconnect", adm, "POST", b+"/servers/"+id+"/disconnect", `{"force":true}`, 200)
	// Two held changes, written as a discovery would, to approve one and reject the other (the server is
	// disconnected, so that no discovery decides again meanwhile).
	sid := b + "/servers/" + id
	set, err := st.ListToolPins(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range set.Pins {
		if p := &set.Pins[i]; p.OriginalName == "echo" || p.OriginalName == "whoami" {
			p.PendingHash, p.PendingDef, p.PendingSince = strings.Repeat("ab", 32), json.RawMessage(`{"name":"`+p.OriginalName+`","description":"changed"}`), &now
		}
	}
	if err := st.SaveToolPins(ctx, id, set.Version, set.Pins, nil); err != nil {
		t.Fatal(err)
	}
	check("GET "+b+"/servers/:id/tools/changes", adm, "GET", sid+"/tools/changes", "", 200)
	check("POST "+b+"/servers/:id/tools/changes/:tool/reject", adm, "POST", sid+"/tools/changes/whoami/reject", `{"hash":1}`, 422)
	check("POST "+b+"/servers/:id/tools/changes/:tool/reject", adm, "POST", sid+"/tools/changes/whoami/reject", `{"hash":"`+strings.Repeat("ab", 32)+`"}`, 200)
	check("POST "+b+"/servers/:id/tools/changes/:tool/approve", adm, "POST", sid+"/tools/changes/echo/approve", `{"hash":"`+strings.Repeat("cd", 32)+`"}`, 409)
	check("POST "+b+"/servers/:id/tools/changes/:tool/approve", adm, "POST", sid+"/tools/changes/echo/approve", "", 200)
	check("POST "+b+"/servers/:id/tools/changes/:tool/approve", adm, "POST", sid+"/tools/changes/fail/approve", "", 404)
	check("POST "+b+"/servers/:id/connect", adm, "POST", b+"/servers/"+id+"/connect", "", 200)
	check("GET "+b+"/state", cli, "GET", b+"/state", "", 200)
	check("GET "+b+"/health", "", "GET", b+"/health", "", 200)
	check("GET "+b+"/audit", adm, "GET", b+"/audit", "", 200)
	check("GET "+b+"/audit", cli, "GET", b+"/audit", "", 403)
	check("GET "+b+"/servers/:id/timeseries", cli, "GET", b+"/servers/"+id+"/timeseries", "", 200)
	check("GET "+b+"/servers/:id/timeseries", cli, "GET", b+"/servers/00000000-0000-0000-0000-000000000000/timeseries", "", 404)
	check("GET "+b+"/timeseries", cli, "GET", b+"/timeseries", "", 200)
	check("GET "+b+"/actors", adm, "GET", b+"/actors", "", 200)
	check("GET "+b+"/actors", cli, "GET", b+"/actors", "", 403)
	check("POST "+b+"/import", adm, "POST", b+"/import?dry_run=true", `{"mcpServers":{"x":{"command":"true"},"go":{"url":"`+backend+`"},"w":{"type":"ws"}}}`, 200)
	check("POST "+b+"/import", adm, "POST", b+"/import", `{"nothing":1}`, 422)
	check("GET "+b+"/export", cli, "GET", b+"/export", "", 200)
	check("GET "+b+"/export", cli, "GET", b+"/export?format=vscode", "", 200)
	// Tool curation.
	check("GET "+b+"/servers/:id/tool-filter", adm, "GET", sid+"/tool-filter", "", 200)
	check("GET "+b+"/servers/:id/tool-filter", cli, "GET", sid+"/tool-filter", "", 403)
	check("PUT "+b+"/servers/:id/tool-filter", adm, "PUT", sid+"/tool-filter", `{"mode":"deny","patterns":["slow"]}`, 200)
	check("PUT "+b+"/servers/:id/tool-filter", adm, "PUT", sid+"/tool-filter", `{"mode":"sometimes"}`, 422)
	check("GET "+b+"/servers/:id/pinning", adm, "GET", sid+"/pinning", "", 200)
	check("PUT "+b+"/servers/:id/pinning", adm, "PUT", sid+"/pinning", `{"pin_new_tools":"withhold"}`, 200)
	check("PUT "+b+"/servers/:id/tools/:tool/override", adm, "PUT", sid+"/tools/echo/override", `{"description":"Echo back","annotations":{"readOnlyHint":true}}`, 200)
	check("PUT "+b+"/servers/:id/tools/:tool/override", adm, "PUT", sid+"/tools/slow/override", `{"exposed_name":"go__whoami"}`, 409)
	check("PUT "+b+"/servers/:id/tools/:tool/override", adm, "PUT", sid+"/tools/slow/override", `{}`, 422)
	check("GET "+b+"/servers/:id/tools/overrides", adm, "GET", sid+"/tools/overrides", "", 200)
	check("DELETE "+b+"/servers/:id/tools/:tool/override", adm, "DELETE", sid+"/tools/echo/override", "", 204)
	check("DELETE "+b+"/servers/:id/tools/:tool/override", adm, "DELETE", sid+"/tools/echo/override", "", 404)
	check("PUT "+b+"/profiles/:name", adm, "PUT", b+"/profiles/team", `{"selectors":[{"server":"go","tools":["ec*"]}],"clients":["ci"]}`, 201)
	check("PUT "+b+"/profiles/:name", adm, "PUT", b+"/profiles/team", `{"description":"d","selectors":[{"server":"go"}],"clients":["ci"]}`, 200)
	check("PUT "+b+"/profiles/:name", adm, "PUT", b+"/profiles/team", `{"selectors":[{}]}`, 422)
	check("GET "+b+"/profiles", adm, "GET", b+"/profiles", "", 200)
	check("GET "+b+"/profiles/:name", adm, "GET", b+"/profiles/team", "", 200)
	check("GET "+b+"/profiles/:name", adm, "GET", b+"/profiles/nope", "", 404)
	check("GET "+b+"/profiles/:name/tools", adm, "GET", b+"/profiles/team/tools", "", 200)
	check("DELETE "+b+"/profiles/:name", adm, "DELETE", b+"/profiles/team", "", 409)
	check("PUT "+b+"/profiles/:name", adm, "PUT", b+"/profiles/team", `{"selectors":[{"server":"go"}]}`, 200)
	check("DELETE "+b+"/profiles/:name", adm, "DELETE", b+"/profiles/team", "", 204)
	check("DELETE "+b+"/profiles/:name", adm, "DELETE", b+"/profiles/team", "", 404)
	check("GET "+b+"/policy", adm, "GET", b+"/policy", "", 200)
	check("GET "+b+"/policy", cli, "GET", b+"/policy", "", 403)
	check("PUT "+b+"/policy", adm, "PUT", b+"/policy", `{"rules":[{"name":"r","effect":"deny","when":"subject == 'nobody'","description":"d"}]}`, 200)
	check("PUT "+b+"/policy", adm, "PUT", b+"/policy", `{"rules":[{"name":"r","effect":"deny","when":"subject =="}]}`, 422)
	check("GET "+b+"/policy", adm, "GET", b+"/policy", "", 200)
	check("PUT "+b+"/policy", adm, "PUT", b+"/policy", `{"default":"allow","rules":[]}`, 200)
	// Callers' own credentials (a per_user server that needs no connection for it).
	r = check("POST "+b+"/servers", adm, "POST", b+"/servers", `{"name":"per","transport_type":"STDIO","connection_config":{"command":"true"},`+
		`"auto_connect":false,"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`, 201)
	per := b + "/servers/" + r.json(t)["id"].(string)
	check("PUT "+b+"/servers/:id/credentials/me", cli, "PUT", per+"/credentials/me", `{"secret":"k1"}`, 201)
	check("PUT "+b+"/servers/:id/credentials/me", cli, "PUT", per+"/credentials/me", `{"secret":"k2"}`, 200)
	check("PUT "+b+"/servers/:id/credentials/me", cli, "PUT", per+"/credentials/me", `{"secret":""}`, 422)
	check("PUT "+b+"/servers/:id/credentials/me", cli, "PUT", sid+"/credentials/me", `{"secret":"k"}`, 409)
	check("GET "+b+"/servers/:id/credentials", adm, "GET", per+"/credentials", "", 200)
	check("GET "+b+"/servers/:id/credentials", cli, "GET", per+"/credentials", "", 403)
	check("DELETE "+b+"/servers/:id/credentials/me", cli, "DELETE", per+"/credentials/me", "", 204)
	check("DELETE "+b+"/servers/:id/credentials/me", cli, "DELETE", per+"/credentials/me", "", 404)
	check("PUT "+b+"/servers/:id/credentials/me", cli, "PUT", per+"/credentials/me", `{"secret":"k3"}`, 201)
	check("DELETE "+b+"/servers/:id/credentials/:subject", cli, "DELETE", per+"/credentials/token:ci", "", 403)
	check("DELETE "+b+"/servers/:id/credentials/:subject", adm, "DELETE", per+"/credentials/token:ci", "", 204)
	check("DELETE "+b+"/servers/:id/credentials/:subject", adm, "DELETE", per+"/credentials/token%3Aci", "", 404)
	// A caller's OAuth flow: start, the authorization server's redirect to the callback (303 is its success), the
	// caller's completion.
	r = check("POST "+b+"/servers", adm, "POST", b+"/servers", `{"name":"oauthed","transport_type":"HTTP","auto_connect":false,`+
		`"connection_config":{"base_url":"`+oauthResource+`"},"credential_mode":"per_user","user_credential":{"oauth":{}}}`, 201)
	oauthed := b + "/servers/" + r.json(t)["id"].(string)
	check("POST "+b+"/servers/:id/credentials/me/oauth", cli, "POST", sid+"/credentials/me/oauth", "", 409)
	authURL, _ := check("POST "+b+"/servers/:id/credentials/me/oauth", cli, "POST", oauthed+"/credentials/me/oauth", "", 200).json(t)["authorization_url"].(string)
	cb := oauthtest.Browse(t, authURL, oauthRedirect)
	check("GET "+b+"/oauth/callback", "", "GET", b+"/oauth/callback?"+cb.RawQuery, "", 303)
	exercised["GET "+b+"/oauth/callback"] = true
	check("GET "+b+"/oauth/callback", "", "GET", b+"/oauth/callback?"+cb.RawQuery, "", 404)
	check("POST "+b+"/oauth/complete", cli, "POST", b+"/oauth/complete", `{"state":1}`, 422)
	check("POST "+b+"/oauth/complete", cli, "POST", b+"/oauth/complete", `{"state":"`+cb.Query().Get("state")+`"}`, 201)
	check("POST "+b+"/oauth/complete", cli, "POST", b+"/oauth/complete", `{"state":"`+cb.Query().Get("state")+`"}`, 404)
	check("GET "+api.LivePath, "", "GET", api.LivePath, "", 200)
	check("GET "+api.ReadyPath, "", "GET", api.ReadyPath, "", 200)
	check("GET "+api.WhoamiPath, cli, "GET", api.WhoamiPath, "", 200)
	check("GET "+api.OpenAPIPath, cli, "GET", api.OpenAPIPath, "", 200)
	check("GET /metrics", cli, "GET", "/metrics", "", 200)
	check("DELETE "+b+"/servers/:id", adm, "DELETE", b+"/servers/"+id, "", 204)
	check("DELETE "+b+"/servers/:id", adm, "DELETE", b+"/servers/"+id, "", 404)

	for _, d := range documented {
		if !exercised[d] {
			t.Errorf("%s has no success answer checked here: add a step", d)
		}
	}
}

// TestOpenAPIDocumentIsValid: the served document is a valid OpenAPI 3.1 document by the official schema, and its
// references resolve (npm's @seriousme/openapi-schema-validator, testdata/peers/openapi-validate.mjs).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	script := filepath.Join(peertest.RepoRoot(t), "testdata", "peers", "openapi-validate.mjs")
	if _, err := os.Stat(filepath.Join(peertest.RepoRoot(t), "testdata", "peers", "node_modules", "@seriousme", "openapi-schema-validator")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("@seriousme/openapi-schema-validator is not installed: run `make peers`")
		}
		t.Skip("@seriousme/openapi-schema-validator is not installed: run `make peers`")
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Logger: slog.New(slog.DiscardHandler), Config: actors.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	e := &env{app: api.New(api.Deps{Store: st, Control: sys})}
	r := e.do(t, "GET", api.OpenAPIPath, "")
	if r.status != http.StatusOK {
		t.Fatalf("openapi.json: %d", r.status)
	}
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, r.body, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(peertest.Node(t), script, file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid 3.1") {
		t.Fatalf("the OpenAPI document is not valid (%v):\n%s", err, out)
	}
}
