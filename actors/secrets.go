package actors

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/persistence"
)

// Secrets in connection_config (system-contract.md, Security Contract): the rules that decide which parts of a
// configuration are secret live here once, for the API's masking (http/api.MaskConfig, on the config as written)
// and for the actors' scrubbing of error texts (on the config as resolved at connect time).

// secretWords make a header, query parameter, flag or variable name secret when its lower-case form contains one.
var secretWords = []string{"token", "secret", "key", "password", "passwd", "pwd", "auth", "session", "credential",
	"cookie", "signature", "private"}

// IsSecretName reports whether a header, query parameter or command-line flag of that name carries a secret:
// Authorization, Proxy-Authorization, Cookie, Set-Cookie, X-API-Key, sig, or any name containing token, secret,
// key, password, passwd, pwd, auth, session, credential, cookie, signature or private (case-insensitive).
func IsSecretName(name string) bool {
	n := strings.ToLower(name)
	if n == "sig" {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// authSchemes are the Authorization schemes whose word is kept when the credential after it is masked.
var authSchemes = []string{"bearer", "basic", "token", "digest", "bot", "apikey", "api-key"}

// splitAuthScheme splits "Bearer abc" into "Bearer " and "abc"; ok is false when v starts with no known scheme.
func splitAuthScheme(v string) (scheme, rest string, ok bool) {
	word, after, found := strings.Cut(v, " ")
	if !found || !slices.Contains(authSchemes, strings.ToLower(word)) {
		return "", v, false
	}
	trimmed := strings.TrimLeft(after, " ")
	return v[:len(v)-len(trimmed)], trimmed, true
}

// RewriteHeader returns a header value with its secret part replaced by f(part): the whole value of a header named
// like a secret, or the credential after an Authorization scheme ("Bearer <part>") in any header.
func RewriteHeader(name, value string, f func(string) string) string {
	scheme, rest, ok := splitAuthScheme(value)
	switch {
	case ok:
		return scheme + f(rest)
	case IsSecretName(name):
		return f(value)
	}
	return value
}

// RewriteURL returns s with its credentials replaced by f(part): the password of the userinfo (or the user when
// there is no password, as in https://TOKEN@host), and the value of every query parameter named like a secret. It
// works on text, so ${VAR} references and the URL's spelling are kept.
func RewriteURL(s string, f func(string) string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		start := i + 3
		end := len(s)
		if j := strings.IndexAny(s[start:], "/?#"); j >= 0 {
			end = start + j
		}
		authority := s[start:end]
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			ui := authority[:at]
			if user, pass, ok := strings.Cut(ui, ":"); ok {
				ui = user + ":" + f(pass)
			} else {
				ui = f(ui)
			}
			s = s[:start] + ui + authority[at:] + s[end:]
		}
	}
	q := strings.Index(s, "?")
	if q < 0 {
		return s
	}
	query, frag := s[q+1:], ""
	if h := strings.Index(query, "#"); h >= 0 {
		query, frag = query[:h], query[h:]
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); ok && err == nil && IsSecretName(name) {
			params[i] = k + "=" + f(v)
		}
	}
	return s[:q+1] + strings.Join(params, "&") + frag
}

var (
	assignmentName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
	headerArg      = regexp.MustCompile(`^([A-Za-z0-9-]+:[ \t]*)(.*)$`)
)

// RewriteArgs returns a copy of args with secrets replaced by f(part): credentials in URLs (a database URL with a
// password), the value of a flag named like a secret (--api-key=<part>, or --api-key <part>) and of an assignment
// named like one (TOKEN=<part>), and header arguments ("Authorization: Bearer <part>", as mcp-remote takes them).
func RewriteArgs(args []string, f func(string) string) []string {
	out := make([]string, len(args))
	nextIsSecret := false
	for i, a := range args {
		if nextIsSecret && !strings.HasPrefix(a, "-") {
			out[i], nextIsSecret = f(a), false
			continue
		}
		nextIsSecret = false
		body := strings.TrimLeft(a, "-")
		dashes := a[:len(a)-len(body)]
		name, value, hasValue := strings.Cut(body, "=")
		switch {
		case hasValue && IsSecretName(name) && (dashes != "" || assignmentName.MatchString(name)):
			out[i] = dashes + name + "=" + f(value)
		case !hasValue && dashes != "" && IsSecretName(name):
			out[i], nextIsSecret = a, true
		case strings.Contains(a, "://"):
			out[i] = RewriteURL(a, f)
		case headerArg.MatchString(a):
			m := headerArg.FindStringSubmatch(a)
			out[i] = m[1] + RewriteHeader(strings.TrimRight(m[1], ": \t"), m[2], f)
		default:
			out[i] = a
		}
	}
	return out
}

// RewriteSecrets replaces, in a connection_config decoded into generic JSON, every secret part by f(part): header
// values (RewriteHeader), every env value, credentials in url and base_url (RewriteURL) and in args (RewriteArgs).
// Keys are kept, so a reader still sees what is set.
func RewriteSecrets(cfg map[string]any, f func(string) string) {
	if h, ok := cfg["headers"].(map[string]any); ok {
		for k, v := range h {
			if s, ok := v.(string); ok {
				h[k] = RewriteHeader(k, s, f)
			}
		}
	}
	if env, ok := cfg["env"].(map[string]any); ok {
		for k, v := range env {
			if s, ok := v.(string); ok {
				env[k] = f(s)
			}
		}
	}
	for _, k := range []string{"url", "base_url"} {
		if s, ok := cfg[k].(string); ok {
			cfg[k] = RewriteURL(s, f)
		}
	}
	if args, ok := cfg["args"].([]any); ok {
		strs := make([]string, 0, len(args))
		for _, a := range args {
			s, ok := a.(string)
			if !ok {
				return // not a string list: leave it
			}
			strs = append(strs, s)
		}
		for i, s := range RewriteArgs(strs, f) {
			args[i] = s
		}
	}
}

// minSecretLen: shorter resolved values are not scrubbed from error texts (they would mangle every message).
const minSecretLen = 4

// secrets is the set of resolved secret values of one server, to be scrubbed from every error text the actor
// stores, logs or answers with. A nil *secrets still scrubs URL userinfo.
type secrets struct {
	values []string // longest first, so a secret inside another is replaced after it
}

// newSecrets resolves the server's connection_config (as far as the environment allows) and collects its secret
// parts, in the spellings an error text may carry them: as is, URL-escaped, Go-quoted, JSON-escaped, and for
// Basic credentials decoded.
func newSecrets(rec persistence.Server, lookup LookupEnv) *secrets {
	set := map[string]bool{}
	add := func(v string) {
		if len(v) < minSecretLen {
			return
		}
		set[v] = true
		set[url.QueryEscape(v)] = true
		set[url.PathEscape(v)] = true
		if q := strconv.Quote(v); len(q) > 2 {
			set[q[1:len(q)-1]] = true
		}
		if j, err := json.Marshal(v); err == nil && len(j) > 2 {
			set[string(j[1:len(j)-1])] = true
		}
	}
	collect := func(v string) string {
		add(v)
		if u, err := url.PathUnescape(v); err == nil {
			add(u)
		}
		if dec, err := base64.StdEncoding.DecodeString(v); err == nil && utf8.Valid(dec) {
			if _, pass, ok := strings.Cut(string(dec), ":"); ok {
				add(string(dec))
				add(pass)
			}
		}
		return v
	}
	cfg, _ := resolveConfig(rec.ConnectionConfig, lookup)
	if b, err := json.Marshal(cfg); err == nil {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			RewriteSecrets(m, collect)
		}
	}
	if rec.HealthCheckURL != nil {
		RewriteURL(*rec.HealthCheckURL, collect)
	}
	s := &secrets{}
	for v := range set {
		if len(v) >= minSecretLen {
			s.values = append(s.values, v)
		}
	}
	slices.SortFunc(s.values, func(a, b string) int { return len(b) - len(a) })
	return s
}

// userinfoRe finds the userinfo of URLs in free text.
var userinfoRe = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@"'<>]+@`)

// scrub removes URL userinfo and every secret value from an error text.
func (s *secrets) scrub(text string) string {
	text = userinfoRe.ReplaceAllString(text, "${1}***@")
	if s == nil {
		return text
	}
	for _, v := range s.values {
		text = strings.ReplaceAll(text, v, "***")
	}
	return text
}

// PlainHTTPProblem says why an SSE or HTTP backend URL may not be used, or "" when it may: https (TLS 1.2+), or
// plain http to a loopback host (127.0.0.0/8, ::1, localhost), or any plain http when allowInsecure (the server's
// allow_insecure_http). A URL whose scheme or host is still a ${VAR} reference cannot be judged and passes: it is
// judged again once resolved, at connect time. The answer never contains the URL (it may hold credentials).
func PlainHTTPProblem(rawURL string, allowInsecure bool) string {
	head := rawURL
	if i := strings.Index(head, "://"); i >= 0 {
		if j := strings.IndexAny(head[i+3:], "/?#"); j >= 0 {
			head = head[:i+3+j]
		}
	}
	if strings.Contains(head, "${") {
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
	if allowInsecure || isLoopbackHost(u.Hostname()) {
		return ""
	}
	return "plain http:// is allowed only to loopback addresses (127.0.0.0/8, ::1, localhost): use https:// " +
		"(TLS 1.2+), or set allow_insecure_http: true in connection_config"
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkRedirect applies PlainHTTPProblem to every redirect of an SSE or HTTP session too (the configured headers
// go with each request), and stops after 10 redirects as net/http does.
func checkRedirect(allowInsecure bool) func(*http.Request, []*http.Request) error {
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

// allowsInsecureHTTP reads allow_insecure_http from a stored connection_config.
func allowsInsecureHTTP(raw json.RawMessage) bool {
	var c struct {
		AllowInsecureHTTP bool `json:"allow_insecure_http"`
	}
	return json.Unmarshal(raw, &c) == nil && c.AllowInsecureHTTP
}
