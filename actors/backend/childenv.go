package backend

import (
	"maps"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/internal/connconfig"
)

// The environment of a stdio server's process. The daemon's own environment holds its bearer tokens, the at-rest
// credential key and the database URL, and a backend can hand its environment to any caller (server-everything's
// get-env tool does): so a child never inherits it whole. It gets the few variables a program needs to run, as the
// MCP SDKs' default environment does (the TypeScript SDK's getDefaultEnvironment), the variables the operator lists
// in MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH, and its own connection_config env. The daemon's settings are never
// inherited, even when listed (connconfig.IsDaemonSetting), and ${VAR} references may not name them
// (connconfig.Validate at registration, connconfig.Expand at connect time).

// inheritedEnv are the variables every stdio server inherits from the daemon when they are set: the TypeScript
// SDK's default set (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus the locale, the time zone and the temporary
// directory. LC_* variables are inherited too (inheritedEnvPrefixes).
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LANGUAGE", "TZ", "TMPDIR"}

// inheritedEnvPrefixes are prefixes of inherited variable names.
var inheritedEnvPrefixes = []string{"LC_"}

// inherited reports whether the daemon's variable name goes to every child.
func inherited(name string, passthrough []string) bool {
	if connconfig.IsDaemonSetting(name) {
		return false
	}
	if slices.Contains(inheritedEnv, name) || slices.Contains(passthrough, name) {
		return true
	}
	for _, p := range inheritedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// childEnv builds a stdio server's environment, sorted by name: the inherited variables of environ (the daemon's
// os.Environ()) and those named in passthrough, minus the daemon's settings, then the server's own env (which wins
// over an inherited value and may set any name). Like the TypeScript SDK it skips inherited values that start with
// "()" (exported shell functions, a Shellshock vector).
func childEnv(environ, passthrough []string, own map[string]string) []string {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !inherited(k, passthrough) || strings.HasPrefix(v, "()") {
			continue
		}
		env[k] = v
	}
	maps.Copy(env, own)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
