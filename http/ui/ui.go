// Package ui is the operators' console: a small single-page app served by the daemon itself under /ui/ on the
// REST listener. Its files are embedded in the binary (static/), so there is no separate server, no CDN and nothing
// fetched at run time: the page loads its own script, Preact, its hooks and htm (vendored ES modules, refreshed by
// `make ui-vendor`, see static/vendor/VERSIONS), and talks only to the daemon's REST API on the same origin with
// the bearer token the operator types (kept in sessionStorage, for the tab only).
//
// The files are public (no token is needed to load them: they hold no data); every answer they show comes from
// the API under the caller's token and scope.
package ui

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/url"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Prefix is where the console is served.
const Prefix = "/ui"

//go:embed static
var files embed.FS

// static is the console's files, rooted at static/.
func static() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// ContentSecurityPolicy allows the console's own files and same-origin API calls and nothing else: no inline
// script, no eval, no other origin, no framing. With a Login, connect-src also names the provider's token endpoint's
// origin (the page redeems its authorization code there).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// LoginPath is the console's sign-in settings, under Prefix: the Login as JSON, or 404 when there is none (the
// console then asks for a token).
const LoginPath = Prefix + "/login.json"

// Login is the OpenID provider the console signs in through, with the authorization code flow and PKCE (S256), as
// a public client: the page sends the operator to AuthorizationEndpoint, comes back to RedirectPath with a code,
// and redeems it at TokenEndpoint for an access token of Resource (RFC 8707), which it then uses like a pasted
// token. Everything here is public: the page reads it before anyone signs in.
type Login struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	ClientID              string `json:"client_id"`
	// Scope is what the page asks for (space-separated; openid and the aggregator's two scopes).
	Scope string `json:"scope"`
	// Resource is the aggregator's resource indicator (the audience its tokens must carry).
	Resource string `json:"resource"`
}

// RedirectPath is where the provider sends the operator back: register the daemon's REST origin + RedirectPath
// (https://agg.example.com/ui/) as the console client's redirect URI.
const RedirectPath = Prefix + "/"

// csp is the console's Content-Security-Policy with login (nil: none).
func csp(login *Login) string {
	if login == nil {
		return ContentSecurityPolicy
	}
	u, err := url.Parse(login.TokenEndpoint)
	if err != nil || u.Host == "" || strings.ContainsAny(u.Host, " ;'") {
		return ContentSecurityPolicy
	}
	return strings.Replace(ContentSecurityPolicy, "connect-src 'self'", "connect-src 'self' "+u.Scheme+"://"+u.Host, 1)
}

// contentTypes are the types of the files the console has.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Mount serves the console on app: /ui redirects to /ui/, /ui/ is index.html, /ui/<file> a file, /ui/login.json
// the sign-in settings (login; nil: 404, and the console asks for a token). Anything else under /ui is a 404 from
// the app's error handler.
func Mount(app *fiber.App, login *Login) {
	root := static()
	policy := csp(login)
	var loginJSON []byte
	if login != nil && login.AuthorizationEndpoint != "" && login.TokenEndpoint != "" && login.ClientID != "" {
		loginJSON, _ = json.Marshal(login)
	}
	app.Get(Prefix+"/*", func(c *fiber.Ctx) error {
		// The app's routing is not strict, so "/ui" lands here too: send it to "/ui/", the base of the page's
		// relative URLs.
		if !strings.HasPrefix(c.Path(), Prefix+"/") {
			return c.Redirect(Prefix+"/", fiber.StatusMovedPermanently)
		}
		name := c.Params("*")
		if name == "" {
			name = "index.html"
		}
		if name == "login.json" {
			if loginJSON == nil {
				return fiber.ErrNotFound
			}
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
			c.Set(fiber.HeaderCacheControl, "no-cache")
			return c.Send(loginJSON)
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok || strings.Contains(name, "..") || !fs.ValidPath(name) {
			return fiber.ErrNotFound
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return fiber.ErrNotFound
		}
		c.Set(fiber.HeaderContentType, ct)
		c.Set(fiber.HeaderContentSecurityPolicy, policy)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderXFrameOptions, "DENY")
		c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return c.Send(body)
	})
}
