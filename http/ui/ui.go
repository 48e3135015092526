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
	"io/fs"
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
// script, no eval, no other origin, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files the console has.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Mount serves the console on app: /ui redirects to /ui/, /ui/ is index.html, /ui/<file> a file. Anything else
// under /ui is a 404 from the app's error handler.
func Mount(app *fiber.App) {
	root := static()
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
		ct, ok := contentTypes[path.Ext(name)]
		if !ok || strings.Contains(name, "..") || !fs.ValidPath(name) {
			return fiber.ErrNotFound
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return fiber.ErrNotFound
		}
		c.Set(fiber.HeaderContentType, ct)
		c.Set(fiber.HeaderContentSecurityPolicy, ContentSecurityPolicy)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderXFrameOptions, "DENY")
		c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return c.Send(body)
	})
}
