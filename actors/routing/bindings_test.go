package routing

import (
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// bindingTable is a table whose profiles are bound to a token name, subjects and claim values.
func bindingTable() *RouteTable {
	servers := map[string]ServerEntry{"id-a": {ID: "id-a", Name: "a", Status: persistence.StatusConnected}}
	tools := map[string][]persistence.Tool{"id-a": {{Name: "a.t", OriginalName: "t", SourceServerID: "id-a"}}}
	sel := []persistence.ProfileSelector{{Server: "a"}}
	rc := &Curation{Profiles: []persistence.Profile{
		{Name: "ops", Selectors: sel, Clients: []string{"ci"}, Bindings: []persistence.ProfileBinding{
			{Claim: "groups", Value: "sre"}, {Claim: "realm_access.roles", Value: "operator"}}},
		{Name: "eng", Selectors: sel, Bindings: []persistence.ProfileBinding{
			{Subject: "alice"}, {Claim: "groups", Value: "eng"}, {Claim: "dept", Value: "rnd"},
			{Claim: "https://example.com/teams", Value: "web"}}},
		{Name: "all", Selectors: sel, Bindings: []persistence.ProfileBinding{{Subject: "alice"}, {Subject: "ci"}}},
	}}
	return buildRouteTable(servers, tools, "__", 1, nil, rc)
}

func TestBoundProfilesOf(t *testing.T) {
	rt := bindingTable()
	oauth := func(sub string, claims map[string]any) Caller { return Caller{Name: sub, OAuth: true, Claims: claims} }
	cases := []struct {
		name   string
		caller Caller
		want   []string
	}{
		{"static token by name", Caller{Name: "ci"}, []string{"ops"}},
		{"subject bindings do not catch a static token", Caller{Name: "alice"}, nil},
		{"unbound subject", oauth("bob", nil), nil},
		{"subject", oauth("alice", nil), []string{"all", "eng"}},
		{"clients bind a subject of that name too", oauth("ci", nil), []string{"all", "ops"}},
		{"group list", oauth("bob", map[string]any{"groups": []any{"eng", "x", 3}}), []string{"eng"}},
		{"two groups", oauth("bob", map[string]any{"groups": []any{"sre", "eng"}}), []string{"eng", "ops"}},
		{"string claim", oauth("bob", map[string]any{"dept": "rnd"}), []string{"eng"}},
		{"other value", oauth("bob", map[string]any{"dept": "sales", "groups": "ops"}), nil},
		{"number claim ignored", oauth("bob", map[string]any{"dept": 7.0}), nil},
		{"nested path", oauth("bob", map[string]any{"realm_access": map[string]any{"roles": []any{"operator"}}}), []string{"ops"}},
		{"nested path not an object", oauth("bob", map[string]any{"realm_access": "operator"}), nil},
		{"namespaced claim with dots", oauth("bob", map[string]any{"https://example.com/teams": []any{"web"}}), []string{"eng"}},
		{"subject and claim union", oauth("alice", map[string]any{"groups": []any{"sre", "eng"}}), []string{"all", "eng", "ops"}},
		{"clients and claim union", oauth("ci", map[string]any{"groups": "eng"}), []string{"all", "eng", "ops"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := rt.BoundProfilesOf(tc.caller)
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("BoundProfilesOf(%+v) = %v, want %v", tc.caller, got, tc.want)
			}
		})
	}
	// The table's own lists are never changed by a union.
	if got := rt.BoundProfilesOf(oauth("alice", nil)); !slices.Equal(got, []string{"all", "eng"}) {
		t.Fatalf("subject list changed: %v", got)
	}
	if got := rt.BoundProfilesOf(Caller{Name: "ci"}); !slices.Equal(got, []string{"ops"}) {
		t.Fatalf("client list changed: %v", got)
	}
	// A bound OAuth caller's scope is its profiles; another profile is forbidden.
	sc, err := rt.ScopeFor("", rt.BoundProfilesOf(oauth("bob", map[string]any{"groups": []any{"sre"}})))
	if err != nil || !slices.Equal(sc, Scope{"ops"}) {
		t.Fatalf("scope %v, %v", sc, err)
	}
	if _, err := rt.ScopeFor("eng", rt.BoundProfilesOf(oauth("bob", map[string]any{"groups": []any{"sre"}}))); err == nil {
		t.Fatal("a profile outside the binding must be forbidden")
	}
}

func BenchmarkBoundProfilesOf(b *testing.B) {
	rt := bindingTable()
	c := Caller{Name: "bob", OAuth: true, Claims: map[string]any{"groups": []any{"x", "y"}, "dept": "sales"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = rt.BoundProfilesOf(c)
	}
}
