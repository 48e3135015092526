package connconfig

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

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
		c, err := Resolve(json.RawMessage(cfg), lookup)
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
	}
	if c, err := Resolve(json.RawMessage(`{"command":"node","env":{"T":"${MY_TOKEN}"}}`), lookup); err != nil || c.Env["T"] != "the-secret-value" {
		t.Errorf("an ordinary reference: %v %v", c, err)
	}
}

func TestResolve(t *testing.T) {
	env := map[string]string{"HOST": "h.example", "TOK": "t0k", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name, raw string
		want      Config
		err       string // a part of the error, "" for none
	}{
		{"every string resolved",
			`{"command":"${HOST}","args":["--t=${TOK}"],"env":{"A":"${TOK}${TOK}"},"cwd":"/${EMPTY}x","url":"https://${HOST}/s",` +
				`"base_url":"https://${HOST}/m","headers":{"Authorization":"Bearer ${TOK}"}}`,
			Config{Command: "h.example", Args: []string{"--t=t0k"}, Env: map[string]string{"A": "t0kt0k"}, Cwd: "/x",
				URL: "https://h.example/s", BaseURL: "https://h.example/m", Headers: map[string]string{"Authorization": "Bearer t0k"}}, ""},
		{"no references", `{"command":"node","args":["$HOME","${not a ref}"]}`,
			Config{Command: "node", Args: []string{"$HOME", "${not a ref}"}}, ""},
		{"unset variable named, never its neighbours' values", `{"command":"x","args":["${TOK}-${UNSET}"]}`,
			Config{Command: "x", Args: []string{""}}, "UNSET referenced in connection_config is not set"},
		{"resolution stops at the first failure", `{"command":"${UNSET}","url":"https://${HOST}"}`,
			Config{URL: "https://${HOST}"}, "UNSET"},
		{"daemon setting", `{"command":"${DATABASE_URL}"}`, Config{}, "a setting of the aggregator itself"},
		{"not JSON", `{"command":`, Config{}, "parse connection_config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(json.RawMessage(tc.raw), lookup)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "t0k") {
				t.Errorf("the error shows a value: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestValidEnvName(t *testing.T) {
	for name, want := range map[string]bool{"PATH": true, "_x1": true, "a": true, "": false, "1A": false, "A-B": false, "A=B": false, "Ä": false} {
		if got := ValidEnvName(name); got != want {
			t.Errorf("ValidEnvName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestDaemonSettingReference(t *testing.T) {
	for s, want := range map[string]string{
		"${HOME}/x":                      "",
		"a ${MCP_URL} ${DATABASE_URL} b": "DATABASE_URL",
		"$DATABASE_URL":                  "",
		"${qdrant_api_key}":              "qdrant_api_key",
	} {
		if got := DaemonSettingReference(s); got != want {
			t.Errorf("DaemonSettingReference(%q) = %q, want %q", s, got, want)
		}
	}
}
