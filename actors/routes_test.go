package actors

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func table() *RouteTable {
	servers := map[string]ServerEntry{
		"id-a": {ID: "id-a", Name: "a-server", Status: persistence.StatusConnected},
		"id-b": {ID: "id-b", Name: "b-server", Status: persistence.StatusDegraded},
		"id-c": {ID: "id-c", Name: "c-server", Status: persistence.StatusError},
	}
	tool := func(server, name, original string) persistence.Tool {
		return persistence.Tool{Name: name + "." + original, OriginalName: original, SourceServerID: server}
	}
	tools := map[string][]persistence.Tool{
		"id-a": {tool("id-a", "a-server", "search_tool"), tool("id-a", "a-server", "api.v2.create"), tool("id-a", "a-server", "only_a")},
		"id-b": {tool("id-b", "b-server", "search_tool"), tool("id-b", "b-server", "x/y z")},
		"id-c": {tool("id-c", "c-server", "dead_tool")},
	}
	return buildRouteTable(servers, tools, "__", 1)
}

func TestResolve(t *testing.T) {
	rt := table()
	cases := []struct {
		name, tool, serverID string
		wantServer, wantTool string
		wantStrategy         string
		wantErr              error
		ambiguous            bool
	}{
		{name: "namespaced", tool: "a-server.search_tool", wantServer: "id-a", wantTool: "search_tool", wantStrategy: StrategyNamespaceResolved},
		{name: "EC-002 only the first dot separates", tool: "a-server.api.v2.create", wantServer: "id-a", wantTool: "api.v2.create", wantStrategy: StrategyNamespaceResolved},
		{name: "original name unique", tool: "only_a", wantServer: "id-a", wantTool: "only_a", wantStrategy: StrategyLookupResolved},
		{name: "original name with dots, unique", tool: "api.v2.create", wantServer: "id-a", wantTool: "api.v2.create", wantStrategy: StrategyLookupResolved},
		{name: "original name on two servers is ambiguous", tool: "search_tool", ambiguous: true},
		{name: "explicit server id with original name", tool: "search_tool", serverID: "id-b", wantServer: "id-b", wantTool: "search_tool", wantStrategy: StrategyExplicitServer},
		{name: "explicit server id with namespaced name", tool: "b-server.search_tool", serverID: "id-b", wantServer: "id-b", wantTool: "search_tool", wantStrategy: StrategyExplicitServer},
		{name: "explicit server id, tool elsewhere", tool: "only_a", serverID: "id-b", wantErr: ErrToolNotFound},
		{name: "unknown server id", tool: "x", serverID: "nope", wantErr: persistence.ErrNotFound},
		{name: "known server, unknown tool", tool: "a-server.nope", wantErr: ErrToolNotFound},
		{name: "unknown name", tool: "nothing", wantErr: ErrToolNotFound},
		{name: "alias", tool: "a-server__search_tool", wantServer: "id-a", wantTool: "search_tool", wantStrategy: StrategyAlias},
		{name: "server in ERROR still resolves (caller answers 503)", tool: "c-server.dead_tool", wantServer: "id-c", wantTool: "dead_tool", wantStrategy: StrategyNamespaceResolved},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := rt.Resolve(c.tool, c.serverID)
			if c.ambiguous {
				var amb *AmbiguousToolError
				if !errors.As(err, &amb) || len(amb.ServerIDs) != 2 || amb.ServerIDs[0] != "id-a" || amb.ServerIDs[1] != "id-b" {
					t.Fatalf("want ambiguity over id-a,id-b, got %v", err)
				}
				return
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("want %v, got %v (%+v)", c.wantErr, err, r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.ServerID != c.wantServer || r.Tool != c.wantTool || r.Strategy != c.wantStrategy {
				t.Fatalf("got %+v", r)
			}
		})
	}
}

func TestCallableListsOnlyConnectedAndDegraded(t *testing.T) {
	var names []string
	for _, e := range table().Callable() {
		names = append(names, e.Name)
	}
	got := strings.Join(names, ",")
	if got != "a-server.api.v2.create,a-server.only_a,a-server.search_tool,b-server.search_tool,b-server.x/y z" {
		t.Fatalf("callable = %s", got)
	}
}

var safe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestAliasIsClientSafeAndDeterministic(t *testing.T) {
	long := strings.Repeat("very_long_tool_name_", 5)
	cases := []struct{ server, tool, want string }{
		{"github-mcp", "create_issue", "github-mcp__create_issue"},
		{"srv", "api.v2.create", "srv__api_v2_create"},
		{"srv", "x/y z", "srv__x_y_z"},
		{"srv", long, ""},
	}
	for _, c := range cases {
		a := Alias(c.server, c.tool, "__")
		if !safe.MatchString(a) {
			t.Errorf("Alias(%q,%q) = %q is not client-safe", c.server, c.tool, a)
		}
		if c.want != "" && a != c.want {
			t.Errorf("Alias(%q,%q) = %q, want %q", c.server, c.tool, a, c.want)
		}
		if a != Alias(c.server, c.tool, "__") {
			t.Errorf("Alias is not deterministic")
		}
	}
	if Alias("srv", long, "__") == Alias("srv", long+"2", "__") {
		t.Errorf("two long names shortened to the same alias")
	}
	// Two tools whose sanitised names collide still get distinct aliases, both resolvable.
	servers := map[string]ServerEntry{"s": {ID: "s", Name: "s", Status: persistence.StatusConnected}}
	tools := map[string][]persistence.Tool{"s": {
		{Name: "s.a.b", OriginalName: "a.b", SourceServerID: "s"},
		{Name: "s.a_b", OriginalName: "a_b", SourceServerID: "s"},
	}}
	rt := buildRouteTable(servers, tools, "__", 1)
	seen := map[string]bool{}
	for _, e := range rt.Callable() {
		if seen[e.Alias] || !safe.MatchString(e.Alias) {
			t.Fatalf("alias %q duplicated or unsafe", e.Alias)
		}
		seen[e.Alias] = true
		if r, err := rt.Resolve(e.Alias, ""); err != nil || r.Name != e.Name {
			t.Fatalf("alias %q resolves to %+v %v, want %s", e.Alias, r, err, e.Name)
		}
	}
}
