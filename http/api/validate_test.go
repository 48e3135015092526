package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
)

// locString renders a loc for comparison: body.connection_config.args.1
func locString(loc []any) string {
	parts := make([]string, len(loc))
	for i, p := range loc {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ".")
}

// hasError reports whether errs holds an error at loc of type typ.
func hasError(errs []FieldError, loc, typ string) bool {
	for _, e := range errs {
		if locString(e.Loc) == loc && e.Type == typ {
			return true
		}
	}
	return false
}

func TestValidateRegistrationValid(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantConfig string
		check      func(t *testing.T, gotAuto bool, desc, health *string)
	}{
		{
			name: "SSE with headers and ${VAR}",
			body: `{"name":"github-mcp","description":"GitHub <MCP> & co","transport_type":"SSE",
				"connection_config":{"url":"https://github-mcp.example.com/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}},
				"health_check_url":"https://github-mcp.example.com/health","auto_connect":true}`,
			wantConfig: `{"headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"},"url":"https://github-mcp.example.com/sse"}`,
			check: func(t *testing.T, auto bool, desc, health *string) {
				if !auto || desc == nil || *desc != "GitHub <MCP> & co" || health == nil {
					t.Errorf("auto=%v desc=%v health=%v", auto, desc, health)
				}
			},
		},
		{
			name:       "STDIO minimal, auto_connect defaults to true",
			body:       `{"name":"local_tools-2","transport_type":"STDIO","connection_config":{"command":"python"}}`,
			wantConfig: `{"command":"python"}`,
			check: func(t *testing.T, auto bool, desc, health *string) {
				if !auto || desc != nil || health != nil {
					t.Errorf("auto=%v desc=%v health=%v", auto, desc, health)
				}
			},
		},
		{
			name: "STDIO full, nulls as absent",
			body: `{"name":"l","transport_type":"STDIO","description":null,"health_check_url":null,"auto_connect":false,
				"connection_config":{"command":"npx","args":["-y","@scope/server",""],"env":{"DEBUG":"true","TOKEN":"${T}"},"cwd":"/tmp","allow_insecure_http":false}}`,
			wantConfig: `{"allow_insecure_http":false,"args":["-y","@scope/server",""],"command":"npx","cwd":"/tmp","env":{"DEBUG":"true","TOKEN":"${T}"}}`,
		},
		{
			name:       "HTTP with var host and empty args kept",
			body:       `{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"https://${HOST}:${PORT}/mcp","allow_insecure_http":true}}`,
			wantConfig: `{"allow_insecure_http":true,"base_url":"https://${HOST}:${PORT}/mcp"}`,
		},
		{
			name:       "URL entirely from the environment",
			body:       `{"name":"h","transport_type":"SSE","connection_config":{"url":"${MCP_URL}","headers":{}}}`,
			wantConfig: `{"headers":{},"url":"${MCP_URL}"}`,
		},
		{
			name:       "plain http to loopback",
			body:       `{"name":"h","transport_type":"SSE","connection_config":{"url":"http://127.0.0.5:9000/sse"},"health_check_url":"http://localhost:9000/health"}`,
			wantConfig: `{"url":"http://127.0.0.5:9000/sse"}`,
		},
		{
			name:       "plain http to IPv6 loopback",
			body:       `{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"http://[::1]:9000/mcp"}}`,
			wantConfig: `{"base_url":"http://[::1]:9000/mcp"}`,
		},
		{
			name:       "plain http allowed explicitly",
			body:       `{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"http://10.0.0.5/mcp","allow_insecure_http":true},"health_check_url":"http://10.0.0.5/health"}`,
			wantConfig: `{"allow_insecure_http":true,"base_url":"http://10.0.0.5/mcp"}`,
		},
		{
			name:       "plain http with the host from the environment is judged at connect time",
			body:       `{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"http://${MCP_HOST}:8080/mcp"}}`,
			wantConfig: `{"base_url":"http://${MCP_HOST}:8080/mcp"}`,
		},
		{
			name:       "name at max length",
			body:       `{"name":"` + "a" + strings.Repeat("b", MaxNameLength-1) + `","transport_type":"SSE","connection_config":{"url":"http://127.0.0.1:9000/sse"}}`,
			wantConfig: `{"url":"http://127.0.0.1:9000/sse"}`,
		},
		{
			name:       "description at max length in runes",
			body:       `{"name":"d","description":"` + strings.Repeat("é", MaxDescriptionLength) + `","transport_type":"SSE","connection_config":{"url":"https://h/sse"}}`,
			wantConfig: `{"url":"https://h/sse"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, errs := ValidateRegistration([]byte(tt.body))
			if errs != nil {
				t.Fatalf("unexpected errors: %+v", errs)
			}
			if !json.Valid(req.ConnectionConfig) {
				t.Fatalf("connection config not JSON: %s", req.ConnectionConfig)
			}
			if tt.wantConfig != "" && string(req.ConnectionConfig) != tt.wantConfig {
				t.Errorf("config = %s, want %s", req.ConnectionConfig, tt.wantConfig)
			}
			if req.Actor != "" || req.IP != "" {
				t.Errorf("actor/ip must be left to the caller: %q %q", req.Actor, req.IP)
			}
			if tt.check != nil {
				tt.check(t, req.AutoConnect, req.Description, req.HealthCheckURL)
			}
		})
	}
}

func TestValidateRegistrationErrors(t *testing.T) {
	valid := func(mut string) string { // a valid SSE body with extra top-level members appended
		return `{"name":"ok","transport_type":"SSE","connection_config":{"url":"https://h/sse"}` + mut + `}`
	}
	tests := []struct {
		name string
		body string
		loc  string
		typ  string
	}{
		// whole body
		{"empty body", ``, "body", FieldMissing},
		{"whitespace body", " \n\t", "body", FieldMissing},
		{"malformed JSON", `{"name":`, "body", FieldJSONInvalid},
		{"trailing garbage", valid("") + `x`, "body", FieldJSONInvalid},
		{"two values", valid("") + ` {}`, "body", FieldJSONInvalid},
		{"not UTF-8", "{\"name\":\"\xff\"}", "body", FieldJSONInvalid},
		{"array body", `[1,2]`, "body", FieldTypeError},
		{"string body", `"x"`, "body", FieldTypeError},
		{"null body", `null`, "body", FieldTypeError},
		// name
		{"name missing", `{"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldMissing},
		{"name number", `{"name":1,"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldTypeError},
		{"name null", `{"name":null,"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldTypeError},
		{"name empty", `{"name":"","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name uppercase", `{"name":"GitHub","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name starts with digit", `{"name":"1abc","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name starts with dash", `{"name":"-abc","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name with dot", `{"name":"a.b","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name with space", `{"name":"a b","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name trailing newline", `{"name":"abc\n","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name with NUL", `{"name":"a\u0000","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		{"name too long", `{"name":"a` + strings.Repeat("b", MaxNameLength) + `","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", FieldValueError},
		// description
		{"description too long", valid(`,"description":"` + strings.Repeat("x", MaxDescriptionLength+1) + `"`), "body.description", FieldValueError},
		{"description number", valid(`,"description":5`), "body.description", FieldTypeError},
		{"description NUL", valid(`,"description":"a\u0000b"`), "body.description", FieldValueError},
		// transport_type
		{"transport missing", `{"name":"a","connection_config":{"url":"https://h"}}`, "body.transport_type", FieldMissing},
		{"transport unknown", `{"name":"a","transport_type":"WS","connection_config":{"url":"https://h"}}`, "body.transport_type", FieldValueError},
		{"transport lowercase", `{"name":"a","transport_type":"sse","connection_config":{"url":"https://h"}}`, "body.transport_type", FieldValueError},
		{"transport bool", `{"name":"a","transport_type":true,"connection_config":{"url":"https://h"}}`, "body.transport_type", FieldTypeError},
		// connection_config
		{"config missing", `{"name":"a","transport_type":"SSE"}`, "body.connection_config", FieldMissing},
		{"config string", `{"name":"a","transport_type":"SSE","connection_config":"https://h"}`, "body.connection_config", FieldTypeError},
		{"config array", `{"name":"a","transport_type":"SSE","connection_config":[]}`, "body.connection_config", FieldTypeError},
		{"config null", `{"name":"a","transport_type":"SSE","connection_config":null}`, "body.connection_config", FieldTypeError},
		{"SSE without url", `{"name":"a","transport_type":"SSE","connection_config":{}}`, "body.connection_config.url", FieldValueError},
		{"SSE url null", `{"name":"a","transport_type":"SSE","connection_config":{"url":null}}`, "body.connection_config.url", FieldValueError},
		{"SSE with base_url", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","base_url":"https://h"}}`, "body.connection_config.base_url", FieldExtraForbidden},
		{"SSE with command", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","command":"x"}}`, "body.connection_config.command", FieldExtraForbidden},
		{"SSE url relative", `{"name":"a","transport_type":"SSE","connection_config":{"url":"/sse"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url ftp", `{"name":"a","transport_type":"SSE","connection_config":{"url":"ftp://h/sse"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url no host", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https:///sse"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url opaque", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https:h"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url space", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h/a b"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url bad port", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h:abc/"}}`, "body.connection_config.url", FieldValueError},
		{"SSE url number", `{"name":"a","transport_type":"SSE","connection_config":{"url":42}}`, "body.connection_config.url", FieldTypeError},
		{"SSE headers array", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":["a"]}}`, "body.connection_config.headers", FieldTypeError},
		{"SSE header value number", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X":1}}}`, "body.connection_config.headers.X", FieldTypeError},
		{"SSE header value CRLF", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X":"a\r\nEvil: 1"}}}`, "body.connection_config.headers.X", FieldValueError},
		{"SSE header name invalid", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"Bad Name":"v"}}}`, "body.connection_config.headers.Bad Name", FieldValueError},
		{"SSE header twice by case", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X-A":"1","x-a":"2"}}}`, "body.connection_config.headers.x-a", FieldValueError},
		{"HTTP without base_url", `{"name":"a","transport_type":"HTTP","connection_config":{"url":"https://h"}}`, "body.connection_config.base_url", FieldValueError},
		{"HTTP with url is extra", `{"name":"a","transport_type":"HTTP","connection_config":{"url":"https://h"}}`, "body.connection_config.url", FieldExtraForbidden},
		{"HTTP base_url bad", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"not a url"}}`, "body.connection_config.base_url", FieldValueError},
		{"allow_insecure_http string", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h","allow_insecure_http":"yes"}}`, "body.connection_config.allow_insecure_http", FieldTypeError},
		// TLS 1.2+: plain http only to loopback or with allow_insecure_http
		{"SSE plain http to a remote host", `{"name":"a","transport_type":"SSE","connection_config":{"url":"http://h/sse"}}`, "body.connection_config.url", FieldValueError},
		{"HTTP plain http to a LAN address", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://10.0.0.5:8080/mcp"}}`, "body.connection_config.base_url", FieldValueError},
		{"plain http, insecure explicitly off", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"HTTP://h.example/${P}","allow_insecure_http":false}}`, "body.connection_config.base_url", FieldValueError},
		{"plain http to a name like localhost", `{"name":"a","transport_type":"SSE","connection_config":{"url":"http://localhost.evil.example/sse"}}`, "body.connection_config.url", FieldValueError},
		{"health url plain http remote", valid(`,"health_check_url":"http://h/health"`), "body.health_check_url", FieldValueError},
		{"STDIO without command", `{"name":"a","transport_type":"STDIO","connection_config":{"args":["x"]}}`, "body.connection_config.command", FieldValueError},
		{"STDIO command empty", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"  "}}`, "body.connection_config.command", FieldValueError},
		{"STDIO command array", `{"name":"a","transport_type":"STDIO","connection_config":{"command":["python"]}}`, "body.connection_config.command", FieldTypeError},
		{"STDIO args string", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","args":"-m x"}}`, "body.connection_config.args", FieldTypeError},
		{"STDIO args element number", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","args":["a",2]}}`, "body.connection_config.args.1", FieldTypeError},
		{"STDIO env array", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":["A=1"]}}`, "body.connection_config.env", FieldTypeError},
		{"STDIO env value bool", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"A":true}}}`, "body.connection_config.env.A", FieldTypeError},
		{"STDIO env key with =", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"A=B":"1"}}}`, "body.connection_config.env.A=B", FieldValueError},
		{"STDIO env empty key", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"":"1"}}}`, "body.connection_config.env.", FieldValueError},
		{"STDIO cwd number", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","cwd":1}}`, "body.connection_config.cwd", FieldTypeError},
		{"STDIO url is extra", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","url":"https://h"}}`, "body.connection_config.url", FieldExtraForbidden},
		{"config duplicate key", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","command":"q"}}`, "body.connection_config.command", FieldValueError},
		// health_check_url
		{"health url relative", valid(`,"health_check_url":"/health"`), "body.health_check_url", FieldValueError},
		{"health url empty", valid(`,"health_check_url":""`), "body.health_check_url", FieldValueError},
		{"health url javascript", valid(`,"health_check_url":"javascript:alert(1)"`), "body.health_check_url", FieldValueError},
		{"health url object", valid(`,"health_check_url":{}`), "body.health_check_url", FieldTypeError},
		// auto_connect
		{"auto_connect string", valid(`,"auto_connect":"true"`), "body.auto_connect", FieldTypeError},
		{"auto_connect number", valid(`,"auto_connect":1`), "body.auto_connect", FieldTypeError},
		{"auto_connect null", valid(`,"auto_connect":null`), "body.auto_connect", FieldTypeError},
		// strictness
		{"unknown field", valid(`,"id":"x"`), "body.id", FieldExtraForbidden},
		{"unknown field status", valid(`,"status":"CONNECTED"`), "body.status", FieldExtraForbidden},
		{"duplicate top key", valid(`,"name":"other"`), "body.name", FieldValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, errs := ValidateRegistration([]byte(tt.body))
			if len(errs) == 0 {
				t.Fatalf("want error at %s (%s), got none; req=%+v", tt.loc, tt.typ, req)
			}
			if !hasError(errs, tt.loc, tt.typ) {
				t.Fatalf("want error at %s (%s), got %+v", tt.loc, tt.typ, errs)
			}
			if !reflect.DeepEqual(req, actors.RegisterRequest{}) {
				t.Errorf("request must be zero on error, got %+v", req)
			}
			for _, e := range errs {
				if len(e.Loc) == 0 || e.Loc[0] != "body" || e.Msg == "" || e.Type == "" {
					t.Errorf("malformed field error %+v", e)
				}
			}
		})
	}
}

func TestValidateRegistrationCollectsAllErrors(t *testing.T) {
	body := `{"name":"Bad Name","description":7,"transport_type":"STDIO","connection_config":{"args":[1],"url":"x"},
		"health_check_url":"nope","auto_connect":"yes","extra":1}`
	_, errs := ValidateRegistration([]byte(body))
	want := []struct{ loc, typ string }{
		{"body.name", FieldValueError},
		{"body.description", FieldTypeError},
		{"body.connection_config.command", FieldValueError},
		{"body.connection_config.args.0", FieldTypeError},
		{"body.connection_config.url", FieldExtraForbidden},
		{"body.health_check_url", FieldValueError},
		{"body.auto_connect", FieldTypeError},
		{"body.extra", FieldExtraForbidden},
	}
	for _, w := range want {
		if !hasError(errs, w.loc, w.typ) {
			t.Errorf("missing %s (%s) in %+v", w.loc, w.typ, errs)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d: %+v", len(errs), len(want), errs)
	}
}

func TestValidatePatch(t *testing.T) {
	tests := []struct {
		name      string
		transport string
		body      string
		wantErr   string // "loc type" of an expected error; "" for success
		check     func(t *testing.T, p persistence.ServerPatch)
	}{
		{name: "rename", transport: "SSE", body: `{"name":"new-name"}`, check: func(t *testing.T, p persistence.ServerPatch) {
			if p.Name == nil || *p.Name != "new-name" || p.Description != nil || p.ConnectionConfig != nil || p.ClearHealthCheckURL {
				t.Errorf("patch = %+v", p)
			}
		}},
		{name: "clear description and health url", transport: "SSE", body: `{"description":null,"health_check_url":null}`,
			check: func(t *testing.T, p persistence.ServerPatch) {
				if p.Description == nil || *p.Description != "" || !p.ClearHealthCheckURL || p.HealthCheckURL != nil {
					t.Errorf("patch = %+v", p)
				}
			}},
		{name: "config for STDIO", transport: "STDIO", body: `{"connection_config":{"command":"node","args":["s.js"]}}`,
			check: func(t *testing.T, p persistence.ServerPatch) {
				if string(p.ConnectionConfig) != `{"args":["s.js"],"command":"node"}` {
					t.Errorf("config = %s", p.ConnectionConfig)
				}
			}},
		{name: "health url set", transport: "HTTP", body: `{"health_check_url":"http://h/health"}`,
			check: func(t *testing.T, p persistence.ServerPatch) {
				if p.HealthCheckURL == nil || *p.HealthCheckURL != "http://h/health" {
					t.Errorf("patch = %+v", p)
				}
			}},
		{name: "empty object", transport: "SSE", body: `{}`, wantErr: "body " + FieldValueError},
		{name: "empty body", transport: "SSE", body: ``, wantErr: "body " + FieldMissing},
		{name: "malformed", transport: "SSE", body: `{`, wantErr: "body " + FieldJSONInvalid},
		{name: "transport change", transport: "SSE", body: `{"transport_type":"HTTP"}`, wantErr: "body.transport_type " + FieldExtraForbidden},
		{name: "auto_connect is not patchable", transport: "SSE", body: `{"name":"a","auto_connect":true}`, wantErr: "body.auto_connect " + FieldExtraForbidden},
		{name: "config of another transport", transport: "SSE", body: `{"connection_config":{"command":"x"}}`, wantErr: "body.connection_config.url " + FieldValueError},
		{name: "bad name", transport: "SSE", body: `{"name":"A"}`, wantErr: "body.name " + FieldValueError},
		{name: "name null", transport: "SSE", body: `{"name":null}`, wantErr: "body.name " + FieldTypeError},
		{name: "unknown stored transport", transport: "WS", body: `{"connection_config":{}}`, wantErr: "body.connection_config " + FieldValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, errs := ValidatePatch([]byte(tt.body), tt.transport)
			if tt.wantErr == "" {
				if errs != nil {
					t.Fatalf("unexpected errors %+v", errs)
				}
				tt.check(t, p)
				return
			}
			loc, typ, _ := strings.Cut(tt.wantErr, " ")
			if !hasError(errs, loc, typ) {
				t.Fatalf("want %s (%s), got %+v", loc, typ, errs)
			}
		})
	}
}

func TestValidateDisconnect(t *testing.T) {
	tests := []struct {
		body      string
		wantForce bool
		wantErr   string
	}{
		{body: ``},
		{body: "  \n"},
		{body: `null`},
		{body: `{}`},
		{body: `{"force":false}`},
		{body: `{"force":true}`, wantForce: true},
		{body: `{"force":null}`},
		{body: `{"force":"yes"}`, wantErr: "body.force"},
		{body: `{"force":true,"x":1}`, wantErr: "body.x"},
		{body: `[true]`, wantErr: "body"},
		{body: `{"force":`, wantErr: "body"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			force, errs := validateDisconnect([]byte(tt.body))
			if tt.wantErr != "" {
				if len(errs) == 0 || locString(errs[0].Loc) != tt.wantErr {
					t.Fatalf("want error at %s, got %+v", tt.wantErr, errs)
				}
				return
			}
			if errs != nil || force != tt.wantForce {
				t.Fatalf("force=%v errs=%+v, want %v", force, errs, tt.wantForce)
			}
		})
	}
}

func TestValidateCapsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"}`)
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, `,"x%d":1`, i)
	}
	b.WriteString(`}`)
	_, errs := ValidateRegistration([]byte(b.String()))
	if len(errs) != maxFieldErrors+1 || !strings.HasPrefix(errs[maxFieldErrors].Msg, "Too many errors") {
		t.Fatalf("got %d errors, last %+v", len(errs), errs[len(errs)-1])
	}
}
