package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadConfig(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "defaults", env: map[string]string{}, check: func(t *testing.T, c config) {
			if c.Listen != "127.0.0.1:8081" || c.DatabaseURL != "" || !c.Enabled || c.MaxBodyBytes != 1<<20 {
				t.Fatalf("defaults: %+v", c)
			}
			a := c.Actors
			if a.MaxServers != 50 || a.HealthInterval != 30*time.Second || a.ConnectionTimeout != 30*time.Second ||
				a.RequestTimeout != time.Minute || a.Retry.Steady != time.Minute || a.HealthTimeout != 5*time.Second || a.NotifyRate != 100 {
				t.Fatalf("actor defaults: %+v", a)
			}
			if !filepath.IsAbs(c.DataDir) {
				t.Fatalf("data dir %q should be made absolute", c.DataDir)
			}
		}},
		{name: "seconds, fractions and durations", env: map[string]string{
			"MCP_AGGREGATOR_HEALTH_INTERVAL": "0.5", "MCP_AGGREGATOR_REQUEST_TIMEOUT": "1500ms", "MCP_AGGREGATOR_RETRY_INTERVAL": "0",
		}, check: func(t *testing.T, c config) {
			if c.Actors.HealthInterval != 500*time.Millisecond || c.Actors.RequestTimeout != 1500*time.Millisecond || c.Actors.Retry.Steady != 0 {
				t.Fatalf("%+v", c.Actors)
			}
		}},
		{name: "disabled", env: map[string]string{"MCP_AGGREGATOR_ENABLED": "false"}, check: func(t *testing.T, c config) {
			if c.Enabled {
				t.Fatal("want disabled")
			}
		}},
		{name: "blank means default", env: map[string]string{"MCP_AGGREGATOR_MAX_SERVERS": "  "}, check: func(t *testing.T, c config) {
			if c.Actors.MaxServers != 50 {
				t.Fatalf("max servers %d", c.Actors.MaxServers)
			}
		}},
		{name: "bad number", env: map[string]string{"MCP_AGGREGATOR_MAX_SERVERS": "lots"}, wantErr: "MCP_AGGREGATOR_MAX_SERVERS"},
		{name: "notify rate", env: map[string]string{"MCP_AGGREGATOR_NOTIFY_RATE": "2.5"}, check: func(t *testing.T, c config) {
			if c.Actors.NotifyRate != 2.5 {
				t.Fatalf("notify rate %v", c.Actors.NotifyRate)
			}
		}},
		{name: "notify rate off", env: map[string]string{"MCP_AGGREGATOR_NOTIFY_RATE": "0"}, check: func(t *testing.T, c config) {
			if c.Actors.NotifyRate != 0 {
				t.Fatalf("notify rate %v", c.Actors.NotifyRate)
			}
		}},
		{name: "actor metrics off by default", env: map[string]string{}, check: func(t *testing.T, c config) {
			if c.ActorMetrics {
				t.Fatal("protoactor's instruments on by default")
			}
		}},
		{name: "actor metrics on", env: map[string]string{"MCP_AGGREGATOR_ACTOR_METRICS": "true"}, check: func(t *testing.T, c config) {
			if !c.ActorMetrics {
				t.Fatal("MCP_AGGREGATOR_ACTOR_METRICS=true left them off")
			}
		}},
		{name: "bad actor metrics", env: map[string]string{"MCP_AGGREGATOR_ACTOR_METRICS": "sometimes"}, wantErr: "MCP_AGGREGATOR_ACTOR_METRICS"},
		{name: "negative notify rate", env: map[string]string{"MCP_AGGREGATOR_NOTIFY_RATE": "-1"}, wantErr: "MCP_AGGREGATOR_NOTIFY_RATE"},
		{name: "zero interval", env: map[string]string{"MCP_AGGREGATOR_HEALTH_INTERVAL": "0"}, wantErr: "MCP_AGGREGATOR_HEALTH_INTERVAL"},
		{name: "negative timeout", env: map[string]string{"MCP_AGGREGATOR_CONNECTION_TIMEOUT": "-1"}, wantErr: "MCP_AGGREGATOR_CONNECTION_TIMEOUT"},
		{name: "bad bool", env: map[string]string{"MCP_AGGREGATOR_ENABLED": "maybe"}, wantErr: "MCP_AGGREGATOR_ENABLED"},
		{name: "bad level", env: map[string]string{"MCP_AGGREGATOR_LOG_LEVEL": "loud"}, wantErr: "MCP_AGGREGATOR_LOG_LEVEL"},
		{name: "credential keys", env: map[string]string{"MCP_CREDENTIAL_KEY": strings.Repeat("ab", 32),
			"MCP_CREDENTIAL_KEY_PREVIOUS": "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA="}, check: func(t *testing.T, c config) {
			if len(c.CredentialKey) != 32 || c.CredentialKey[0] != 0xab || len(c.CredentialKeyPrevious) != 32 {
				t.Fatalf("keys %x %x", c.CredentialKey, c.CredentialKeyPrevious)
			}
		}},
		{name: "credential key of the wrong size", env: map[string]string{"MCP_CREDENTIAL_KEY": "c2hvcnQta2V5LXNlY3JldA=="}, wantErr: "MCP_CREDENTIAL_KEY: want 32 bytes"},
		{name: "previous key not a key", env: map[string]string{"MCP_CREDENTIAL_KEY_PREVIOUS": "hunter2-passphrase"}, wantErr: "MCP_CREDENTIAL_KEY_PREVIOUS"},
		{name: "every error at once", env: map[string]string{"MCP_AGGREGATOR_LOG_FORMAT": "xml", "MCP_AGGREGATOR_MAX_BODY_BYTES": "0"},
			wantErr: "MCP_AGGREGATOR_LOG_FORMAT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadConfig(lookupFrom(c.env))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("want error naming %s, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
	_, err := loadConfig(lookupFrom(map[string]string{"MCP_AGGREGATOR_LOG_FORMAT": "xml", "MCP_AGGREGATOR_MAX_BODY_BYTES": "0"}))
	if err == nil || !strings.Contains(err.Error(), "MCP_AGGREGATOR_MAX_BODY_BYTES") {
		t.Fatalf("all bad values must be reported together: %v", err)
	}
	// A bad key is reported without its value: it is a secret.
	_, err = loadConfig(lookupFrom(map[string]string{"MCP_CREDENTIAL_KEY": "hunter2-passphrase"}))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad key error: %v", err)
	}
}

// TestConfigTableMatchesReadme keeps README's configuration table true: every variable with its default.
func TestConfigTableMatchesReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envVars() {
		def := e.Default
		if def == "" {
			def = "(unset)"
		}
		row := "| `" + e.Name + "` | `" + def + "` |"
		if !bytes.Contains(readme, []byte(row)) {
			t.Errorf("README lacks the row %q", row)
		}
	}
}

func TestRunCommands(t *testing.T) {
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"version"}, 0, "aggregator "},
		{[]string{}, 2, "usage"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"help"}, 0, "serve"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != c.code || !strings.Contains(out.String()+errb.String(), c.out) {
			t.Errorf("run(%v) = %d, %q %q", c.args, code, out.String(), errb.String())
		}
	}
}

func TestConsoleURL(t *testing.T) {
	for _, tc := range []struct {
		set, listen, want string
		bad               bool
	}{
		{listen: "127.0.0.1:8081", want: "http://127.0.0.1:8081/ui/"},
		{listen: "agg.internal:80", want: "http://agg.internal:80/ui/"},
		{listen: "0.0.0.0:8081", want: ""},
		{listen: "[::]:8081", want: ""},
		{set: "https://agg.example.com/ui", listen: "0.0.0.0:8081", want: "https://agg.example.com/ui/"},
		{set: "ftp://agg.example.com/ui/", bad: true},
		{set: "https://agg.example.com/ui/#x", bad: true},
		{set: "https://user:pw@agg.example.com/ui/", bad: true},
	} {
		got, err := consoleURL(tc.set, tc.listen)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("consoleURL(%q, %q) = %q, %v; want %q (error %v)", tc.set, tc.listen, got, err, tc.want, tc.bad)
		}
	}
}
