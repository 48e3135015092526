package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// staticPolicy is a PolicySource holding one compiled set.
type staticPolicy struct{ set *policy.Set }

func (s staticPolicy) AccessPolicy() *policy.Set { return s.set }

func rulesOver(t testing.TB, rules ...policy.Rule) (*gateway.Rules, *routing.RouteTable) {
	t.Helper()
	set, err := policy.Compile(policy.Document{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	rt := routing.NewRouteTable([]routing.ServerEntry{{ID: "id-fs", Name: "fs", Status: persistence.StatusConnected}},
		[]persistence.Tool{
			{ID: 1, Name: "fs.read_file", OriginalName: "read_file", SourceServerID: "id-fs", SkillIDs: []string{"files"},
				Definition: json.RawMessage(`{"name":"read_file","annotations":{"readOnlyHint":true}}`)},
			{ID: 2, Name: "fs.write_file", OriginalName: "write_file", SourceServerID: "id-fs",
				Definition: json.RawMessage(`{"name":"write_file","annotations":{"destructiveHint":true}}`)},
		}, "__")
	return &gateway.Rules{Source: staticPolicy{set}}, rt
}

// Rules sees the tool as the routing table serves it (skills, annotations) and the call's arguments; a denial is a
// *DeniedError naming the rule, wrapping ErrDenied; listing hides what no call could reach.
func TestRules(t *testing.T) {
	r, rt := rulesOver(t,
		policy.Rule{Name: "ci-no-destroy", Effect: policy.Deny, When: `subject == "ci" && annotations.?destructiveHint.orValue(false)`},
		policy.Rule{Name: "no-etc", Effect: policy.Deny, When: `"path" in args && args.path.startsWith("/etc/")`},
		policy.Rule{Name: "ops-group", Effect: policy.Allow, When: `"groups" in claims && "ops" in claims.groups`},
		policy.Rule{Name: "files-skill", Effect: policy.Deny, When: `role == "client" && "files" in skills && subject == "bob"`},
	)
	ci := auth.Identity{Name: "ci", Scope: auth.ScopeClient}
	bob := auth.Identity{Name: "bob", Scope: auth.ScopeClient}
	opsBob := auth.Identity{Name: "bob", Scope: auth.ScopeClient, OAuth: true, Claims: map[string]any{"groups": []any{"ops"}}}
	route := func(name string) routing.Route {
		r, err := rt.Resolve(name, "")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		name   string
		caller auth.Identity
		tool   string
		args   string
		rule   string // "" allowed
	}{
		{"ci may read", ci, "fs.read_file", `{}`, ""},
		{"ci may not write (annotation)", ci, "fs.write_file", `{}`, "ci-no-destroy"},
		{"arguments", bob, "fs.write_file", `{"path":"/etc/passwd"}`, "no-etc"},
		{"arguments elsewhere", bob, "fs.write_file", `{"path":"/tmp/x"}`, ""},
		{"arguments not an object", bob, "fs.write_file", `[1]`, ""},
		{"skills", bob, "fs.read_file", `{}`, "files-skill"},
		{"claims allow first", opsBob, "fs.read_file", `{}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := r.AllowCall(context.Background(), gateway.PolicyCall{Caller: tc.caller, Table: rt, Route: route(tc.tool), Arguments: []byte(tc.args)})
			var de *gateway.DeniedError
			switch {
			case tc.rule == "" && err != nil:
				t.Fatalf("denied: %v", err)
			case tc.rule != "" && (!errors.As(err, &de) || de.Rule != tc.rule || !errors.Is(err, gateway.ErrDenied)):
				t.Fatalf("AllowCall = %v, want a denial by %q", err, tc.rule)
			}
		})
	}
	listed := func(id auth.Identity, name string) bool {
		e, _ := rt.Tool(name)
		return r.Listed(context.Background(), id, rt, e)
	}
	if listed(ci, "fs.write_file") || !listed(ci, "fs.read_file") || !listed(bob, "fs.write_file") || listed(bob, "fs.read_file") {
		t.Fatal("listing does not follow the rules")
	}
}

// BenchmarkRulesAllowCall is the access policy's share of a call through the gateway: building the input from the
// caller and the routing table (annotations decoded from the served definition, arguments from the call's JSON,
// as the rules read both) and evaluating four rules.
func BenchmarkRulesAllowCall(b *testing.B) {
	r, rt := rulesOver(b,
		policy.Rule{Name: "ci-no-destroy", Effect: policy.Deny, When: `subject == "ci" && annotations.?destructiveHint.orValue(false)`},
		policy.Rule{Name: "no-etc", Effect: policy.Deny, When: `"path" in args && args.path.startsWith("/etc/")`},
		policy.Rule{Name: "ops-group", Effect: policy.Allow, When: `"groups" in claims && "ops" in claims.groups`},
		policy.Rule{Name: "files-skill", Effect: policy.Deny, When: `role == "client" && "files" in skills && subject == "bob"`},
	)
	route, _ := rt.Resolve("fs.read_file", "")
	c := gateway.PolicyCall{Caller: auth.Identity{Name: "alice", Scope: auth.ScopeClient}, Table: rt, Route: route,
		Arguments: []byte(`{"path":"/tmp/x","mode":"r"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.AllowCall(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRulesAllowCallNoRules is the same with no rule stored (every deployment until an admin writes one).
func BenchmarkRulesAllowCallNoRules(b *testing.B) {
	r, rt := rulesOver(b)
	route, _ := rt.Resolve("fs.read_file", "")
	c := gateway.PolicyCall{Caller: auth.Identity{Name: "alice"}, Table: rt, Route: route, Arguments: []byte(`{}`)}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.AllowCall(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
}
