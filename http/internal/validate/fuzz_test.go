package validate

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/connconfig"
)

// FuzzRegistration: on any input Registration must not panic and must answer either a complete,
// rule-abiding request or at least one well-formed field error, never both and never neither. The same holds for
// Patch and Disconnect.
func FuzzRegistration(f *testing.F) {
	seeds := []string{
		sseBody,
		`{"name":"local","transport_type":"STDIO","connection_config":{"command":"python","args":["-m","srv"],"env":{"A":"1"},"cwd":"/tmp"},"auto_connect":false}`,
		`{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"https://${HOST}:${PORT}/mcp","headers":{"X-Key":"${K}"},"allow_insecure_http":true}}`,
		`{"name":"e","transport_type":"SSE","connection_config":{"url":"${URL}"},"health_check_url":"http://127.0.0.1:8080/health","description":null}`,
		``, ` `, `{`, `}`, `[]`, `null`, `true`, `0`, `"x"`, `{}`,
		`{"name":"a","name":"b"}`,
		`{"name":"A","transport_type":"sse","connection_config":[]}`,
		`{"name":"a","transport_type":"SSE","connection_config":{"url":"https:///x","headers":{"a b":"\r\n"}}}`,
		`{"name":"a","transport_type":"STDIO","connection_config":{"command":"","args":[1,null,{}],"env":{"=":null}}}`,
		`{"name":"a\u0000","description":"\ud800","transport_type":"HTTP","connection_config":{"base_url":"http://[::1]:80/"}}`,
		`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"},"extra":{"nested":[1,2,{"x":null}]}}`,
		`{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h"}} trailing`,
		"\xff\xfe{}",
		`{"name":"` + strings.Repeat("a", 300) + `","transport_type":"SSE","connection_config":{"url":"https://h"}}`,
		`{"force":true}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, errs := Registration(body, Outbound(nil))
		checkFieldErrors(t, errs)
		if len(errs) == 0 {
			if !nameRe.MatchString(req.Name) || len(req.Name) > MaxNameLength {
				t.Fatalf("accepted bad name %q", req.Name)
			}
			_, required, ok := connconfig.Keys(req.TransportType)
			if !ok {
				t.Fatalf("accepted transport %q", req.TransportType)
			}
			var cfg map[string]any
			if err := json.Unmarshal(req.ConnectionConfig, &cfg); err != nil || cfg == nil {
				t.Fatalf("connection config %q is not a JSON object: %v", req.ConnectionConfig, err)
			}
			if _, ok := cfg[required]; !ok {
				t.Fatalf("config %s lacks %s", req.ConnectionConfig, required)
			}
			if req.Description != nil && utf8.RuneCountInString(*req.Description) > MaxDescriptionLength {
				t.Fatalf("accepted long description")
			}
			if req.HealthCheckURL != nil && connconfig.HTTPURLProblem(*req.HealthCheckURL) != "" {
				t.Fatalf("accepted health url %q", *req.HealthCheckURL)
			}
			// What was accepted must survive a second pass unchanged (the stored config is canonical).
			again, errs2 := Patch(mustJSON(t, map[string]any{"connection_config": cfg}), req.TransportType, Outbound(nil))
			if errs2 != nil || string(again.ConnectionConfig) != string(req.ConnectionConfig) {
				t.Fatalf("re-validating %s: %s %+v", req.ConnectionConfig, again.ConnectionConfig, errs2)
			}
		}

		for _, transport := range []string{"STDIO", "SSE", "HTTP"} {
			p, errs := Patch(body, transport, Outbound(nil))
			checkFieldErrors(t, errs)
			if len(errs) == 0 && p.Name == nil && p.Description == nil && p.ConnectionConfig == nil &&
				p.HealthCheckURL == nil && !p.ClearHealthCheckURL {
				t.Fatalf("empty patch accepted from %q", body)
			}
		}
		_, errs = Disconnect(body)
		checkFieldErrors(t, errs)
	})
}

func checkFieldErrors(t *testing.T, errs []apierror.FieldError) {
	t.Helper()
	if errs != nil && len(errs) == 0 {
		t.Fatal("non-nil empty error list")
	}
	for _, e := range errs {
		if len(e.Loc) == 0 || e.Loc[0] != "body" || e.Msg == "" {
			t.Fatalf("malformed field error %+v", e)
		}
		switch e.Type {
		case apierror.FieldMissing, apierror.FieldExtraForbidden, apierror.FieldTypeError, apierror.FieldValueError, apierror.FieldJSONInvalid:
		default:
			t.Fatalf("unknown error type %q", e.Type)
		}
	}
	if _, err := json.Marshal(apierror.Body{Detail: errs, ErrorCode: apierror.CodeValidation}); err != nil {
		t.Fatalf("errors do not encode: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sseBody is the contract's example registration.
const sseBody = `{"name":"github-mcp","description":"GitHub MCP Server for repository operations","transport_type":"SSE",
	"connection_config":{"url":"https://github-mcp.example.com/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}},
	"health_check_url":"https://github-mcp.example.com/health","auto_connect":true}`
