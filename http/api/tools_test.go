package api

import (
	"testing"
)

func TestValidateCall(t *testing.T) {
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
		r, errs := validateCall([]byte(c.body))
		if c.wantErr == "" {
			if len(errs) > 0 || string(r.arguments) != c.wantArgs || r.serverID != c.wantID {
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

// FuzzValidateCall: any body gives either a valid call or at least one error, never a panic.
func FuzzValidateCall(f *testing.F) {
	for _, s := range []string{`{"name":"a.b","arguments":{"x":1}}`, `{"name":"t","server_id":"550e8400-e29b-41d4-a716-446655440000"}`,
		`{}`, `[]`, `null`, `{"name":"\u0000"}`, `{"name":"t","arguments":{"a":{"b":{"c":[]}}}}`, `{"name":"x","name":"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, errs := validateCall(body)
		if len(errs) == 0 && (r.name == "" || len(r.arguments) == 0) {
			t.Fatalf("valid call without name or arguments: %+v", r)
		}
	})
}
