package backend

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// TestChildEnv: a stdio child inherits only the minimal set and the listed names, never the daemon's settings
// (even when listed), and its own env wins.
func TestChildEnv(t *testing.T) {
	daemon := []string{
		"PATH=/usr/bin", "HOME=/root", "USER=u", "LOGNAME=u", "SHELL=/bin/sh", "TERM=xterm", "LANG=C.UTF-8",
		"LC_ALL=C", "TZ=UTC", "TMPDIR=/tmp",
		"MCP_AGGREGATOR_ADMIN_TOKENS=ops:admin-token", "MCP_AGGREGATOR_CLIENT_TOKENS=client-token",
		"MCP_CREDENTIAL_KEY=key", "MCP_CREDENTIAL_KEY_PREVIOUS=old", "DATABASE_URL=postgres://u:pw@h/db",
		"QDRANT_API_KEY=q", "MCP_AGGREGATOR_PGROUP=parent-marker", "AWS_SECRET_ACCESS_KEY=aws", "GITHUB_TOKEN=gh",
		"NODE_OPTIONS=--x", "BASH_FUNC_f%%=() { :; }", "TERM_FN=1", "MALFORMED",
	}
	tests := []struct {
		name        string
		passthrough []string
		own         map[string]string
		want        []string
	}{
		{name: "minimal set",
			want: []string{"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "LOGNAME=u", "PATH=/usr/bin", "SHELL=/bin/sh",
				"TERM=xterm", "TMPDIR=/tmp", "TZ=UTC", "USER=u"}},
		{name: "passthrough", passthrough: []string{"GITHUB_TOKEN", "NODE_OPTIONS", "UNSET_ONE"},
			want: []string{"GITHUB_TOKEN=gh", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "LOGNAME=u", "NODE_OPTIONS=--x",
				"PATH=/usr/bin", "SHELL=/bin/sh", "TERM=xterm", "TMPDIR=/tmp", "TZ=UTC", "USER=u"}},
		{name: "daemon settings never pass, even listed",
			passthrough: []string{"MCP_AGGREGATOR_ADMIN_TOKENS", "MCP_CREDENTIAL_KEY", "DATABASE_URL", "QDRANT_API_KEY", "mcp_credential_key"},
			want: []string{"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "LOGNAME=u", "PATH=/usr/bin", "SHELL=/bin/sh",
				"TERM=xterm", "TMPDIR=/tmp", "TZ=UTC", "USER=u"}},
		{name: "own env wins and may set any name",
			own: map[string]string{"PATH": "/opt/bin", "DATABASE_URL": "postgres://backend-own", "API_KEY": "k"},
			want: []string{"API_KEY=k", "DATABASE_URL=postgres://backend-own", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C",
				"LOGNAME=u", "PATH=/opt/bin", "SHELL=/bin/sh", "TERM=xterm", "TMPDIR=/tmp", "TZ=UTC", "USER=u"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := childEnv(daemon, tt.passthrough, tt.own); !slices.Equal(got, tt.want) {
				t.Errorf("childEnv:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
	// A shell function exported by name in the passthrough list is skipped.
	if got := childEnv([]string{"F=() { evil; }"}, []string{"F"}, nil); len(got) != 0 {
		t.Errorf("exported function passed: %q", got)
	}
}

// TestDialRefusesDaemonSettings: a configuration stored before registration refused references to the
// daemon's settings cannot connect: the server goes to ERROR (Dial is what the actor calls), and the
// reference is never looked up (connconfig.Resolve).
func TestDialRefusesDaemonSettings(t *testing.T) {
	lookup := func(k string) (string, bool) {
		if connconfig.IsDaemonSetting(k) {
			t.Errorf("looked up %s", k)
		}
		return "the-secret-value", true
	}
	// Every field's rule is connconfig's (TestResolveRefusesDaemonSettings); here, that a transport is built through it.
	for _, cfg := range []string{
		`{"command":"node","env":{"LEAK":"${MCP_CREDENTIAL_KEY}"}}`,
		`{"base_url":"https://h/mcp","headers":{"Authorization":"Bearer ${MCP_AGGREGATOR_CLIENT_TOKENS}"}}`,
	} {
		_, err := Dial(persistence.Server{TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(cfg)},
			Options{Env: lookup})
		if err == nil || !strings.Contains(err.Error(), "a setting of the aggregator itself") || strings.Contains(err.Error(), "the-secret-value") {
			t.Errorf("%s: Dial: %v", cfg, err)
		}
	}
}

// TestDialChildEnv: the command of a stdio server gets the built environment, not os.Environ().
func TestDialChildEnv(t *testing.T) {
	t.Setenv("MCP_AGGREGATOR_ADMIN_TOKENS", "ops:admin-secret-token-x")
	t.Setenv("MCP_CREDENTIAL_KEY", "cred-key-x")
	t.Setenv("PASSED_ON", "yes")
	t.Setenv("NOT_PASSED", "no")
	o := Options{Groups: NewProcGroups(t.TempDir(), slog.Default()), StdioEnvPassthrough: []string{"PASSED_ON"}}
	b, err := Dial(persistence.Server{TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"node","env":{"OWN":"1","MCP_AGGREGATOR_PGROUP":"forged"}}`)}, o)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(b.proc.cmd.Env, "\n")
	for _, bad := range []string{"admin-secret-token-x", "cred-key-x", "NOT_PASSED", "forged"} {
		if strings.Contains(env, bad) {
			t.Errorf("child env holds %s:\n%s", bad, env)
		}
	}
	for _, good := range []string{"PASSED_ON=yes", "OWN=1", "PATH=", "MCP_AGGREGATOR_PGROUP=" + b.proc.group.marker} {
		if !strings.Contains(env, good) {
			t.Errorf("child env lacks %s:\n%s", good, env)
		}
	}
}
