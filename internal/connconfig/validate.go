package connconfig

import (
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/mcpgw/aggregator/internal/strictjson"
)

// FieldError is one problem CheckInto found, in the 422 shape of system-contract.md (strictjson.FieldError).
type FieldError = strictjson.FieldError

// Checks are the rules of CheckInto that belong to the running daemon rather than to the config. The zero value
// adds none.
type Checks struct {
	// URLProblem judges a backend URL by its literal host against the daemon's outbound policy (metadata and
	// link-local addresses, deny lists, the daemon's own listeners): "" when it may be used, else why not. Nil:
	// no such rule.
	URLProblem func(rawURL string) string
}

// CheckURL judges a URL with URLProblem: "" when it may be used (or there is no such rule), else why not.
func (k Checks) CheckURL(rawURL string) string {
	if k.URLProblem == nil {
		return ""
	}
	return k.URLProblem(rawURL)
}

// validate checks raw as the connection_config of a server of the given transport (BR-001) and returns it
// re-encoded from the checked values, so that it holds only documented keys, with ${VAR} references exactly as
// written; on any problem it returns nil and every problem found (up to strictjson.MaxErrors), located relative
// to connection_config. It is pure and safe on any input.
func validate(raw json.RawMessage, transport string, checks Checks) (json.RawMessage, []FieldError) {
	c := strictjson.New()
	out := CheckInto(c, raw, transport, nil, checks)
	return out, c.Errors()
}

// CheckInto is validate for the validator of a larger body: problems are reported to c, located under loc (for
// example ["body", "connection_config"]). When transport is not a known transport nothing is checked beyond the
// JSON type (the caller reports the transport). It returns nil when c got an error from it.
func CheckInto(c *strictjson.Checker, raw json.RawMessage, transport string, loc []any, checks Checks) json.RawMessage {
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		c.Add(strictjson.FieldTypeError, "Input should be a valid object", loc)
		return nil
	}
	allowed, required, known := Keys(transport)
	if !known {
		return nil
	}
	before := c.Count()
	fields := c.Index(members, loc)
	out := make(map[string]any, len(members))

	if r, ok := fields[required]; !ok || strictjson.KindOf(r) == strictjson.KindNull {
		c.Add(strictjson.FieldValueError, transport+" transport requires '"+required+"' in connection_config",
			strictjson.At(loc, required))
	}

	noRef := func(s string, at []any) bool {
		if problem := DaemonRefProblem(s); problem != "" {
			c.Add(strictjson.FieldValueError, problem, at)
			return false
		}
		return true
	}
	for _, m := range members {
		if !slices.Contains(allowed, m.Key) {
			c.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted for "+transport+" transport",
				strictjson.At(loc, m.Key))
			continue
		}
		if !strictjson.IsFirst(fields, m) {
			continue // a duplicate, already reported
		}
		if strictjson.KindOf(m.Value) == strictjson.KindNull {
			continue // an optional key given as null means absent; a null required key is reported above
		}
		at := strictjson.At(loc, m.Key)
		switch m.Key {
		case "command":
			if s, ok := c.String(m.Value, at); ok {
				if strings.TrimSpace(s) == "" {
					c.Add(strictjson.FieldValueError, "command should not be empty", at)
				} else if noRef(s, at) {
					out[m.Key] = s
				}
			}
		case "cwd":
			if s, ok := c.String(m.Value, at); ok && noRef(s, at) {
				out[m.Key] = s
			}
		case "args":
			if args, ok := c.StringList(m.Value, at); ok {
				good := true
				for i, a := range args {
					good = noRef(a, strictjson.At(at, i)) && good
				}
				if good {
					out[m.Key] = args
				}
			}
		case "env":
			if env, ok := c.StringMap(m.Value, at, envKeyProblem, strictjson.Both(nulProblem, DaemonRefProblem)); ok {
				out[m.Key] = env
			}
		case "headers":
			if h, ok := c.StringMap(m.Value, at, headerNameProblem, strictjson.Both(headerValueProblem, DaemonRefProblem)); ok {
				if noCaseDuplicates(c, h, at) {
					out[m.Key] = h
				}
			}
		case "url", "base_url":
			if s, ok := c.String(m.Value, at); ok {
				if problem := HTTPURLProblem(s); problem != "" {
					c.Add(strictjson.FieldValueError, problem, at)
				} else if noRef(s, at) {
					if problem := checks.CheckURL(s); problem != "" {
						c.Add(strictjson.FieldValueError, problem, at)
					} else {
						out[m.Key] = s
					}
				}
			}
		case "allow_insecure_http":
			if b, ok := c.Bool(m.Value, at); ok {
				out[m.Key] = b
			}
		}
	}
	// TLS 1.2+ for SSE and HTTP: plain http only to loopback, or with allow_insecure_http.
	allowInsecure, _ := out["allow_insecure_http"].(bool)
	for _, k := range []string{"url", "base_url"} {
		if u, ok := out[k].(string); ok {
			if problem := PlainHTTPProblem(u, allowInsecure); problem != "" {
				c.Add(strictjson.FieldValueError, problem, strictjson.At(loc, k))
			}
		}
	}
	if c.Count() > before {
		return nil
	}
	return strictjson.Encode(out)
}

// HTTPURLProblem says what is wrong with s as an absolute http(s) URL, or "" when nothing is. ${VAR} references
// are allowed: they are checked with a placeholder in their place, and a URL that starts with one (its scheme comes
// from the environment) can only be checked when it is resolved, at connect time.
func HTTPURLProblem(s string) string {
	if s == "" {
		return "URL should not be empty"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "URL should not contain whitespace or control characters"
		}
	}
	if startsWithRef(s) {
		return ""
	}
	u, err := url.Parse(varRef.ReplaceAllString(s, "0"))
	if err != nil {
		return "Input should be a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "URL scheme should be 'http' or 'https'"
	}
	if u.Hostname() == "" {
		return "URL should be absolute and include a host"
	}
	return ""
}

// DaemonRefProblem refuses a ${VAR} reference to one of the daemon's own settings (IsDaemonSetting): they hold
// its bearer tokens, the at-rest credential key and the database URL, and a backend can show its configuration
// to any caller. The message names the variable, never its value.
func DaemonRefProblem(s string) string {
	if name := DaemonSettingReference(s); name != "" {
		return "${" + name + "} is a setting of the aggregator itself; its settings (MCP_AGGREGATOR_*, " +
			"MCP_CREDENTIAL_KEY*, DATABASE_URL, QDRANT_*) cannot be referenced in connection_config"
	}
	return ""
}

// noCaseDuplicates refuses two headers whose names differ only in case: HTTP treats them as one.
func noCaseDuplicates(c *strictjson.Checker, h map[string]string, loc []any) bool {
	seen := make(map[string]bool, len(h))
	ok := true
	for _, k := range slices.Sorted(maps.Keys(h)) {
		lower := strings.ToLower(k)
		if seen[lower] {
			c.Add(strictjson.FieldValueError, "Header given twice (names are case-insensitive)", strictjson.At(loc, k))
			ok = false
		}
		seen[lower] = true
	}
	return ok
}

func nulProblem(s string) string {
	if strings.ContainsRune(s, 0) {
		return "String should not contain NUL characters"
	}
	return ""
}

func envKeyProblem(k string) string {
	switch {
	case k == "":
		return "Environment variable name should not be empty"
	case strings.ContainsAny(k, "=\x00"):
		return "Environment variable name should not contain '=' or NUL"
	}
	return ""
}

// headerNameProblem enforces RFC 9110's token syntax, so a name cannot smuggle a second header or a body.
func headerNameProblem(k string) string {
	if k == "" {
		return "Header name should not be empty"
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return "Header name should be an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
		}
	}
	return ""
}

// headerValueProblem refuses control characters other than tab, CR and LF included (header injection).
func headerValueProblem(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return "Header value should not contain control characters"
		}
	}
	return ""
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
