package actors

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

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

func TestIsDaemonSetting(t *testing.T) {
	for name, want := range map[string]bool{
		"MCP_AGGREGATOR_ADMIN_TOKENS": true, "MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH": true, "MCP_CREDENTIAL_KEY": true,
		"MCP_CREDENTIAL_KEY_PREVIOUS": true, "DATABASE_URL": true, "TEST_DATABASE_URL": true, "QDRANT_URL": true,
		"qdrant_api_key": true, "MCP_AGGREGATOR_PGROUP": true,
		"PATH": false, "MY_DATABASE_URL": false, "GITHUB_TOKEN": false, "MCP_URL": false, "MCP_AGGREGATOR": false,
	} {
		if got := IsDaemonSetting(name); got != want {
			t.Errorf("IsDaemonSetting(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestResolveRefusesDaemonSettings: at connect time a reference to a daemon setting (a configuration stored
// before registration refused them) is an error naming the variable; its value is never read or returned.
func TestResolveRefusesDaemonSettings(t *testing.T) {
	read := []string{}
	lookup := func(k string) (string, bool) {
		read = append(read, k)
		return "the-secret-value", true
	}
	for _, cfg := range []string{
		`{"command":"node","env":{"LEAK":"${MCP_CREDENTIAL_KEY}"}}`,
		`{"command":"node","args":["--db=${DATABASE_URL}"]}`,
		`{"command":"${MCP_AGGREGATOR_ADMIN_TOKENS}"}`,
		`{"url":"https://h/${QDRANT_API_KEY}"}`,
		`{"base_url":"https://h/mcp","headers":{"Authorization":"Bearer ${MCP_AGGREGATOR_CLIENT_TOKENS}"}}`,
	} {
		read = read[:0]
		c, err := resolveConfig(json.RawMessage(cfg), lookup)
		if err == nil || !strings.Contains(err.Error(), "a setting of the aggregator itself") {
			t.Errorf("%s: err %v", cfg, err)
			continue
		}
		if b, _ := json.Marshal(c); strings.Contains(string(b), "the-secret-value") || strings.Contains(err.Error(), "the-secret-value") {
			t.Errorf("%s: the value was resolved: %s / %v", cfg, b, err)
		}
		for _, k := range read {
			if IsDaemonSetting(k) {
				t.Errorf("%s: looked up %s", cfg, k)
			}
		}
		// The server goes to ERROR with that message (buildTransport is what the actor calls).
		if _, err := buildTransport(persistence.Server{TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(cfg)},
			(&Deps{Env: lookup}).withDefaults(), nil); err == nil {
			t.Errorf("%s: buildTransport accepted it", cfg)
		}
	}
	if c, err := resolveConfig(json.RawMessage(`{"command":"node","env":{"T":"${MY_TOKEN}"}}`), lookup); err != nil || c.Env["T"] != "the-secret-value" {
		t.Errorf("an ordinary reference: %v %v", c, err)
	}
}

// TestBuildTransportChildEnv: the command of a stdio server gets the built environment, not os.Environ().
func TestBuildTransportChildEnv(t *testing.T) {
	t.Setenv("MCP_AGGREGATOR_ADMIN_TOKENS", "ops:admin-secret-token-x")
	t.Setenv("MCP_CREDENTIAL_KEY", "cred-key-x")
	t.Setenv("PASSED_ON", "yes")
	t.Setenv("NOT_PASSED", "no")
	d := (&Deps{DataDir: t.TempDir(), Config: Config{StdioEnvPassthrough: []string{"PASSED_ON"}}}).withDefaults()
	b, err := buildTransport(persistence.Server{TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"node","env":{"OWN":"1","MCP_AGGREGATOR_PGROUP":"forged"}}`)}, d, nil)
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
