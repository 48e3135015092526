package connconfig

import (
	"encoding/json"
	"testing"
)

func TestMask(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"secret headers masked, references and other headers shown",
			`{"url":"https://h/sse","headers":{"Authorization":"Bearer abc123","Proxy-Authorization":"Basic dXNlcjpwYXNz",` +
				`"X-API-Key":"k-123","Cookie":"a=b","Set-Cookie":"s=1","Accept":"application/json","X-Custom":"Bearer zzz9",` +
				`"X-Auth-Token":"${A}-${B}","X-Session-Id":"prefix-${X}","x-github-token":"${GITHUB_TOKEN}","Authorization2":"Bearer ${TOKEN}"}}`,
			`{"headers":{"Accept":"application/json","Authorization":"Bearer ***","Authorization2":"Bearer ${TOKEN}",` +
				`"Cookie":"***","Proxy-Authorization":"Basic ***","Set-Cookie":"***","X-API-Key":"***","X-Auth-Token":"${A}-${B}",` +
				`"X-Custom":"Bearer ***","X-Session-Id":"***","x-github-token":"${GITHUB_TOKEN}"},"url":"https://h/sse"}`},
		{"every env value masked unless a reference",
			`{"command":"npx","env":{"DEBUG":"true","TOKEN":"${T}","MIX":"x${T}","EMPTY":"","PAIR":"${U}:${P}"}}`,
			`{"command":"npx","env":{"DEBUG":"***","EMPTY":"","MIX":"***","PAIR":"${U}:${P}","TOKEN":"${T}"}}`},
		{"URL credentials and secret query parameters",
			`{"url":"https://user:pa55@h.example/sse?api_key=abc&page=2&access_token=${TOK}#frag","allow_insecure_http":false}`,
			`{"allow_insecure_http":false,"url":"https://user:***@h.example/sse?api_key=***&page=2&access_token=${TOK}#frag"}`},
		{"token as URL user", `{"base_url":"https://tok3n@github.example/x"}`, `{"base_url":"https://***@github.example/x"}`},
		{"URL credentials from references", `{"base_url":"https://${U}:${P}@h/mcp?sig=${S}"}`, `{"base_url":"https://${U}:${P}@h/mcp?sig=${S}"}`},
		{"URL from the environment", `{"url":"${MCP_URL}"}`, `{"url":"${MCP_URL}"}`},
		{"secret arguments",
			`{"command":"x","args":["--api-key=abc","--token","xyz","--port","8080","postgres://u:pw@db/x","TOKEN=abc",` +
				`"Authorization: Bearer abc","--password","${PW}","-v","plain","--secret","--next"]}`,
			`{"args":["--api-key=***","--token","***","--port","8080","postgres://u:***@db/x","TOKEN=***",` +
				`"Authorization: Bearer ***","--password","${PW}","-v","plain","--secret","--next"],"command":"x"}`},
		{"numbers and unknown keys kept", `{"base_url":"https://h","n":1.50,"list":[1,"a",null]}`, `{"base_url":"https://h","list":[1,"a",null],"n":1.50}`},
		{"no secrets: unchanged", `{"command":"python","args":["-m","srv"]}`, `{"args":["-m","srv"],"command":"python"}`},
		{"not an object", `["a"]`, `null`},
		{"not JSON", `{"a":`, `null`},
		{"empty", ``, `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Mask(json.RawMessage(tc.in))
			if got == nil {
				got = json.RawMessage("null")
			}
			if string(got) != tc.want {
				t.Errorf("Mask(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}
