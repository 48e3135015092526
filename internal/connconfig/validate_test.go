package connconfig

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/strictjson"
)

// TestValidate: the config is re-encoded from the checked values (sorted keys, references as written, nulls of
// optional keys dropped), and every problem is reported at its place relative to connection_config.
func TestValidate(t *testing.T) {
	tests := []struct {
		name, transport, raw string
		want                 string   // the re-encoded config when valid
		errs                 []string // "loc type" of each error, in order
	}{
		{"stdio", "STDIO", `{"command":"npx","args":["-y","a<b>&c"],"env":{"T":"${T}"},"cwd":null,"allow_insecure_http":false}`,
			`{"allow_insecure_http":false,"args":["-y","a<b>&c"],"command":"npx","env":{"T":"${T}"}}`, nil},
		{"sse with headers", "SSE", `{"url":"https://h/sse","headers":{"Authorization":"Bearer ${TOK}"}}`,
			`{"headers":{"Authorization":"Bearer ${TOK}"},"url":"https://h/sse"}`, nil},
		{"http from the environment", "HTTP", `{"base_url":"${MCP_URL}"}`, `{"base_url":"${MCP_URL}"}`, nil},
		{"plain http to loopback", "HTTP", `{"base_url":"http://127.0.0.1:9000/mcp"}`, `{"base_url":"http://127.0.0.1:9000/mcp"}`, nil},
		{"not an object", "STDIO", `["npx"]`, "", []string{" type_error"}},
		{"unknown transport: only the type is checked", "FTP", `{"x":1}`, "", nil},
		{"required missing", "SSE", `{}`, "", []string{"url value_error"}},
		{"required null", "STDIO", `{"command":null}`, "", []string{"command value_error"}},
		{"key of another transport", "SSE", `{"url":"https://h","command":"x"}`, "", []string{"command extra_forbidden"}},
		{"duplicate key", "STDIO", `{"command":"a","command":"b"}`, "", []string{"command value_error"}},
		{"wrong types", "STDIO", `{"command":1,"args":"a","env":[],"allow_insecure_http":"yes"}`, "",
			[]string{"command type_error", "args type_error", "env type_error", "allow_insecure_http type_error"}},
		{"bad items", "STDIO", `{"command":" ","args":["a",2],"env":{"":"x","A=B":"y","OK":"\u0000"}}`, "",
			[]string{"command value_error", "args.1 type_error", "env. value_error", "env.A=B value_error", "env.OK value_error"}},
		{"headers", "HTTP", `{"base_url":"https://h","headers":{"a b":"x","X":"a\nb","Y":"\t ok"}}`, "",
			[]string{"headers.a b value_error", "headers.X value_error"}},
		{"headers differing in case", "HTTP", `{"base_url":"https://h","headers":{"x-k":"1","X-K":"2"}}`, "",
			[]string{"headers.x-k value_error"}},
		{"urls", "SSE", `{"url":"ftp://h"}`, "", []string{"url value_error"}},
		{"plain http elsewhere", "SSE", `{"url":"http://h.example/sse"}`, "", []string{"url value_error"}},
		{"plain http allowed", "SSE", `{"url":"http://h.example/sse","allow_insecure_http":true}`,
			`{"allow_insecure_http":true,"url":"http://h.example/sse"}`, nil},
		{"daemon settings", "STDIO", `{"command":"${DATABASE_URL}","args":["${MCP_CREDENTIAL_KEY}"],"cwd":"${QDRANT_URL}"}`, "",
			[]string{"command value_error", "args.0 value_error", "cwd value_error"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := validate(json.RawMessage(tc.raw), tc.transport, Checks{})
			var gotErrs []string
			for _, e := range errs {
				gotErrs = append(gotErrs, e.Path()+" "+e.Type)
			}
			if fmt.Sprint(gotErrs) != fmt.Sprint(tc.errs) {
				t.Errorf("errors %q, want %q (%+v)", gotErrs, tc.errs, errs)
			}
			if string(got) != tc.want {
				t.Errorf("config %s, want %s", got, tc.want)
			}
		})
	}
}

// TestValidateChecks: the daemon's outbound policy judges the URLs, after their own rules; CheckInto reports
// under the caller's location, into the caller's count.
func TestValidateChecks(t *testing.T) {
	refuse := Checks{URLProblem: func(u string) string {
		if strings.Contains(u, "169.254") {
			return "refused"
		}
		return ""
	}}
	if _, errs := validate(json.RawMessage(`{"base_url":"https://169.254.169.254/"}`), "HTTP", refuse); len(errs) != 1 || errs[0].Msg != "refused" {
		t.Errorf("policy not applied: %+v", errs)
	}
	if out, errs := validate(json.RawMessage(`{"base_url":"https://h/"}`), "HTTP", refuse); errs != nil || out == nil {
		t.Errorf("allowed URL refused: %+v", errs)
	}
	c := strictjson.New("body")
	c.Add(strictjson.FieldMissing, "earlier", c.At("name"))
	if out := CheckInto(c, json.RawMessage(`{"url":""}`), "SSE", c.At("connection_config"), refuse); out != nil {
		t.Errorf("CheckInto returned %s with errors", out)
	}
	if errs := c.Errors(); len(errs) != 2 || errs[1].Path() != "body.connection_config.url" {
		t.Errorf("CheckInto errors %+v", errs)
	}
}

// FuzzValidate: on any input validate must not panic and must answer a config or errors, never both; what it
// accepts must be accepted again unchanged (the stored form is canonical), parse, and mask to a JSON object.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"command":"npx","args":["-y","srv"],"env":{"A":"1"},"cwd":"/tmp"}`,
		`{"base_url":"https://${HOST}:${PORT}/mcp","headers":{"X-Key":"${K}"},"allow_insecure_http":true}`,
		`{"url":"${URL}"}`, `{"url":"http://[::1]:80/","headers":{"a b":"\r\n"}}`, `{"command":"","args":[1,null,{}],"env":{"=":null}}`,
		``, `null`, `[]`, `{}`, `{"command":"a","command":"b"}`, "\xff{}",
	} {
		for _, transport := range []string{"STDIO", "SSE", "HTTP"} {
			f.Add([]byte(s), transport)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, transport string) {
		out, errs := validate(raw, transport, Checks{})
		if out != nil && errs != nil {
			t.Fatalf("both a config %s and errors %+v", out, errs)
		}
		if len(errs) > strictjson.MaxErrors+1 {
			t.Fatalf("%d errors", len(errs))
		}
		if out == nil {
			return
		}
		again, errs := validate(out, transport, Checks{})
		if errs != nil || string(again) != string(out) {
			t.Fatalf("re-validating %s: %s %+v", out, again, errs)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("accepted %s does not parse: %v", out, err)
		}
		if !strictjson.IsObject(Mask(out)) {
			t.Fatalf("Mask(%s) = %s", out, Mask(out))
		}
	})
}
