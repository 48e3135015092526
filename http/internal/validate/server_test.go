package validate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// hasError reports whether errs holds an error at loc of type typ.
func hasError(errs []apierror.FieldError, loc, typ string) bool {
	for _, e := range errs {
		if e.Path() == loc && e.Type == typ {
			return true
		}
	}
	return false
}

func TestRegistrationValid(t *testing.T) {
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
			req, errs := Registration([]byte(tt.body), Outbound(nil))
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

func TestRegistrationErrors(t *testing.T) {
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
		{"empty body", ``, "body", apierror.FieldMissing},
		{"whitespace body", " \n\t", "body", apierror.FieldMissing},
		{"malformed JSON", `{"name":`, "body", apierror.FieldJSONInvalid},
		{"trailing garbage", valid("") + `x`, "body", apierror.FieldJSONInvalid},
		{"two values", valid("") + ` {}`, "body", apierror.FieldJSONInvalid},
		{"not UTF-8", "{\"name\":\"\xff\"}", "body", apierror.FieldJSONInvalid},
		{"array body", `[1,2]`, "body", apierror.FieldTypeError},
		{"string body", `"x"`, "body", apierror.FieldTypeError},
		{"null body", `null`, "body", apierror.FieldTypeError},
		// name
		{"name missing", `{"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldMissing},
		{"name number", `{"name":1,"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldTypeError},
		{"name null", `{"name":null,"transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldTypeError},
		{"name empty", `{"name":"","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name uppercase", `{"name":"GitHub","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name starts with digit", `{"name":"1abc","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name starts with dash", `{"name":"-abc","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name with dot", `{"name":"a.b","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name with space", `{"name":"a b","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name trailing newline", `{"name":"abc\n","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name with NUL", `{"name":"a\u0000","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		{"name too long", `{"name":"a` + strings.Repeat("b", MaxNameLength) + `","transport_type":"SSE","connection_config":{"url":"https://h"}}`, "body.name", apierror.FieldValueError},
		// description
		{"description too long", valid(`,"description":"` + strings.Repeat("x", MaxDescriptionLength+1) + `"`), "body.description", apierror.FieldValueError},
		{"description number", valid(`,"description":5`), "body.description", apierror.FieldTypeError},
		{"description NUL", valid(`,"description":"a\u0000b"`), "body.description", apierror.FieldValueError},
		// transport_type
		{"transport missing", `{"name":"a","connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldMissing},
		{"transport unknown", `{"name":"a","transport_type":"WS","connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldValueError},
		{"transport lowercase", `{"name":"a","transport_type":"sse","connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldValueError},
		{"transport bool", `{"name":"a","transport_type":true,"connection_config":{"url":"https://h"}}`, "body.transport_type", apierror.FieldTypeError},
		// connection_config
		{"config missing", `{"name":"a","transport_type":"SSE"}`, "body.connection_config", apierror.FieldMissing},
		{"config string", `{"name":"a","transport_type":"SSE","connection_config":"https://h"}`, "body.connection_config", apierror.FieldTypeError},
		{"config array", `{"name":"a","transport_type":"SSE","connection_config":[]}`, "body.connection_config", apierror.FieldTypeError},
		{"config null", `{"name":"a","transport_type":"SSE","connection_config":null}`, "body.connection_config", apierror.FieldTypeError},
		{"SSE without url", `{"name":"a","transport_type":"SSE","connection_config":{}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url null", `{"name":"a","transport_type":"SSE","connection_config":{"url":null}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE with base_url", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","base_url":"https://h"}}`, "body.connection_config.base_url", apierror.FieldExtraForbidden},
		{"SSE with command", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","command":"x"}}`, "body.connection_config.command", apierror.FieldExtraForbidden},
		{"SSE url relative", `{"name":"a","transport_type":"SSE","connection_config":{"url":"/sse"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url ftp", `{"name":"a","transport_type":"SSE","connection_config":{"url":"ftp://h/sse"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url no host", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https:///sse"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url opaque", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https:h"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url space", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h/a b"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url bad port", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h:abc/"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"SSE url number", `{"name":"a","transport_type":"SSE","connection_config":{"url":42}}`, "body.connection_config.url", apierror.FieldTypeError},
		{"SSE headers array", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":["a"]}}`, "body.connection_config.headers", apierror.FieldTypeError},
		{"SSE header value number", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X":1}}}`, "body.connection_config.headers.X", apierror.FieldTypeError},
		{"SSE header value CRLF", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X":"a\r\nEvil: 1"}}}`, "body.connection_config.headers.X", apierror.FieldValueError},
		{"SSE header name invalid", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"Bad Name":"v"}}}`, "body.connection_config.headers.Bad Name", apierror.FieldValueError},
		{"SSE header twice by case", `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h","headers":{"X-A":"1","x-a":"2"}}}`, "body.connection_config.headers.x-a", apierror.FieldValueError},
		{"HTTP without base_url", `{"name":"a","transport_type":"HTTP","connection_config":{"url":"https://h"}}`, "body.connection_config.base_url", apierror.FieldValueError},
		{"HTTP with url is extra", `{"name":"a","transport_type":"HTTP","connection_config":{"url":"https://h"}}`, "body.connection_config.url", apierror.FieldExtraForbidden},
		{"HTTP base_url bad", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"not a url"}}`, "body.connection_config.base_url", apierror.FieldValueError},
		{"allow_insecure_http string", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h","allow_insecure_http":"yes"}}`, "body.connection_config.allow_insecure_http", apierror.FieldTypeError},
		// TLS 1.2+: plain http only to loopback or with allow_insecure_http
		{"SSE plain http to a remote host", `{"name":"a","transport_type":"SSE","connection_config":{"url":"http://h/sse"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"HTTP plain http to a LAN address", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://10.0.0.5:8080/mcp"}}`, "body.connection_config.base_url", apierror.FieldValueError},
		{"plain http, insecure explicitly off", `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"HTTP://h.example/${P}","allow_insecure_http":false}}`, "body.connection_config.base_url", apierror.FieldValueError},
		{"plain http to a name like localhost", `{"name":"a","transport_type":"SSE","connection_config":{"url":"http://localhost.evil.example/sse"}}`, "body.connection_config.url", apierror.FieldValueError},
		{"health url plain http remote", valid(`,"health_check_url":"http://h/health"`), "body.health_check_url", apierror.FieldValueError},
		{"STDIO without command", `{"name":"a","transport_type":"STDIO","connection_config":{"args":["x"]}}`, "body.connection_config.command", apierror.FieldValueError},
		{"STDIO command empty", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"  "}}`, "body.connection_config.command", apierror.FieldValueError},
		{"STDIO command array", `{"name":"a","transport_type":"STDIO","connection_config":{"command":["python"]}}`, "body.connection_config.command", apierror.FieldTypeError},
		{"STDIO args string", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","args":"-m x"}}`, "body.connection_config.args", apierror.FieldTypeError},
		{"STDIO args element number", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","args":["a",2]}}`, "body.connection_config.args.1", apierror.FieldTypeError},
		{"STDIO env array", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":["A=1"]}}`, "body.connection_config.env", apierror.FieldTypeError},
		{"STDIO env value bool", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"A":true}}}`, "body.connection_config.env.A", apierror.FieldTypeError},
		{"STDIO env key with =", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"A=B":"1"}}}`, "body.connection_config.env.A=B", apierror.FieldValueError},
		{"STDIO env empty key", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","env":{"":"1"}}}`, "body.connection_config.env.", apierror.FieldValueError},
		{"STDIO cwd number", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","cwd":1}}`, "body.connection_config.cwd", apierror.FieldTypeError},
		{"STDIO url is extra", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","url":"https://h"}}`, "body.connection_config.url", apierror.FieldExtraForbidden},
		{"config duplicate key", `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p","command":"q"}}`, "body.connection_config.command", apierror.FieldValueError},
		// health_check_url
		{"health url relative", valid(`,"health_check_url":"/health"`), "body.health_check_url", apierror.FieldValueError},
		{"health url empty", valid(`,"health_check_url":""`), "body.health_check_url", apierror.FieldValueError},
		{"health url javascript", valid(`,"health_check_url":"javascript:alert(1)"`), "body.health_check_url", apierror.FieldValueError},
		{"health url object", valid(`,"health_check_url":{}`), "body.health_check_url", apierror.FieldTypeError},
		// auto_connect
		{"auto_connect string", valid(`,"auto_connect":"true"`), "body.auto_connect", apierror.FieldTypeError},
		{"auto_connect number", valid(`,"auto_connect":1`), "body.auto_connect", apierror.FieldTypeError},
		{"auto_connect null", valid(`,"auto_connect":null`), "body.auto_connect", apierror.FieldTypeError},
		// strictness
		{"unknown field", valid(`,"id":"x"`), "body.id", apierror.FieldExtraForbidden},
		{"unknown field status", valid(`,"status":"CONNECTED"`), "body.status", apierror.FieldExtraForbidden},
		{"duplicate top key", valid(`,"name":"other"`), "body.name", apierror.FieldValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, errs := Registration([]byte(tt.body), Outbound(nil))
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

func TestRegistrationCollectsAllErrors(t *testing.T) {
	body := `{"name":"Bad Name","description":7,"transport_type":"STDIO","connection_config":{"args":[1],"url":"x"},
		"health_check_url":"nope","auto_connect":"yes","extra":1}`
	_, errs := Registration([]byte(body), Outbound(nil))
	want := []struct{ loc, typ string }{
		{"body.name", apierror.FieldValueError},
		{"body.description", apierror.FieldTypeError},
		{"body.connection_config.command", apierror.FieldValueError},
		{"body.connection_config.args.0", apierror.FieldTypeError},
		{"body.connection_config.url", apierror.FieldExtraForbidden},
		{"body.health_check_url", apierror.FieldValueError},
		{"body.auto_connect", apierror.FieldTypeError},
		{"body.extra", apierror.FieldExtraForbidden},
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

func TestPatch(t *testing.T) {
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
		{name: "empty object", transport: "SSE", body: `{}`, wantErr: "body " + apierror.FieldValueError},
		{name: "empty body", transport: "SSE", body: ``, wantErr: "body " + apierror.FieldMissing},
		{name: "malformed", transport: "SSE", body: `{`, wantErr: "body " + apierror.FieldJSONInvalid},
		{name: "transport change", transport: "SSE", body: `{"transport_type":"HTTP"}`, wantErr: "body.transport_type " + apierror.FieldExtraForbidden},
		{name: "auto_connect is not patchable", transport: "SSE", body: `{"name":"a","auto_connect":true}`, wantErr: "body.auto_connect " + apierror.FieldExtraForbidden},
		{name: "config of another transport", transport: "SSE", body: `{"connection_config":{"command":"x"}}`, wantErr: "body.connection_config.url " + apierror.FieldValueError},
		{name: "bad name", transport: "SSE", body: `{"name":"A"}`, wantErr: "body.name " + apierror.FieldValueError},
		{name: "name null", transport: "SSE", body: `{"name":null}`, wantErr: "body.name " + apierror.FieldTypeError},
		{name: "unknown stored transport", transport: "WS", body: `{"connection_config":{}}`, wantErr: "body.connection_config " + apierror.FieldValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, errs := Patch([]byte(tt.body), tt.transport, Outbound(nil))
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

func TestDisconnect(t *testing.T) {
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
			force, errs := Disconnect([]byte(tt.body))
			if tt.wantErr != "" {
				if len(errs) == 0 || errs[0].Path() != tt.wantErr {
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

func TestCapsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"}`)
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, `,"x%d":1`, i)
	}
	b.WriteString(`}`)
	_, errs := Registration([]byte(b.String()), Outbound(nil))
	if len(errs) != strictjson.MaxErrors+1 || !strings.HasPrefix(errs[strictjson.MaxErrors].Msg, "Too many errors") {
		t.Fatalf("got %d errors, last %+v", len(errs), errs[len(errs)-1])
	}
}

// TestRegistrationSchema: the schema add_mcp_server publishes says what Registration enforces: its fields and
// no other, its transports (each one connconfig knows), its name rule.
func TestRegistrationSchema(t *testing.T) {
	s := RegistrationSchema()
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.Required) != "[name transport_type connection_config]" || len(s.Properties) != 8 {
		t.Errorf("schema %+v", s)
	}
	for _, tr := range enum(registrationSchema, "transport_type") {
		if _, _, ok := connconfig.Keys(tr); !ok {
			t.Errorf("transport %s unknown to connconfig", tr)
		}
	}
	base := `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"}`
	for k := range s.Properties {
		if _, errs := Registration([]byte(base+`,"`+k+`":null}`), Outbound(nil)); k != "name" && k != "transport_type" &&
			k != "connection_config" && k != "auto_connect" && errs != nil {
			t.Errorf("%s: a field of the schema is refused: %+v", k, errs)
		}
	}
	if _, errs := Registration([]byte(base+`,"nope":1}`), Outbound(nil)); len(errs) != 1 || errs[0].Type != apierror.FieldExtraForbidden {
		t.Errorf("a field outside the schema: %+v", errs)
	}
	if p := s.Properties["name"]; *p.MaxLength != MaxNameLength || !regexp.MustCompile(p.Pattern).MatchString("a-b_1") {
		t.Errorf("name %+v", p)
	}
}
