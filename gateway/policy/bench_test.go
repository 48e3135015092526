package policy_test

import (
	"testing"

	"github.com/mcpgw/aggregator/gateway/policy"
)

// BenchmarkDecide is the policy's cost per call: a realistic document of four rules, the last of which decides.
func BenchmarkDecide(b *testing.B) {
	s, err := policy.Compile(policy.Document{Rules: []policy.Rule{
		{Name: "ops-only-destructive", Effect: policy.Deny, When: `annotations.?destructiveHint.orValue(false) && !("groups" in claims && "ops" in claims.groups)`},
		{Name: "no-etc", Effect: policy.Deny, When: `tool == "write_file" && args.?path.orValue("").startsWith("/etc/")`},
		{Name: "ci-search-only", Effect: policy.Deny, When: `subject == "ci" && server != "search"`},
		{Name: "readers", Effect: policy.Allow, When: `role == "client" && "files" in skills`},
	}})
	if err != nil {
		b.Fatal(err)
	}
	in := policy.Input{Subject: "alice", Role: "client", Server: "fs", Tool: "read_file", Name: "fs.read_file",
		Skills: []string{"files"}, Annotations: map[string]any{"readOnlyHint": true}, Arguments: map[string]any{"path": "/tmp/x"}}
	b.ReportAllocs()
	for b.Loop() {
		if d := s.Decide(&in); !d.Allowed || d.Rule != "readers" {
			b.Fatalf("%+v", d)
		}
	}
}

// BenchmarkDecideEmpty is the cost when no rule exists (today's deployments).
func BenchmarkDecideEmpty(b *testing.B) {
	s, _ := policy.Compile(policy.Document{})
	in := policy.Input{Subject: "alice"}
	b.ReportAllocs()
	for b.Loop() {
		if !s.Decide(&in).Allowed {
			b.Fatal("denied")
		}
	}
}
