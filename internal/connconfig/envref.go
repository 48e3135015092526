package connconfig

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// varRef matches a ${VAR} reference; group 1 is the variable's name. It is the one spelling of a reference:
// validation, masking and resolution all find references with it.
var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LookupEnv resolves a ${VAR} reference: os.LookupEnv in production, a map in tests.
type LookupEnv func(string) (string, bool)

// Expand replaces every ${VAR} in s from lookup; an unset variable is an error naming it (never its value). A
// reference to one of the daemon's own settings (IsDaemonSetting) is an error too, and is never looked up:
// CheckInto refuses such references, and this refuses them in configurations stored before that rule.
func Expand(s string, lookup LookupEnv) (string, error) {
	if name := DaemonSettingReference(s); name != "" {
		return "", fmt.Errorf("connection_config references %s, a setting of the aggregator itself: "+
			"the aggregator's settings (MCP_AGGREGATOR_*, MCP_CREDENTIAL_KEY*, DATABASE_URL, QDRANT_*) are never given to servers", name)
	}
	var missing string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		name := varRef.FindStringSubmatch(m)[1]
		v, ok := lookup(name)
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("environment variable %s referenced in connection_config is not set", missing)
	}
	return out, nil
}

// Resolve parses a stored connection_config and resolves the ${VAR} references of every string a transport
// uses, in the order command, cwd, url, base_url, args, env, headers. The stored config keeps the references;
// only the returned copy holds resolved values. On error the copy holds what was resolved before the failing
// string (which is emptied) and the rest as written, so that the actors can still collect what is already known
// to be secret.
func Resolve(raw json.RawMessage, lookup LookupEnv) (Config, error) {
	c, err := Parse(raw)
	if err != nil {
		return c, err
	}
	one := func(s *string) {
		if err == nil {
			*s, err = Expand(*s, lookup)
		}
	}
	one(&c.Command)
	one(&c.Cwd)
	one(&c.URL)
	one(&c.BaseURL)
	for i := range c.Args {
		one(&c.Args[i])
	}
	for k, v := range c.Env {
		one(&v)
		c.Env[k] = v
	}
	for k, v := range c.Headers {
		one(&v)
		c.Headers[k] = v
	}
	return c, err
}

// startsWithRef reports whether s begins with a ${VAR} reference (its scheme and host come from the environment).
func startsWithRef(s string) bool {
	loc := varRef.FindStringIndex(s)
	return loc != nil && loc[0] == 0
}

// HostIsRef reports whether the scheme or host of a URL is still a ${VAR} reference (or anything like one), so
// that rules about the host can only be judged once it is resolved, at connect time.
func HostIsRef(rawURL string) bool {
	head := rawURL
	if i := strings.Index(head, "://"); i >= 0 {
		if j := strings.IndexAny(head[i+3:], "/?#"); j >= 0 {
			head = head[:i+3+j]
		}
	}
	return strings.Contains(head, "${")
}

// The daemon's own configuration (the README's configuration table, plus TEST_DATABASE_URL): never passed to a
// stdio child, never resolvable in a connection_config.
var (
	daemonSettingPrefixes = []string{"MCP_AGGREGATOR_", "MCP_CREDENTIAL_KEY", "QDRANT_"}
	daemonSettings        = []string{"DATABASE_URL", "TEST_DATABASE_URL"}
)

// IsDaemonSetting reports whether an environment variable is one of the daemon's own settings (MCP_AGGREGATOR_*,
// MCP_CREDENTIAL_KEY*, DATABASE_URL, QDRANT_*; case-insensitive). Those hold its tokens, keys and database
// credentials, and a backend can show its environment to any caller: a stdio server never inherits them and a
// connection_config may not reference them.
func IsDaemonSetting(name string) bool {
	n := strings.ToUpper(name)
	for _, p := range daemonSettingPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return slices.Contains(daemonSettings, n)
}

// DaemonSettingReference returns the first ${VAR} reference in s that names one of the daemon's settings, or "".
func DaemonSettingReference(s string) string {
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		if IsDaemonSetting(m[1]) {
			return m[1]
		}
	}
	return ""
}

// ValidEnvName reports whether name can be an environment variable of a stdio child (letters, digits and _, not
// starting with a digit), the form MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH accepts.
func ValidEnvName(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
