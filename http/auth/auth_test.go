package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcpgw/aggregator/internal/errcode"
)

const (
	adminTok  = "admin-token-0123456789"
	clientTok = "client-token-0123456789"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	file := writeFile(t, "# tokens\n\nadmin ops "+strings.Repeat("a", 20)+"\n  client  ci-bot   "+strings.Repeat("b", 16)+"  \n# end\n")
	cases := []struct {
		name          string
		admin, client string
		file          string
		wantErr       []string // substrings of the error
		wantNames     map[string]Scope
	}{
		{name: "nothing: auth off", wantNames: map[string]Scope{}},
		{name: "named and unnamed env entries", admin: "ops:" + adminTok + ", ,", client: clientTok,
			wantNames: map[string]Scope{"ops": ScopeAdmin, defaultName(clientTok): ScopeClient}},
		{name: "file", file: file, wantNames: map[string]Scope{"ops": ScopeAdmin, "ci-bot": ScopeClient}},
		{name: "env and file together", admin: "boss:" + adminTok, file: file,
			wantNames: map[string]Scope{"boss": ScopeAdmin, "ops": ScopeAdmin, "ci-bot": ScopeClient}},
		{name: "short token refused", admin: "ops:short", wantErr: []string{"MCP_AGGREGATOR_ADMIN_TOKENS entry 1", "shorter than 16"}},
		{name: "15 characters refused", client: strings.Repeat("x", 15), wantErr: []string{"shorter than 16"}},
		{name: "space in token", admin: "ops:" + adminTok[:10] + " " + adminTok[10:], wantErr: []string{"printable ASCII"}},
		{name: "bad name", admin: "bad name!:" + adminTok, wantErr: []string{"token name must match"}},
		{name: "empty name", admin: ":" + adminTok, wantErr: []string{"empty token name"}},
		{name: "duplicate token across scopes", admin: adminTok, client: "other:" + adminTok, wantErr: []string{"same token"}},
		{name: "duplicate name", admin: "x:" + adminTok, client: "x:" + clientTok, wantErr: []string{`name "x" is already used`}},
		{name: "file: bad scope and field count", file: writeFile(t, "root ops "+adminTok+"\nadmin "+adminTok+"\n"),
			wantErr: []string{"line 1: scope must be admin or client", "line 2: want \"scope name token\""}},
		{name: "file missing", file: filepath.Join(t.TempDir(), "nope"), wantErr: []string{"MCP_AGGREGATOR_TOKENS_FILE"}},
		{name: "every problem at once", admin: "a:short", client: "b:short", wantErr: []string{"ADMIN_TOKENS entry 1", "CLIENT_TOKENS entry 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			toks, err := Parse(c.admin, c.client, c.file)
			if len(c.wantErr) > 0 {
				if err == nil {
					t.Fatal("want an error")
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				for _, secret := range []string{adminTok, clientTok} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error leaks a token: %q", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Scope{}
			for _, tok := range toks.list {
				got[tok.name] = tok.scope
			}
			if len(got) != len(c.wantNames) {
				t.Fatalf("tokens %v, want %v", got, c.wantNames)
			}
			for n, s := range c.wantNames {
				if got[n] != s {
					t.Errorf("token %s: scope %v, want %v (all %v)", n, got[n], s, got)
				}
			}
			if toks.Enabled() != (len(c.wantNames) > 0) {
				t.Errorf("Enabled() = %v", toks.Enabled())
			}
		})
	}
}

func defaultName(tok string) string {
	toks, err := Parse("", tok, "")
	if err != nil || len(toks.list) != 1 {
		panic(err)
	}
	return toks.list[0].name
}

func TestDefaultNameIsShortHash(t *testing.T) {
	n := defaultName(clientTok)
	if !strings.HasPrefix(n, "token-") || len(n) != len("token-")+8 || strings.Contains(n, clientTok[:8]) {
		t.Fatalf("default name %q", n)
	}
}

func TestAuthenticate(t *testing.T) {
	var many []string
	for i := 0; i < 20; i++ {
		many = append(many, "c"+string(rune('a'+i))+":"+strings.Repeat(string(rune('a'+i)), 16)+"-client")
	}
	toks, err := Parse("ops:"+adminTok, clientTok+","+strings.Join(many, ","), "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		presented string
		ok        bool
		name      string
		scope     Scope
	}{
		{adminTok, true, "ops", ScopeAdmin},
		{clientTok, true, defaultName(clientTok), ScopeClient},
		{strings.Repeat("a", 16) + "-client", true, "ca", ScopeClient},
		{strings.Repeat("t", 16) + "-client", true, "ct", ScopeClient}, // the last one
		{"", false, "", 0},
		{adminTok[:len(adminTok)-1], false, "", 0},
		{adminTok + "x", false, "", 0},
		{strings.ToUpper(adminTok), false, "", 0},
		{"ops:" + adminTok, false, "", 0},
	}
	for _, c := range cases {
		id, ok := toks.Authenticate(c.presented)
		if ok != c.ok || id.Name != c.name || id.Scope != c.scope {
			t.Errorf("Authenticate(%q) = %+v %v, want %s %v %v", c.presented, id, ok, c.name, c.scope, c.ok)
		}
	}
	var off *Tokens
	if _, ok := off.Authenticate(adminTok); ok || off.Enabled() {
		t.Fatal("nil tokens authenticate nobody and are off")
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]string{
		"Bearer abc":      "abc",
		"bearer abc":      "abc",
		"BEARER   abc  ":  "abc",
		"Basic abc":       "",
		"Bearer":          "",
		"Bearer ":         "",
		"Bearer a b":      "",
		"abc":             "",
		"":                "",
		"Bearer\tabc":     "",
		"Token abc":       "",
		"Bearerabc":       "",
		" Bearer  tok123": "tok123",
	}
	for h, want := range cases {
		got, ok := BearerToken(h)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q %v, want %q", h, got, ok, want)
		}
	}
}

func TestPolicy(t *testing.T) {
	closed, open := Policy{}, Policy{MetricsOpen: true}
	cases := []struct {
		method, path string
		want         Scope
		wantOpen     Scope // with MetricsOpen
	}{
		{"GET", "/api/v1/aggregator/health", ScopeNone, ScopeNone},
		{"GET", "/API/V1/Aggregator/Health/", ScopeNone, ScopeNone},
		{"GET", "/metrics", ScopeClient, ScopeNone},
		{"GET", "/metrics/", ScopeClient, ScopeNone},
		{"GET", "/api/v1/aggregator/servers", ScopeClient, ScopeClient},
		{"HEAD", "/api/v1/aggregator/servers", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/servers/1f0c/tools", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/servers/1f0c/history", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/state", ScopeClient, ScopeClient},
		{"POST", "/api/v1/tools/call", ScopeClient, ScopeClient},
		{"POST", "/API/V1/TOOLS/CALL/", ScopeClient, ScopeClient},
		{"POST", "/api/v1/search", ScopeClient, ScopeClient},
		{"POST", "/api/v1/aggregator/tools/search", ScopeClient, ScopeClient},
		{"POST", "/api/v1/aggregator/servers", ScopeAdmin, ScopeAdmin},
		{"POST", "/Api/V1/Aggregator/Servers//", ScopeAdmin, ScopeAdmin},
		{"PATCH", "/api/v1/aggregator/servers/1f0c", ScopeAdmin, ScopeAdmin},
		{"DELETE", "/api/v1/aggregator/servers/1f0c", ScopeAdmin, ScopeAdmin},
		{"POST", "/api/v1/aggregator/servers/1f0c/connect", ScopeAdmin, ScopeAdmin},
		{"POST", "/api/v1/aggregator/servers/1f0c/disconnect", ScopeAdmin, ScopeAdmin},
		{"POST", "/api/v1/aggregator/servers/1f0c/tools/refresh", ScopeAdmin, ScopeAdmin},
		{"POST", "/api/v1/aggregator/servers/search", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/audit", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/AUDIT/", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/actors", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/Actors/", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/timeseries", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/servers/1f0c/timeseries", ScopeClient, ScopeClient},
		{"PUT", "/api/v1/aggregator/something-new", ScopeAdmin, ScopeAdmin},
		{"PUT", "/api/v1/aggregator/servers/1f0c/credentials/me", ScopeClient, ScopeClient},
		{"DELETE", "/api/v1/aggregator/servers/1f0c/credentials/ME/", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/servers/1f0c/credentials/me", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/credentials", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/credentials/", ScopeAdmin, ScopeAdmin},
		{"DELETE", "/api/v1/aggregator/servers/1f0c/credentials/token:alice", ScopeAdmin, ScopeAdmin},
		{"PUT", "/api/v1/aggregator/servers/1f0c/credentials/token:alice", ScopeAdmin, ScopeAdmin},
		{"PUT", "/api/v1/aggregator/servers/1f0c/credentials/me/x", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/something-new", ScopeClient, ScopeClient},
		{"POST", "/api/v1/aggregator/health", ScopeNone, ScopeNone}, // 405 anyway
		{"POST", "/mcp", ScopeClient, ScopeClient},
		{"GET", "/mcp", ScopeClient, ScopeClient},
		{"DELETE", "/mcp", ScopeClient, ScopeClient},
		{"POST", "/mcp/servers/github", ScopeClient, ScopeClient},
		{"GET", "/sse", ScopeClient, ScopeClient},
		{"POST", "/sse", ScopeClient, ScopeClient},
		{"POST", "/mcpx", ScopeAdmin, ScopeAdmin},
		{"GET", "/", ScopeClient, ScopeClient},
		{"GET", "/ui", ScopeNone, ScopeNone},
		{"GET", "/ui/", ScopeNone, ScopeNone},
		{"HEAD", "/UI/app.js", ScopeNone, ScopeNone},
		{"POST", "/ui/app.js", ScopeAdmin, ScopeAdmin},
		{"GET", "/uix", ScopeClient, ScopeClient},
		{"GET", "/api/v1/whoami", ScopeClient, ScopeClient},
		{"GET", "/api/v1/openapi.json", ScopeClient, ScopeClient},
		{"POST", "/api/v1/aggregator/import", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/export", ScopeClient, ScopeClient},
		{"GET", "/api/v1/aggregator/profiles", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/Profiles/team/tools", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/tool-filter", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/pinning/", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/tools/overrides", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/tools/changes", ScopeAdmin, ScopeAdmin},
		{"POST", "/api/v1/aggregator/servers/1f0c/tools/changes/x/approve", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/servers/1f0c/tools/x/override", ScopeAdmin, ScopeAdmin},
		{"GET", "/api/v1/aggregator/profilesx", ScopeClient, ScopeClient},
		{"GET", "/mcp/profiles/team", ScopeClient, ScopeClient},
	}
	for _, c := range cases {
		if got := closed.Required(c.method, c.path); got != c.want {
			t.Errorf("Required(%s %s) = %v, want %v", c.method, c.path, got, c.want)
		}
		if got := open.Required(c.method, c.path); got != c.wantOpen {
			t.Errorf("open metrics: Required(%s %s) = %v, want %v", c.method, c.path, got, c.wantOpen)
		}
	}
	if !IsToolCall("post", "/api/v1/tools/call/") || IsToolCall("GET", "/api/v1/tools/call") || IsToolCall("POST", "/api/v1/search") {
		t.Fatal("IsToolCall")
	}
}

func TestIdentity(t *testing.T) {
	admin := Identity{Name: "ops", Scope: ScopeAdmin}
	client := Identity{Name: "ci", Scope: ScopeClient, IP: "10.0.0.1"}
	if !admin.Allows(ScopeAdmin) || !admin.Allows(ScopeClient) || !client.Allows(ScopeClient) || client.Allows(ScopeAdmin) ||
		!client.Allows(ScopeNone) || (Identity{}).Allows(ScopeClient) {
		t.Fatal("Allows")
	}
	if client.RateKey() != "token:ci" || Anonymous("127.0.0.1").RateKey() != "ip:127.0.0.1" {
		t.Fatal("RateKey")
	}
	if a := Anonymous("::1"); !a.Allows(ScopeAdmin) || a.Name != AnonymousName {
		t.Fatal("anonymous is an admin while auth is off")
	}
	ctx := WithIdentity(context.Background(), client)
	if got, ok := FromContext(ctx); !ok || !reflect.DeepEqual(got, client) {
		t.Fatal("context round trip")
	}
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("no identity in a bare context")
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8081": true, "127.1.2.3:80": true, "[::1]:8081": true, "localhost:8081": true, "LOCALHOST:1": true,
		"0.0.0.0:8081": false, ":8081": false, "[::]:8081": false, "10.0.0.1:8081": false, "example.com:80": false,
		"127.0.0.1": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
	off := &Tokens{}
	on, _ := Parse(adminTok, "", "")
	addrs := map[string]string{"MCP_AGGREGATOR_LISTEN": "0.0.0.0:8081", "MCP_AGGREGATOR_MCP_LISTEN": "127.0.0.1:8082"}
	if err := CheckExposure(off.Enabled(), addrs); err == nil || !strings.Contains(err.Error(), "MCP_AGGREGATOR_LISTEN") ||
		strings.Contains(err.Error(), "MCP_AGGREGATOR_MCP_LISTEN") {
		t.Fatalf("exposed without token: %v", err)
	}
	if err := CheckExposure(on.Enabled(), addrs); err != nil {
		t.Fatalf("with a token any address: %v", err)
	}
	if err := CheckExposure(false, map[string]string{"A": "127.0.0.1:1", "B": "[::1]:2"}); err != nil {
		t.Fatal(err)
	}
}

func TestLimiter(t *testing.T) {
	l := NewLimiter(2, 3) // 2 calls/s, burst 3
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("call %d within the burst refused", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait <= 0 || wait > 500*time.Millisecond {
		t.Fatalf("burst exhausted: ok=%v wait=%v, want refused with <= 0.5 s", ok, wait)
	}
	// A refused call does not consume: after the wait exactly one more passes.
	now = now.Add(wait)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("after Retry-After the call passes")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("and only one")
	}
	// Clients are independent.
	for i := 0; i < 3; i++ {
		if ok, _ := l.Allow("b"); !ok {
			t.Fatalf("client b refused because of a")
		}
	}
	// Idle buckets are evicted (they would be full again anyway).
	if l.Len() != 2 {
		t.Fatalf("buckets %d", l.Len())
	}
	now = now.Add(2 * time.Minute)
	l.Allow("c")
	if l.Len() != 1 {
		t.Fatalf("idle buckets kept: %d", l.Len())
	}
	var none *Limiter
	if ok, _ := none.Allow("x"); !ok || NewLimiter(0, 10) != nil {
		t.Fatal("no limiter allows everything")
	}
}

// TestLimiterShare: on a node of a three-node cluster a client gets a third of the rate and the burst, existing
// buckets included; back on one node, the whole.
func TestLimiterShare(t *testing.T) {
	l := NewLimiter(30, 9)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.Allow("old") // a bucket that exists before the share changes
	l.SetShare(3)
	for _, key := range []string{"old", "new"} {
		passed := 0
		for i := 0; i < 20; i++ {
			if ok, _ := l.Allow(key); ok {
				passed++
			}
		}
		if passed > 3 {
			t.Fatalf("client %s: %d calls in a burst on a node of three, want at most 3 (9/3)", key, passed)
		}
	}
	now = now.Add(time.Second) // 10 calls/s on this node
	passed := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.Allow("new"); ok {
			passed++
		}
	}
	if passed < 2 || passed > 3 {
		t.Fatalf("after 1 s at 10/s with a burst of 3: %d calls, want the burst (3)", passed)
	}
	l.SetShare(1)
	now = now.Add(time.Second)
	passed = 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.Allow("fresh"); ok {
			passed++
		}
	}
	if passed != 9 {
		t.Fatalf("one node again: %d calls in a burst, want 9", passed)
	}
}

// TestMiddleware: the net/http middleware answers 401/403 in the error shape before the handler, and hands the
// identity on in the context and as a go-sdk TokenInfo.
func TestMiddleware(t *testing.T) {
	toks, err := Parse("ops:"+adminTok, "ci:"+clientTok, "")
	if err != nil {
		t.Fatal(err)
	}
	var seen Identity
	var info *sdkauth.TokenInfo
	h := Middleware(toks, Policy{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = FromContext(r.Context())
		info = sdkauth.TokenInfoFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	do := func(method, path, authz string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		seen, info = Identity{}, nil
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{"/mcp", "/sse", "/mcp/servers/x", "/metrics", "/anything"} {
		for _, authz := range []string{"", "Bearer wrong-token-0123456789", "Basic " + adminTok, adminTok} {
			rec := do("POST", path, authz)
			if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s with %q: %d %v", path, authz, rec.Code, rec.Header())
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error_code"] != errcode.Unauthorized || body["detail"] == "" || len(body) != 2 {
				t.Fatalf("401 body %s", rec.Body)
			}
		}
	}
	rec := do("POST", "/mcp", "Bearer "+clientTok)
	if rec.Code != http.StatusTeapot || seen.Name != "ci" || seen.Scope != ScopeClient || seen.IP == "" {
		t.Fatalf("client on /mcp: %d %+v", rec.Code, seen)
	}
	if id, ok := FromTokenInfo(info); !ok || id.Name != "ci" || info.UserID != "ci" {
		t.Fatalf("TokenInfo %+v", info)
	}
	// A write route the MCP listener does not know needs admin.
	if rec := do("POST", "/other", "Bearer "+clientTok); rec.Code != http.StatusForbidden ||
		!strings.Contains(rec.Body.String(), errcode.Forbidden) || !strings.Contains(rec.Header().Get("WWW-Authenticate"), "insufficient_scope") {
		t.Fatalf("client on an admin path: %d %s", rec.Code, rec.Body)
	}
	if rec := do("POST", "/other", "Bearer "+adminTok); rec.Code != http.StatusTeapot || seen.Name != "ops" {
		t.Fatalf("admin: %d", rec.Code)
	}
	// Open routes pass without a token; /metrics only when configured open.
	if rec := do("GET", "/api/v1/aggregator/health", ""); rec.Code != http.StatusTeapot {
		t.Fatalf("health: %d", rec.Code)
	}
	openH := Middleware(toks, Policy{MetricsOpen: true}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	rec = httptest.NewRecorder()
	openH.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("open metrics: %d", rec.Code)
	}

	// Auth off: everyone passes as an anonymous admin known by IP.
	offH := Middleware(nil, Policy{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = FromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	rec = httptest.NewRecorder()
	offH.ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
	if rec.Code != http.StatusTeapot || !seen.Anonymous || seen.Scope != ScopeAdmin || seen.IP != "192.0.2.1" {
		t.Fatalf("auth off: %d %+v", rec.Code, seen)
	}
}

// TestFirstToken: the token another process of the daemon presents is the first admin token (the list before the
// file), else the first client token; the entries parse as Parse reads them; no token: empty.
func TestFirstToken(t *testing.T) {
	file := t.TempDir() + "/tokens"
	if err := os.WriteFile(file, []byte("# comment\nclient ci "+clientTok+"\nadmin ops2 "+adminTok+"2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, admin, client, path, want, where string
	}{
		{"admin list first", "ops:" + adminTok, "ci:" + clientTok, file, adminTok, "MCP_AGGREGATOR_ADMIN_TOKENS entry 1"},
		{"admin from the file over a client in the list", "", clientTok, file, adminTok + "2", "MCP_AGGREGATOR_TOKENS_FILE " + file + " line 3"},
		{"client only", "", "ci:" + clientTok, "", clientTok, "MCP_AGGREGATOR_CLIENT_TOKENS entry 1"},
		{"none", "", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, where, err := FirstToken(tc.admin, tc.client, tc.path)
			if err != nil || tok != tc.want || where != tc.where {
				t.Fatalf("FirstToken = %q from %q, %v; want %q from %q", tok, where, err, tc.want, tc.where)
			}
		})
	}
	if _, _, err := FirstToken(":x", "", ""); err == nil {
		t.Fatal("a malformed entry: no error")
	}
}
