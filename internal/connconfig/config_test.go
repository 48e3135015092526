package connconfig

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, raw string
		want      Config
		ok        bool
	}{
		{"stdio", `{"command":"npx","args":["-y","srv"],"env":{"T":"${T}"},"cwd":"/tmp"}`,
			Config{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"T": "${T}"}, Cwd: "/tmp"}, true},
		{"sse", `{"url":"https://h/sse","headers":{"Authorization":"Bearer ${TOK}"}}`,
			Config{URL: "https://h/sse", Headers: map[string]string{"Authorization": "Bearer ${TOK}"}}, true},
		{"http insecure", `{"base_url":"http://h/mcp","allow_insecure_http":true}`,
			Config{BaseURL: "http://h/mcp", AllowInsecureHTTP: true}, true},
		{"unknown keys ignored", `{"command":"x","extra":1}`, Config{Command: "x"}, true},
		{"not an object", `["x"]`, Config{}, false},
		{"wrong type", `{"command":1}`, Config{}, false},
		{"not JSON", `{`, Config{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(json.RawMessage(tc.raw))
			if (err == nil) != tc.ok {
				t.Fatalf("Parse(%s) err = %v, want ok=%v", tc.raw, err, tc.ok)
			}
			if tc.ok && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%s) = %+v, want %+v", tc.raw, got, tc.want)
			}
		})
	}
}

func TestKeysAndEndpoint(t *testing.T) {
	c := Config{Command: "x", URL: "https://sse", BaseURL: "https://http"}
	tests := []struct {
		transport, required, endpoint string
		ok                            bool
	}{
		{"STDIO", "command", "", true},
		{"SSE", "url", "https://sse", true},
		{"HTTP", "base_url", "https://http", true},
		{"sse", "", "", false},
		{"", "", "", false},
	}
	for _, tc := range tests {
		allowed, required, ok := Keys(tc.transport)
		if ok != tc.ok || required != tc.required {
			t.Errorf("Keys(%q) = %v, %q, %v", tc.transport, allowed, required, ok)
		}
		if ok && allowed[len(allowed)-1] != "allow_insecure_http" {
			t.Errorf("Keys(%q): allow_insecure_http missing from %v", tc.transport, allowed)
		}
		if got := c.Endpoint(tc.transport); got != tc.endpoint {
			t.Errorf("Endpoint(%q) = %q, want %q", tc.transport, got, tc.endpoint)
		}
	}
}

func TestAllowsInsecureHTTP(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"allow_insecure_http":true}`:                       true,
		`{"base_url":"http://h","allow_insecure_http":true}`: true,
		`{"allow_insecure_http":false}`:                      false,
		`{"allow_insecure_http":"yes"}`:                      false,
		`{}`:                                                 false,
		``:                                                   false,
		`[true]`:                                             false,
	} {
		if got := AllowsInsecureHTTP(json.RawMessage(raw)); got != want {
			t.Errorf("AllowsInsecureHTTP(%s) = %v, want %v", raw, got, want)
		}
	}
}
