package auth

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/mcpgw/aggregator/http/apierror/errbody"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// hostNameRE is a DNS host name (letters, digits, hyphens, underscores, dots).
var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$`)

// HostGuard refuses the two requests a hostile web page can make a browser send to a daemon on this machine (or
// on a private network): a DNS-rebinding request, whose Host header carries the attacker's name, and a
// cross-origin request, whose Origin header carries the attacker's page. Bearer tokens do not protect an
// auth-off loopback daemon, and the go-sdk's own localhost check covers only its handlers and only loopback
// sockets; this guard runs in front of every route of both listeners, so REST, /mcp, /sse and /mcp/servers/{name}
// decide alike.
//
// A Host passes when its name (port ignored) is a loopback name (localhost, *.localhost, 127.0.0.0/8, ::1), the
// host of a listen address, any IP literal when a listen address is unspecified (0.0.0.0, ::: a rebinding attack
// needs a DNS name), or an allowed host (exact, "*.example.com" for subdomains, "*" for any). An Origin passes
// when it is absent (not a browser), names the same host and port as the request (same origin), has a loopback
// host, or is an allowed origin ("scheme://host[:port]" exactly, or "*"). A nil *HostGuard allows everything.
type HostGuard struct {
	hosts       map[string]bool // exact host names, lower case
	suffixes    []string        // ".example.com" from "*.example.com"
	anyHost     bool
	anyIP       bool
	origins     map[string]bool // "scheme://host:port", lower case, default ports explicit
	anyOrigin   bool
	listenHosts map[string]bool
}

// NewHostGuard builds the guard from the listen addresses ("host:port") and the configured allowed hosts and
// origins (ParseAllowedHosts, ParseAllowedOrigins).
func NewHostGuard(listen []string, allowedHosts, allowedOrigins []string) *HostGuard {
	g := &HostGuard{hosts: map[string]bool{}, origins: map[string]bool{}, listenHosts: map[string]bool{}}
	for _, addr := range listen {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		host = strings.ToLower(strings.Trim(host, "[]"))
		if host == "" {
			g.anyIP = true
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			g.anyIP = true
			continue
		}
		g.listenHosts[host] = true
	}
	for _, h := range allowedHosts {
		h = strings.ToLower(h)
		switch {
		case h == "*":
			g.anyHost = true
		case strings.HasPrefix(h, "*."):
			g.suffixes = append(g.suffixes, h[1:])
		default:
			g.hosts[h] = true
		}
	}
	for _, o := range allowedOrigins {
		if o == "*" {
			g.anyOrigin = true
			continue
		}
		if n, ok := normalizeOrigin(o); ok {
			g.origins[n] = true
		}
	}
	return g
}

// ParseAllowedHosts reads MCP_AGGREGATOR_ALLOWED_HOSTS: comma-separated host names or IPs without port,
// "*.domain" for every subdomain, or "*". It reports every bad entry.
func ParseAllowedHosts(raw string) ([]string, error) {
	var out, bad []string
	for _, h := range splitList(raw) {
		if h != "*" && net.ParseIP(strings.Trim(h, "[]")) == nil && !hostNameRE.MatchString(strings.TrimPrefix(h, "*.")) {
			bad = append(bad, fmt.Sprintf("%q", h))
			continue
		}
		out = append(out, strings.ToLower(strings.Trim(h, "[]")))
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("MCP_AGGREGATOR_ALLOWED_HOSTS: %s: want host names without scheme or port (e.g. api.example.com, *.example.com)", strings.Join(bad, ", "))
	}
	return out, nil
}

// ParseAllowedOrigins reads MCP_AGGREGATOR_ALLOWED_ORIGINS: comma-separated "scheme://host[:port]" or "*". It
// reports every bad entry.
func ParseAllowedOrigins(raw string) ([]string, error) {
	var out, bad []string
	for _, o := range splitList(raw) {
		if o == "*" {
			out = append(out, o)
			continue
		}
		if _, ok := normalizeOrigin(o); !ok {
			bad = append(bad, fmt.Sprintf("%q", o))
			continue
		}
		out = append(out, o)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("MCP_AGGREGATOR_ALLOWED_ORIGINS: %s: want origins like https://app.example.com or http://localhost:3000", strings.Join(bad, ", "))
	}
	return out, nil
}

func splitList(raw string) []string {
	var out []string
	for _, p := range strings.Split(raw, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// normalizeOrigin returns "scheme://host:port" (lower case, the scheme's default port made explicit), or false
// when o is not a plain http(s) origin.
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme + "://" + net.JoinHostPort(host, port)), true
}

// isLoopbackName reports whether host (no port) is localhost, a *.localhost name or a loopback IP.
func isLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// splitHost splits a Host header into name and port; the port may be empty.
func splitHost(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return strings.ToLower(h), p
	}
	return strings.ToLower(strings.Trim(hostport, "[]")), ""
}

// allowedHost reports whether a Host header value passes.
func (g *HostGuard) allowedHost(hostport string) bool {
	host, _ := splitHost(hostport)
	if host == "" {
		return false // HTTP/1.1 requires Host; fasthttp and net/http fill it for HTTP/1.0
	}
	if g.anyHost || isLoopbackName(host) || g.listenHosts[host] || g.hosts[host] {
		return true
	}
	if g.anyIP && net.ParseIP(host) != nil {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// allowedOrigin reports whether an Origin header value passes for a request to hostport over scheme.
func (g *HostGuard) allowedOrigin(origin, hostport, scheme string) bool {
	if origin == "" {
		return true // not sent by a browser (or a same-origin GET): nothing to check
	}
	if g.anyOrigin {
		return true
	}
	n, ok := normalizeOrigin(origin)
	if !ok {
		return false // "null" (sandboxed frames, file:// pages) and anything malformed
	}
	if g.origins[n] {
		return true
	}
	u, _ := url.Parse(n)
	if isLoopbackName(u.Hostname()) {
		return true
	}
	if scheme == "" {
		scheme = "http"
	}
	if self, ok := normalizeOrigin(scheme + "://" + hostport); ok && self == n {
		return true
	}
	return false
}

// Check decides one request from its Host and Origin headers and the scheme it came in over ("http" unless TLS
// terminates here). It returns 0, or 403 with the error code and message to answer.
func (g *HostGuard) Check(host, origin, scheme string) (status int, code, detail string) {
	if g == nil {
		return 0, "", ""
	}
	if !g.allowedHost(host) {
		return http.StatusForbidden, errcode.HostNotAllowed,
			"Host " + quoteShort(host) + " is not allowed: use the listen address, a loopback name, or add it to MCP_AGGREGATOR_ALLOWED_HOSTS"
	}
	if !g.allowedOrigin(origin, host, scheme) {
		return http.StatusForbidden, errcode.OriginNotAllowed,
			"Origin " + quoteShort(origin) + " is not allowed: add it to MCP_AGGREGATOR_ALLOWED_ORIGINS"
	}
	return 0, "", ""
}

// quoteShort quotes a header value for a message, cut to 100 bytes so a hostile header cannot bloat the answer.
func quoteShort(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// Wrap guards a net/http handler (the MCP listener): a refused request is answered 403 in the error shape and
// never reaches next.
func (g *HostGuard) Wrap(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if status, code, detail := g.Check(r.Host, r.Header.Get("Origin"), scheme); status != 0 {
			errbody.Write(w, status, errbody.Body{Detail: detail, ErrorCode: code,
				Context: map[string]any{"reason": "dns_rebinding_or_cross_origin"}}, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}
