package connconfig

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// PlainHTTPProblem says why an SSE or HTTP backend URL (or a health_check_url, or a redirect of either) may not be
// used, or "" when it may: https (TLS 1.2+), or plain http to a loopback host (IsLoopbackHost), or any plain http
// when allowInsecure (the server's allow_insecure_http). A URL whose scheme or host is still a ${VAR} reference
// cannot be judged and passes: it is judged again once resolved, at connect time. The answer never contains the
// URL (it may hold credentials).
func PlainHTTPProblem(rawURL string, allowInsecure bool) string {
	if HostIsRef(rawURL) {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the URL is not valid"
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return ""
	case "http":
	default:
		return "the URL scheme should be https (or http to a loopback address)"
	}
	if allowInsecure || IsLoopbackHost(u.Hostname()) {
		return ""
	}
	return "plain http:// is allowed only to loopback addresses (127.0.0.0/8, ::1, localhost): use https:// " +
		"(TLS 1.2+), or set allow_insecure_http: true in connection_config"
}

// IsLoopbackHost reports whether a URL host (no port, no brackets) certainly reaches this machine without the
// network: a loopback IP literal (127.0.0.0/8, ::1) or "localhost" (any case). It is the rule of plain http
// (README "Security"): a name that only DNS maps to loopback (*.localhost, which Go's resolver does not pin)
// does not count, so plain http never leaves the host because a resolver said so.
//
// The front ends' inbound checks of a Host header are not this rule and keep their own: http/auth's HostGuard
// also allows *.localhost names (RFC 6761) for browsers, and http/mcpproxy mirrors the go-sdk's localhost
// protection exactly (case-sensitive "localhost"), so that its check of a new session and the go-sdk's check of
// the session's later requests agree.
func IsLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// CheckRedirect is an http.Client's redirect policy for a backend: PlainHTTPProblem on every redirect (the
// configured headers may go with it), and no more than 10 redirects, as net/http's default.
func CheckRedirect(allowInsecure bool) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if problem := PlainHTTPProblem(req.URL.String(), allowInsecure); problem != "" {
			return errors.New("redirect refused: " + problem)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}
