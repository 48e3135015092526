package validate

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCall: the REST shape ({"name",...} under "body").
func TestCall(t *testing.T) {
	cases := []struct {
		body     string
		wantErr  string // the loc's last element of the first error, "" for valid
		wantArgs string
		wantID   string
	}{
		{body: `{"name":"srv.tool"}`, wantArgs: `{}`},
		{body: `{"name":"srv.tool","arguments":{"a":[1,{"b":null}]}}`, wantArgs: `{"a":[1,{"b":null}]}`},
		{body: `{"name":"t","arguments":null,"server_id":null}`, wantArgs: `{}`},
		{body: `{"name":"t","server_id":"550E8400-E29B-41D4-A716-446655440000"}`, wantArgs: `{}`, wantID: "550e8400-e29b-41d4-a716-446655440000"},
		{body: `{}`, wantErr: "name"},
		{body: `{"name":""}`, wantErr: "name"},
		{body: `{"name":5}`, wantErr: "name"},
		{body: `{"name":"t","arguments":[1]}`, wantErr: "arguments"},
		{body: `{"name":"t","arguments":"x"}`, wantErr: "arguments"},
		{body: `{"name":"t","server_id":"not-a-uuid"}`, wantErr: "server_id"},
		{body: `{"name":"t","extra":1}`, wantErr: "extra"},
		{body: `[]`, wantErr: "body"},
		{body: `{"name":"t"`, wantErr: "body"},
	}
	for _, c := range cases {
		r, errs := Call([]byte(c.body), RESTCall)
		if c.wantErr == "" {
			if len(errs) > 0 || string(r.Arguments) != c.wantArgs || r.ServerID != c.wantID {
				t.Errorf("%s: got %+v %v", c.body, r, errs)
			}
			continue
		}
		if len(errs) == 0 {
			t.Errorf("%s: want an error at %s", c.body, c.wantErr)
			continue
		}
		loc := errs[0].Loc
		if last, _ := loc[len(loc)-1].(string); last != c.wantErr {
			t.Errorf("%s: first error at %v, want ...%s", c.body, loc, c.wantErr)
		}
	}
}

// FuzzCall: any body gives either a valid call or at least one error, never a panic.
func FuzzCall(f *testing.F) {
	for _, s := range []string{`{"name":"a.b","arguments":{"x":1}}`, `{"name":"t","server_id":"550e8400-e29b-41d4-a716-446655440000"}`,
		`{}`, `[]`, `null`, `{"name":"\u0000"}`, `{"name":"t","arguments":{"a":{"b":{"c":[]}}}}`, `{"name":"x","name":"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, errs := Call(body, RESTCall)
		if len(errs) == 0 && (r.Name == "" || len(r.Arguments) == 0) {
			t.Fatalf("valid call without name or arguments: %+v", r)
		}
	})
}

// TestExecuteCall: execute_external_tool's shape ({"tool_name",...} under "arguments").
func TestExecuteCall(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"tool_name":"a.b"}`, true},
		{`{"tool_name":"a.b","arguments":{"x":1},"server_id":"6f1c1f0e-8a8e-4e8e-9a39-3c1f4b0a2d11"}`, true},
		{`{"tool_name":"a.b","extra":1}`, false},
		{`{"tool_name":"a.b","arguments":[1]}`, false},
		{`{"tool_name":"a.b","server_id":"x"}`, false},
		{`{"tool_name":""}`, false},
		{`{"tool_name":"a.b","tool_name":"c"}`, false},
		{`[]`, false},
		{``, false},
	} {
		_, errs := Call([]byte(tc.body), ExecuteCall)
		if (len(errs) == 0) != tc.ok {
			t.Errorf("%s: errors %v", tc.body, errs)
		}
	}
}

// TestCallGolden pins the whole answer of Call, request and every field error, for both shapes: the rules were
// moved here from http/api and http/apierror unchanged.
func TestCallGolden(t *testing.T) {
	tests := []struct{ nameKey, body, request, errs string }{
		{"name", "{\"name\":\"a.b\"}", "{\"Name\":\"a.b\",\"Arguments\":{},\"ServerID\":\"\"}", "null"},
		{"name", "{\"name\":\"a.b\",\"arguments\":{\"x\":1},\"server_id\":\"6F9619FF-8B86-D011-B42D-00C04FC964FF\"}", "{\"Name\":\"a.b\",\"Arguments\":{\"x\":1},\"ServerID\":\"6f9619ff-8b86-d011-b42d-00c04fc964ff\"}", "null"},
		{"name", "{\"tool_name\":\"a.b\",\"arguments\":null,\"server_id\":null}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"tool_name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"body\",\"name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"name", "{\"name\":\"\",\"arguments\":[],\"server_id\":\"x\",\"extra\":1,\"name\":\"dup\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"extra\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"body\",\"name\"],\"msg\":\"Duplicate key\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"name\"],\"msg\":\"name must be 1 to 2048 characters\",\"type\":\"value_error\"},{\"loc\":[\"body\",\"arguments\"],\"msg\":\"arguments must be an object\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"server_id\"],\"msg\":\"server_id must be a UUID\",\"type\":\"value_error\"}]"},
		{"name", "{\"name\":1,\"server_id\":2}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"name\"],\"msg\":\"Input should be a valid string\",\"type\":\"type_error\"},{\"loc\":[\"body\",\"server_id\"],\"msg\":\"Input should be a valid string\",\"type\":\"type_error\"}]"},
		{"name", "{\"name\":\"a\\u0000\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"name\"],\"msg\":\"String should not contain NUL characters\",\"type\":\"value_error\"}]"},
		{"name", "{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"name\"],\"msg\":\"name must be 1 to 2048 characters\",\"type\":\"value_error\"}]"},
		{"name", "[]", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\"],\"msg\":\"Input should be a JSON object\",\"type\":\"type_error\"}]"},
		{"name", "", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"name", "{", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\"],\"msg\":\"JSON decode error: unexpected end of JSON input\",\"type\":\"json_invalid\"}]"},
		{"name", "\xff", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\"],\"msg\":\"JSON decode error: body is not valid UTF-8\",\"type\":\"json_invalid\"}]"},
		{"name", "{\"name\":null}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"name", "{\"server_id\":\"6f9619ff8b86d011b42d00c04fc964ff\",\"name\":\"x\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"body\",\"server_id\"],\"msg\":\"server_id must be a UUID\",\"type\":\"value_error\"}]"},
		{"tool_name", "{\"name\":\"a.b\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "{\"name\":\"a.b\",\"arguments\":{\"x\":1},\"server_id\":\"6F9619FF-8B86-D011-B42D-00C04FC964FF\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "{\"tool_name\":\"a.b\",\"arguments\":null,\"server_id\":null}", "{\"Name\":\"a.b\",\"Arguments\":{},\"ServerID\":\"\"}", "null"},
		{"tool_name", "{\"name\":\"\",\"arguments\":[],\"server_id\":\"x\",\"extra\":1,\"name\":\"dup\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"extra\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Duplicate key\",\"type\":\"value_error\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"},{\"loc\":[\"arguments\",\"arguments\"],\"msg\":\"arguments must be an object\",\"type\":\"type_error\"},{\"loc\":[\"arguments\",\"server_id\"],\"msg\":\"server_id must be a UUID\",\"type\":\"value_error\"}]"},
		{"tool_name", "{\"name\":1,\"server_id\":2}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"},{\"loc\":[\"arguments\",\"server_id\"],\"msg\":\"Input should be a valid string\",\"type\":\"type_error\"}]"},
		{"tool_name", "{\"name\":\"a\\u0000\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "[]", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\"],\"msg\":\"Input should be a JSON object\",\"type\":\"type_error\"}]"},
		{"tool_name", "", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "{", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\"],\"msg\":\"JSON decode error: unexpected end of JSON input\",\"type\":\"json_invalid\"}]"},
		{"tool_name", "\xff", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\"],\"msg\":\"JSON decode error: body is not valid UTF-8\",\"type\":\"json_invalid\"}]"},
		{"tool_name", "{\"name\":null}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"}]"},
		{"tool_name", "{\"server_id\":\"6f9619ff8b86d011b42d00c04fc964ff\",\"name\":\"x\"}", "{\"Name\":\"\",\"Arguments\":null,\"ServerID\":\"\"}", "[{\"loc\":[\"arguments\",\"name\"],\"msg\":\"Extra inputs are not permitted\",\"type\":\"extra_forbidden\"},{\"loc\":[\"arguments\",\"tool_name\"],\"msg\":\"Field required\",\"type\":\"missing\"},{\"loc\":[\"arguments\",\"server_id\"],\"msg\":\"server_id must be a UUID\",\"type\":\"value_error\"}]"},
	}
	for _, tc := range tests {
		shape := RESTCall
		if tc.nameKey == ExecuteCall.NameKey {
			shape = ExecuteCall
		}
		r, errs := Call([]byte(tc.body), shape)
		rj, _ := json.Marshal(r)
		ej, _ := json.Marshal(errs)
		if string(rj) != tc.request || string(ej) != tc.errs {
			t.Errorf("%s %.60q:\n got %s %s\nwant %s %s", tc.nameKey, tc.body, rj, ej, tc.request, tc.errs)
		}
	}
	if !strings.Contains(tests[0].request, "a.b") {
		t.Fatal("golden table is empty")
	}
}

// TestCallSchema: the published schema says what Call enforces.
func TestCallSchema(t *testing.T) {
	for _, shape := range []CallShape{RESTCall, ExecuteCall} {
		s := CallSchema(shape)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"type":"object","required":["` + shape.NameKey + `"],"additionalProperties":false`
		if !strings.Contains(string(b), `"additionalProperties":false`) || s.Required[0] != shape.NameKey ||
			*s.Properties[shape.NameKey].MaxLength != MaxToolNameLength || len(s.Properties) != 4 {
			t.Errorf("%s schema %s, want %s...", shape.NameKey, b, want)
		}
	}
}
