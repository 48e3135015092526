package ui

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestMount: the console's files are served from the binary with their types and the security headers; /ui goes
// to /ui/; anything that is not one of its files is a 404; every module the page imports is embedded (nothing is
// fetched from elsewhere).
func TestMount(t *testing.T) {
	app := fiber.New()
	Mount(app, nil)
	get := getter(t, app)
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/ui/", "text/html; charset=utf-8", `<script type="module" src="app.js">`},
		{"/ui/index.html", "text/html; charset=utf-8", "MCP aggregator console"},
		{"/ui/app.js", "text/javascript; charset=utf-8", "from './vendor/preact.js'"},
		{"/ui/app.css", "text/css; charset=utf-8", ".badge"},
		{"/ui/vendor/preact.js", "text/javascript; charset=utf-8", "createElement"},
		{"/ui/vendor/hooks.js", "text/javascript; charset=utf-8", `from"./preact.js"`},
		{"/ui/vendor/htm.js", "text/javascript; charset=utf-8", "export"},
	} {
		status, h, body := get(tc.path)
		if status != 200 || h["Content-Type"] != tc.ctype || !strings.Contains(body, tc.contains) {
			t.Errorf("%s: %d %q, body contains %q: %v", tc.path, status, h["Content-Type"], tc.contains, strings.Contains(body, tc.contains))
		}
		if h["Content-Security-Policy"] != ContentSecurityPolicy || h["X-Content-Type-Options"] != "nosniff" || h["X-Frame-Options"] != "DENY" {
			t.Errorf("%s: security headers %v", tc.path, h)
		}
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			if tc.path != "/ui/vendor/preact.js" { // preact names the SVG namespace URI; it fetches nothing
				t.Errorf("%s names a remote URL", tc.path)
			}
		}
	}
	// The CSP allows no inline style or script: the console's own files must not rely on them (a style attribute
	// or an inline handler would be refused by the browser, silently for styles). Preact's onClick props are
	// listeners, not attributes: the check is case-sensitive.
	for _, p := range []string{"/ui/index.html", "/ui/app.js"} {
		_, _, body := get(p)
		for _, inline := range []string{"style=", "onclick=", "javascript:", "<style", "<script>"} {
			if strings.Contains(body, inline) {
				t.Errorf("%s uses %q, which the Content-Security-Policy refuses", p, inline)
			}
		}
	}
	if status, h, _ := get("/ui"); status != 301 || h["Location"] != "/ui/" {
		t.Errorf("/ui: %d %v", status, h)
	}
	for _, p := range []string{"/ui/login.json", "/ui/missing.js", "/ui/vendor/VERSIONS", "/ui/../ui.go", "/ui/vendor/LICENSE-htm", "/ui/%2e%2e/ui.go"} {
		if status, _, _ := get(p); status != 404 {
			t.Errorf("%s: %d, want 404", p, status)
		}
	}
}

func getter(t *testing.T, app *fiber.App) func(path string) (int, map[string]string, string) {
	return func(path string) (int, map[string]string, string) {
		t.Helper()
		resp, err := app.Test(httptest.NewRequest("GET", path, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		h := map[string]string{}
		for k := range resp.Header {
			h[k] = resp.Header.Get(k)
		}
		return resp.StatusCode, h, string(b)
	}
}

// TestMountWithLogin: with a Login, /ui/login.json tells the page where and how to sign in, and the pages'
// Content-Security-Policy lets them reach the token endpoint's origin, and no other; the page itself has the
// provider sign-in (authorization code with PKCE, S256) and keeps the token form.
func TestMountWithLogin(t *testing.T) {
	app := fiber.New()
	Mount(app, &Login{Issuer: "https://id.example.com", AuthorizationEndpoint: "https://id.example.com/auth",
		TokenEndpoint: "https://tokens.example.com:8443/token", ClientID: "console", Scope: "openid aggregator:admin aggregator:client",
		Resource: "https://agg.example.com/mcp"})
	get := getter(t, app)
	status, h, body := get(LoginPath)
	if status != 200 || h["Content-Type"] != "application/json" {
		t.Fatalf("login.json: %d %v", status, h)
	}
	var got Login
	if err := json.Unmarshal([]byte(body), &got); err != nil || got.ClientID != "console" || got.TokenEndpoint != "https://tokens.example.com:8443/token" ||
		got.Resource != "https://agg.example.com/mcp" || got.Scope != "openid aggregator:admin aggregator:client" {
		t.Fatalf("login.json: %s (%v)", body, err)
	}
	_, h, js := get("/ui/app.js")
	want := strings.Replace(ContentSecurityPolicy, "connect-src 'self'", "connect-src 'self' https://tokens.example.com:8443", 1)
	if h["Content-Security-Policy"] != want {
		t.Errorf("CSP %q, want %q", h["Content-Security-Policy"], want)
	}
	for _, s := range []string{"login.json", "code_challenge_method", "S256", "code_verifier", "data-testid=\"oidc-sign-in\"", "data-testid=\"token\""} {
		if !strings.Contains(js, s) {
			t.Errorf("app.js has no %s", s)
		}
	}
}
