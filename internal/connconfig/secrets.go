package connconfig

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Which parts of a connection_config are secret (system-contract.md, Security Contract). The rules live here once,
// for masking in answers (Mask, on the config as written) and for the actors' scrubbing of error texts (on the
// config as resolved at connect time): both walk the config with the Rewrite functions and differ only in what
// they do with a secret part.

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
