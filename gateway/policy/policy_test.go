package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/gateway/policy"
)

func compile(t testing.TB, doc policy.Document) *policy.Set {
	t.Helper()
	s, err := policy.Compile(doc)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return s
}

func TestDecide(t *testing.T) {
	alice := policy.Input{Subject: "alice", Role: "client", Server: "fs", Tool: "write_file", Name: "fs.write_file",
		Skills: []string{"files"}, Annotations: map[string]any{"destructiveHint": true},
		Arguments: map[string]any{"path": "/etc/passwd", "size": float64(12)}}
	oauthBob := policy.Input{Subject: "bob-sub", Role: "client", Claims: map[string]any{"groups": []any{"ops", "dev"}, "email": "bob@example.com"},
		Server: "fs", Tool: "read_file", Name: "fs.read_file", Annotations: map[string]any{"readOnlyHint": true}}
	cases := []struct {
		name     string
		doc      policy.Document
		in       policy.Input
		allowed  bool
		rule     string
		evalFail bool
	}{
		{"no rules allows", policy.Document{}, alice, true, "", false},
		{"default deny", policy.Document{Default: policy.Deny}, alice, false, "", false},
		{"deny by subject", policy.Document{Rules: []policy.Rule{{Name: "no-alice", Effect: policy.Deny, When: `subject == "alice"`}}}, alice, false, "no-alice", false},
		{"other subject passes", policy.Document{Rules: []policy.Rule{{Name: "no-alice", Effect: policy.Deny, When: `subject == "alice"`}}}, oauthBob, true, "", false},
		{"first match wins", policy.Document{Default: policy.Deny, Rules: []policy.Rule{
			{Name: "ops-read", Effect: policy.Allow, When: `"groups" in claims && "ops" in claims.groups`},
			{Name: "all", Effect: policy.Deny, When: `true`}}}, oauthBob, true, "ops-read", false},
		{"claims absent for static token", policy.Document{Default: policy.Deny, Rules: []policy.Rule{
			{Name: "ops", Effect: policy.Allow, When: `"groups" in claims && "ops" in claims.groups`}}}, alice, false, "", false},
		{"destructive denied", policy.Document{Rules: []policy.Rule{
			{Name: "no-destroy", Effect: policy.Deny, When: `annotations.?destructiveHint.orValue(false) == true`}}}, alice, false, "no-destroy", false},
		{"read only allowed", policy.Document{Default: policy.Deny, Rules: []policy.Rule{
			{Name: "ro", Effect: policy.Allow, When: `has(annotations.readOnlyHint) && annotations.readOnlyHint == true`}}}, oauthBob, true, "ro", false},
		{"arguments", policy.Document{Rules: []policy.Rule{
			{Name: "no-etc", Effect: policy.Deny, When: `tool == "write_file" && args.path.startsWith("/etc/")`}}}, alice, false, "no-etc", false},
		{"numeric argument", policy.Document{Rules: []policy.Rule{
			{Name: "small", Effect: policy.Deny, When: `args.size > 10`}}}, alice, false, "small", false},
		{"skills and namespaced name", policy.Document{Rules: []policy.Rule{
			{Name: "files", Effect: policy.Deny, When: `"files" in skills && name.startsWith("fs.")`}}}, alice, false, "files", false},
		{"server", policy.Document{Rules: []policy.Rule{
			{Name: "fs", Effect: policy.Deny, When: `server == "fs" && role != "admin"`}}}, alice, false, "fs", false},
		{"missing key fails closed", policy.Document{Rules: []policy.Rule{
			{Name: "needs-mode", Effect: policy.Allow, When: `args.mode == "fast"`}}}, alice, false, "needs-mode", true},
		{"claim of wrong type fails closed", policy.Document{Rules: []policy.Rule{
			{Name: "typed", Effect: policy.Deny, When: `claims.email > 3`}}}, oauthBob, false, "typed", true},
		{"action is call", policy.Document{Rules: []policy.Rule{
			{Name: "calls", Effect: policy.Deny, When: `action == "call"`}}}, alice, false, "calls", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := compile(t, tc.doc)
			d := s.Decide(&tc.in)
			if d.Allowed != tc.allowed || d.Rule != tc.rule || (d.Err != nil) != tc.evalFail {
				t.Fatalf("Decide = %+v, want allowed %v rule %q eval error %v", d, tc.allowed, tc.rule, tc.evalFail)
			}
		})
	}
}

func TestListed(t *testing.T) {
	in := policy.Input{Subject: "alice", Role: "client", Server: "fs", Tool: "write_file", Name: "fs.write_file"}
	cases := []struct {
		name   string
		rules  []policy.Rule
		deflt  string
		listed bool
	}{
		{"deny without args hides", []policy.Rule{{Name: "d", Effect: policy.Deny, When: `tool == "write_file"`}}, "", false},
		{"deny on args keeps listed", []policy.Rule{{Name: "d", Effect: policy.Deny, When: `tool == "write_file" && args.path == "/"`}}, "", true},
		{"deny on args then deny all hides", []policy.Rule{
			{Name: "d", Effect: policy.Deny, When: `args.path == "/"`}, {Name: "all", Effect: policy.Deny, When: `true`}}, "", false},
		{"allow on args lists under default deny", []policy.Rule{{Name: "a", Effect: policy.Allow, When: `args.path == "/tmp"`}}, policy.Deny, true},
		{"default deny hides", nil, policy.Deny, false},
		{"action list", []policy.Rule{{Name: "l", Effect: policy.Deny, When: `action == "list"`}}, "", false},
		{"failing rule hides", []policy.Rule{{Name: "f", Effect: policy.Allow, When: `claims.groups.size() > 0`}}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := compile(t, policy.Document{Default: tc.deflt, Rules: tc.rules})
			if d := s.Listed(&in); d.Allowed != tc.listed {
				t.Fatalf("Listed = %+v, want %v", d, tc.listed)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name       string
		doc        policy.Document
		loc        string
		line, col  int
		msgContain string
	}{
		{"bad default", policy.Document{Default: "maybe"}, "default", 0, 0, "default"},
		{"no name", policy.Document{Rules: []policy.Rule{{Effect: policy.Deny, When: "true"}}}, "rules.0.name", 0, 0, "required"},
		{"bad name", policy.Document{Rules: []policy.Rule{{Name: "a b", Effect: policy.Deny, When: "true"}}}, "rules.0.name", 0, 0, "name"},
		{"twice", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: "true"}, {Name: "a", Effect: policy.Deny, When: "true"}}}, "rules.1.name", 0, 0, "twice"},
		{"bad effect", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: "block", When: "true"}}}, "rules.0.effect", 0, 0, "effect"},
		{"empty when", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: " "}}}, "rules.0.when", 0, 0, "required"},
		{"syntax", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: `subject == `}}}, "rules.0.when", 1, 12, "line 1, column 12"},
		{"undeclared", policy.Document{Rules: []policy.Rule{{Name: "ok", Effect: policy.Deny, When: "true"}, {Name: "b", Effect: policy.Deny, When: "subject == \"x\" ||\n  user == \"y\""}}}, "rules.1.when", 2, 3, "undeclared reference"},
		{"not bool", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: `subject`}}}, "rules.0.when", 1, 1, "must be a bool"},
		{"too long", policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: "true" + strings.Repeat(" ", policy.MaxExprLength)}}}, "rules.0.when", 0, 0, "longer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Compile(tc.doc)
			var verr *policy.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Compile = %v, want a *ValidationError", err)
			}
			if got := strings.SplitN(verr.Error(), ": ", 2)[0]; got != tc.loc {
				t.Errorf("loc = %q, want %q", got, tc.loc)
			}
			if verr.Line != tc.line || verr.Column != tc.col {
				t.Errorf("position = %d:%d, want %d:%d (%s)", verr.Line, verr.Column, tc.line, tc.col, verr.Msg)
			}
			if !strings.Contains(verr.Msg, tc.msgContain) {
				t.Errorf("msg = %q, want it to contain %q", verr.Msg, tc.msgContain)
			}
		})
	}
}

func TestReads(t *testing.T) {
	if compile(t, policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: `subject == "args"`}}}).Reads("args") {
		t.Error("a rule without args needs arguments")
	}
	if !compile(t, policy.Document{Rules: []policy.Rule{{Name: "a", Effect: policy.Deny, When: `"x" in args`}}}).Reads("args") {
		t.Error("a rule reading args does not need arguments")
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{`true`, `subject == "a"`, `args.path.startsWith("/etc")`, `"g" in claims && "x" in claims.g`,
		`annotations.?readOnlyHint.orValue(false)`, `subject ==`, `1 +`, `[1,2].map(x, x*2).size() > 1`, "\x00", `"\xff"`} {
		f.Add("r", "deny", s)
	}
	f.Fuzz(func(t *testing.T, name, effect, when string) {
		s, err := policy.Compile(policy.Document{Rules: []policy.Rule{{Name: name, Effect: effect, When: when}}})
		if err != nil {
			var verr *policy.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Compile(%q) = %v, not a *ValidationError", when, err)
			}
			if verr.Line < 0 || verr.Column < 0 {
				t.Fatalf("negative position %d:%d", verr.Line, verr.Column)
			}
			return
		}
		in := policy.Input{Subject: "s", Arguments: map[string]any{"path": "/tmp"}}
		d := s.Decide(&in)
		if d.Err != nil && d.Allowed {
			t.Fatalf("an evaluation error allowed: %+v", d)
		}
		if l := s.Listed(&in); l.Err != nil && l.Allowed {
			t.Fatalf("an evaluation error listed: %+v", l)
		}
	})
}
