package api

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/ui"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

const (
	testAdminToken  = "admin-secret-token-0001"
	testClientToken = "client-secret-token-0001"
)

// newAuthEnv is newEnv with tokens (admin "ops", client "ci"), /metrics, and an optional limiter.
func newAuthEnv(t *testing.T, limiter *auth.Limiter, open ...bool) *testEnv {
	t.Helper()
	toks, err := auth.Parse("ops:"+testAdminToken, "ci:"+testClientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	metricsOpen := len(open) > 0 && open[0]
	e := newEnv(t)
	e.app = New(Deps{Store: e.store, Control: e.control, Tokens: toks, Limiter: limiter, Config: Config{MetricsOpen: metricsOpen},
		Metrics: metrics.New(func() metrics.Snapshot { return metrics.Snapshot{} }),
		Logger:  slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return e
}

// adminRoutes are the routes that need the admin scope: every route not listed needs client (or nothing for
// /health). A route added later is checked against auth.Policy.
var adminRoutes = map[string]bool{
	"POST " + base + "/servers":                                 true,
	"PATCH " + base + "/servers/:id":                            true,
	"DELETE " + base + "/servers/:id":                           true,
	"POST " + base + "/servers/:id/connect":                     true,
	"POST " + base + "/servers/:id/disconnect":                  true,
	"POST " + base + "/servers/:id/tools/refresh":               true,
	"GET " + base + "/audit":                                    true,
	"GET " + base + "/servers/:id/tool-filter":                  true,
	"PUT " + base + "/servers/:id/tool-filter":                  true,
	"GET " + base + "/servers/:id/pinning":                      true,
	"PUT " + base + "/servers/:id/pinning":                      true,
	"GET " + base + "/servers/:id/tools/overrides":              true,
	"GET " + base + "/servers/:id/tools/changes":                true,
	"POST " + base + "/servers/:id/tools/changes/:tool/approve": true,
	"POST " + base + "/servers/:id/tools/changes/:tool/reject":  true,
	"PUT " + base + "/servers/:id/tools/:tool/override":         true,
	"DELETE " + base + "/servers/:id/tools/:tool/override":      true,
	"GET " + base + "/profiles":                                 true,
	"GET " + base + "/profiles/:name":                           true,
	"PUT " + base + "/profiles/:name":                           true,
	"DELETE " + base + "/profiles/:name":                        true,
	"GET " + base + "/profiles/:name/tools":                     true,
	"GET " + base + "/servers/:id/prompts":                      false,
	"GET " + base + "/servers/:id/resources":                    false,
	"HEAD " + base + "/audit":                                   true,
	"GET " + base + "/servers":                                  false,
	"GET " + base + "/servers/:id":                              false,
	"GET " + base + "/servers/:id/tools":                        false,
	"GET " + base + "/servers/:id/history":                      false,
	"GET " + base + "/state":                                    false,
	"GET " + base + "/health":                                   false, // open: checked apart
	"HEAD " + base + "/health":                                  false,
	"GET /livez":                                                false, // open probes
	"HEAD /livez":                                               false,
	"GET /readyz":                                               false,
	"HEAD /readyz":                                              false,
	"POST /api/v1/tools/call":                                   false,
	"GET " + TasksPath:                                          false,
	"HEAD " + TasksPath:                                         false,
	"GET " + TasksPath + "/:id":                                 false,
	"HEAD " + TasksPath + "/:id":                                false,
	"DELETE " + TasksPath + "/:id":                              false,
	"POST /api/v1/search":                                       false,
	"GET /api/v1/skills":                                        false,
	"HEAD /api/v1/skills":                                       false,
	"GET /metrics":                                              false,
	"HEAD " + base + "/servers":                                 false,
	"HEAD " + base + "/servers/:id":                             false,
	"HEAD " + base + "/servers/:id/tools":                       false,
	"HEAD " + base + "/servers/:id/history":                     false,
	"HEAD " + base + "/state":                                   false,
	"HEAD /metrics":                                             false,
	"POST " + base + "/import":                                  true,
	"GET " + base + "/export":                                   false,
	"HEAD " + base + "/export":                                  false,
	"GET " + base + "/servers/:id/tools/:tool":                  false,
	"HEAD " + base + "/servers/:id/tools/:tool":                 false,
	"GET " + WhoamiPath:                                         false,
	"HEAD " + WhoamiPath:                                        false,
	"GET " + OpenAPIPath:                                        false,
	"HEAD " + OpenAPIPath:                                       false,
	"GET " + ui.Prefix + "/*":                                   false,
	"POST " + base + "/servers/:id/credentials/me/oauth":        false, // the caller's own OAuth flow
	"POST " + base + "/oauth/complete":                          false,
	"GET " + base + "/oauth/callback":                           false, // open: the authorization server's redirect
	"HEAD " + base + "/oauth/callback":                          false,
	"HEAD " + ui.Prefix + "/*":                                  false,
}

// TestAuthEveryRoute enumerates the app's routes (so routes added later are covered): no token and a wrong token
// are 401 UNAUTHORIZED with WWW-Authenticate, a client token on an admin route is 403 FORBIDDEN, the right token is
// never 401/403. Health stays open. Every variant of the path Fiber routes the same way gets the same decision.
func TestAuthEveryRoute(t *testing.T) {
	e := newAuthEnv(t, nil)
	srv := e.store.put(persistence.Server{Name: "one", Status: persistence.StatusConnected})
	seen := 0
	for _, r := range e.app.GetRoutes(true) {
		key := r.Method + " " + r.Path
		path := strings.ReplaceAll(r.Path, ":id", srv.ID)
		admin, known := adminRoutes[key]
		if !known {
			admin = auth.Policy{}.Required(r.Method, path) == auth.ScopeAdmin
			t.Logf("route %s not in the test's table: policy says admin=%v", key, admin)
		}
		open := r.Path == base+"/health" || r.Path == LivePath || r.Path == ReadyPath || r.Path == base+"/oauth/callback" ||
			(strings.HasPrefix(r.Path, ui.Prefix+"/") && (r.Method == http.MethodGet || r.Method == http.MethodHead)) // the console's files
		if got := (auth.Policy{}).Required(r.Method, path) == auth.ScopeAdmin; got != admin && !open {
			t.Errorf("%s: policy admin=%v, the table says %v", key, got, admin)
		}
		seen++
		body := ""
		if r.Method == http.MethodPost || r.Method == http.MethodPatch {
			body = `{}`
		}
		t.Run(key, func(t *testing.T) {
			variants := []string{path, strings.ToUpper(path), path + "/"}
			for _, p := range variants {
				if open {
					if res := e.do(t, r.Method, p, body); res.status == 401 || res.status == 403 {
						t.Fatalf("health and probes must stay open: %d", res.status)
					}
					continue
				}
				for _, authz := range []string{"", "Bearer wrong-token-0123456789", "Basic " + testAdminToken, testAdminToken, "Bearer " + testAdminToken + "x"} {
					var res response
					if authz == "" {
						res = e.do(t, r.Method, p, body)
					} else {
						res = e.do(t, r.Method, p, body, "Authorization: "+authz)
					}
					if res.status != http.StatusUnauthorized || !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("%s %s with %q: status %d, want 401 with WWW-Authenticate; body %s", r.Method, p, authz, res.status, res.body)
					}
					if r.Method != http.MethodHead {
						wantError(t, res, http.StatusUnauthorized, apierror.CodeUnauthorized)
					}
				}
				res := e.do(t, r.Method, p, body, "Authorization: Bearer "+testClientToken)
				if admin {
					if res.status != http.StatusForbidden {
						t.Fatalf("client token on admin route %s %s: %d %s", r.Method, p, res.status, res.body)
					}
					if r.Method != http.MethodHead {
						wantError(t, res, http.StatusForbidden, apierror.CodeForbidden)
					}
				} else if res.status == 401 || res.status == 403 {
					t.Fatalf("client token on client route %s %s: %d %s", r.Method, p, res.status, res.body)
				}
				res = e.do(t, r.Method, p, body, "Authorization: bearer "+testAdminToken)
				if res.status == 401 || res.status == 403 {
					t.Fatalf("admin token on %s %s: %d %s", r.Method, p, res.status, res.body)
				}
			}
		})
	}
	if seen < 16 {
		t.Fatalf("only %d routes enumerated", seen)
	}
	// An unknown path is 401 without a token (the routes are not revealed), 404 with one.
	wantError(t, e.do(t, "GET", base+"/nope", ""), http.StatusUnauthorized, apierror.CodeUnauthorized)
	wantError(t, e.do(t, "GET", base+"/nope", "", "Authorization: Bearer "+testClientToken), http.StatusNotFound, apierror.CodeNotFound)
}

// TestAuthOffIsAnonymousAdmin: with no token every route works and the audit actor is anonymous.
func TestAuthOffIsAnonymousAdmin(t *testing.T) {
	e := newEnv(t)
	res := e.do(t, "POST", base+"/servers", sseBody)
	if res.status != http.StatusCreated {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	if calls := e.control.Calls(); len(calls) != 1 || calls[0].req.Actor != anonymousActor {
		t.Fatalf("actor %+v", calls)
	}
	if recs := e.store.auditRecords(); len(recs) != 1 || recs[0].Actor != anonymousActor || recs[0].IPAddress == "" {
		t.Fatalf("audit %+v", recs)
	}
	if res := e.do(t, "GET", base+"/audit", ""); res.status != http.StatusOK {
		t.Fatalf("audit: %d", res.status)
	}
}

// TestRateLimitToolCalls: a client's burst exhausted answers 429 RATE_LIMITED with Retry-After; other clients are
// not affected; other routes are not limited.
func TestRateLimitToolCalls(t *testing.T) {
	e := newAuthEnv(t, auth.NewLimiter(0.5, 3)) // 1 call every 2 s, burst 3
	call := func(token string) response {
		return e.do(t, "POST", "/api/v1/tools/call", `{"name":"nope.tool"}`, "Authorization: Bearer "+token)
	}
	for i := 0; i < 3; i++ {
		if res := call(testClientToken); res.status != http.StatusNotFound {
			t.Fatalf("call %d in the burst: %d %s", i, res.status, res.body)
		}
	}
	res := call(testClientToken)
	m := wantError(t, res, http.StatusTooManyRequests, apierror.CodeRateLimited)
	ra, err := strconv.Atoi(res.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q", res.header.Get("Retry-After"))
	}
	if ctx, _ := m["context"].(map[string]any); ctx["retry_after_seconds"] != float64(ra) {
		t.Fatalf("context %v", m["context"])
	}
	// Another client has its own bucket.
	for i := 0; i < 3; i++ {
		if res := call(testAdminToken); res.status != http.StatusNotFound {
			t.Fatalf("admin call %d: %d %s", i, res.status, res.body)
		}
	}
	// Reads are not rate limited.
	for i := 0; i < 5; i++ {
		if res := e.do(t, "GET", base+"/servers", "", "Authorization: Bearer "+testClientToken); res.status != http.StatusOK {
			t.Fatalf("list: %d", res.status)
		}
	}
}

// TestRESTAuditRecords: each admin operation adds its record with the token's name as actor; reads add none;
// GET /audit pages newest first.
func TestRESTAuditRecords(t *testing.T) {
	e := newAuthEnv(t, nil)
	admin := "Authorization: Bearer " + testAdminToken
	res := e.do(t, "POST", base+"/servers", sseBody, admin)
	if res.status != http.StatusCreated {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	id := res.json(t)["id"].(string)
	for _, step := range []struct{ method, path, body string }{
		{"PATCH", base + "/servers/" + id, `{"name":"renamed","connection_config":{"url":"https://x.example.com/sse","headers":{"Authorization":"Bearer s3cr3t"}}}`},
		{"POST", base + "/servers/" + id + "/connect", ""},
		{"POST", base + "/servers/" + id + "/disconnect", `{"force":true}`},
		{"POST", base + "/servers/" + id + "/tools/refresh", ""},
		{"GET", base + "/servers/" + id, ""},
		{"DELETE", base + "/servers/" + id, ""},
	} {
		if res := e.do(t, step.method, step.path, step.body, admin); res.status >= 300 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, res.status, res.body)
		}
	}
	want := []string{audit.ServerRemoved, audit.ToolsRefreshed, audit.ServerDisconnected, audit.ServerConnected, audit.ServerUpdated, audit.ServerRegistered}
	res = e.do(t, "GET", base+"/audit", "", admin)
	if res.status != http.StatusOK {
		t.Fatalf("audit: %d %s", res.status, res.body)
	}
	m := res.json(t)
	wantKeys(t, m, "records", "total", "limit", "offset")
	recs := m["records"].([]any)
	if m["total"] != float64(len(want)) || len(recs) != len(want) {
		t.Fatalf("audit %s", res.body)
	}
	for i, r := range recs {
		rec := r.(map[string]any)
		wantKeys(t, rec, "id", "event", "server_id", "server_name", "actor", "ip_address", "timestamp", "details")
		if rec["event"] != want[i] || rec["server_id"] != id || rec["actor"] != "ops" || rec["ip_address"] == "" {
			t.Errorf("record %d: %v, want %s", i, rec, want[i])
		}
		wantTime(t, rec["timestamp"])
	}
	if recs[0].(map[string]any)["server_name"] != "renamed" || recs[5].(map[string]any)["server_name"] != "github-mcp" {
		t.Errorf("server names: %s", res.body)
	}
	if strings.Contains(string(res.body), "s3cr3t") || strings.Contains(string(res.body), "GITHUB_TOKEN") {
		t.Fatalf("audit details leak connection_config: %s", res.body)
	}
	upd := recs[4].(map[string]any)["details"].(map[string]any)
	if upd["previous_name"] != "github-mcp" || len(upd["fields"].([]any)) != 2 {
		t.Errorf("update details %v", upd)
	}
	// Paging.
	res = e.do(t, "GET", base+"/audit?limit=2&offset=1", "", admin)
	page := res.json(t)
	prs := page["records"].([]any)
	if page["total"] != float64(6) || page["limit"] != float64(2) || page["offset"] != float64(1) || len(prs) != 2 ||
		prs[0].(map[string]any)["event"] != want[1] || prs[1].(map[string]any)["event"] != want[2] {
		t.Fatalf("page %s", res.body)
	}
	fieldErrors(t, e.do(t, "GET", base+"/audit?limit=0", "", admin))
	fieldErrors(t, e.do(t, "GET", base+"/audit?offset=-1", "", admin))

	// Failed operations leave no record.
	n := len(e.store.auditRecords())
	e.do(t, "POST", base+"/servers/"+id+"/connect", "", admin) // 404: gone
	e.do(t, "POST", base+"/servers", `{"name":"Bad"}`, admin)  // 422
	if len(e.store.auditRecords()) != n {
		t.Fatalf("failed operations were audited")
	}
}

// TestRefreshUnavailableNotAudited: a refused refresh (503) is not an admin operation that happened.
func TestRefreshUnavailableNotAudited(t *testing.T) {
	e := newAuthEnv(t, nil)
	srv := e.store.put(persistence.Server{Name: "down", Status: persistence.StatusError})
	e.control.refresh = &routing.UnavailableError{Server: routing.ServerEntry{ID: srv.ID, Name: srv.Name, Status: srv.Status}}
	res := e.do(t, "POST", base+"/servers/"+srv.ID+"/tools/refresh", "", "Authorization: Bearer "+testAdminToken)
	if res.status != fiber.StatusServiceUnavailable || len(e.store.auditRecords()) != 0 {
		t.Fatalf("%d %v", res.status, e.store.auditRecords())
	}
}

// TestMetricsOpen: /metrics needs a token unless MCP_AGGREGATOR_METRICS_OPEN; the API still does.
func TestMetricsOpen(t *testing.T) {
	closed := newAuthEnv(t, nil)
	wantError(t, closed.do(t, "GET", "/metrics", ""), http.StatusUnauthorized, apierror.CodeUnauthorized)
	if res := closed.do(t, "GET", "/metrics", "", "Authorization: Bearer "+testClientToken); res.status != http.StatusOK {
		t.Fatalf("metrics with a client token: %d", res.status)
	}
	open := newAuthEnv(t, nil, true)
	if res := open.do(t, "GET", "/metrics", ""); res.status != http.StatusOK {
		t.Fatalf("open metrics: %d", res.status)
	}
	wantError(t, open.do(t, "GET", base+"/servers", ""), http.StatusUnauthorized, apierror.CodeUnauthorized)
}
