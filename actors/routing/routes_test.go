package routing

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
	return buildRouteTable(servers, tools, "__", 1, nil, nil)
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
	rt := buildRouteTable(servers, tools, "__", 1, nil, nil)
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

// TestAliasesNeverRepoint: once an alias is given to a tool it keeps meaning that tool while the tool exists; a
// collision gives the newcomer the changed name; meta-tool names are reserved whatever the separator.
func TestAliasesNeverRepoint(t *testing.T) {
	up := persistence.StatusConnected
	srv := func(id, name string) ServerEntry { return ServerEntry{ID: id, Name: name, Status: up} }
	tl := func(id int64, server, serverName, original string) persistence.Tool {
		return persistence.Tool{ID: id, Name: serverName + "." + original, OriginalName: original, SourceServerID: server}
	}
	type step struct {
		servers []ServerEntry
		tools   []persistence.Tool
	}
	cases := []struct {
		name  string
		sep   string
		steps []step
		// want maps a namespaced tool name to its alias after the last step; "hashed" means not the plain alias.
		want map[string]string
	}{
		{
			name: "newcomer server n1 with tool a__b does not take n1__a's alias",
			sep:  "__",
			steps: []step{
				{[]ServerEntry{srv("s1", "n1__a")}, []persistence.Tool{tl(1, "s1", "n1__a", "b")}},
				{[]ServerEntry{srv("s1", "n1__a"), srv("s2", "n1")}, []persistence.Tool{tl(1, "s1", "n1__a", "b"), tl(2, "s2", "n1", "a__b")}},
			},
			want: map[string]string{"n1__a.b": "n1__a__b", "n1.a__b": "hashed"},
		},
		{
			name: "first-come alias is kept even when an older tool is renamed onto it",
			sep:  "__",
			steps: []step{
				{[]ServerEntry{srv("s1", "x"), srv("s2", "y__z")}, []persistence.Tool{tl(1, "s1", "x", "t"), tl(2, "s2", "y__z", "t")}},
				// Server x is renamed to y and its tool to z__t: the older tool 1 now wants y__z__t, which tool 2 holds.
				{[]ServerEntry{srv("s1", "y"), srv("s2", "y__z")}, []persistence.Tool{tl(1, "s1", "y", "z__t"), tl(2, "s2", "y__z", "t")}},
			},
			want: map[string]string{"y__z.t": "y__z__t", "y.z__t": "hashed"},
		},
		{
			name:  "meta-tool names are reserved with separator _",
			sep:   "_",
			steps: []step{{[]ServerEntry{srv("s1", "list")}, []persistence.Tool{tl(1, "s1", "list", "mcp_servers")}}},
			want:  map[string]string{"list.mcp_servers": "hashed"},
		},
		{
			name:  "a meta-tool name made by sanitizing is reserved too",
			sep:   "_",
			steps: []step{{[]ServerEntry{srv("s1", "add")}, []persistence.Tool{tl(1, "s1", "add", "mcp.server")}}},
			want:  map[string]string{"add.mcp.server": "hashed"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rt *RouteTable
			history := map[string]map[string]int64{} // alias -> tool ids it ever meant
			for i, st := range c.steps {
				sm := map[string]ServerEntry{}
				for _, s := range st.servers {
					sm[s.ID] = s
				}
				tm := map[string][]persistence.Tool{}
				for _, tool := range st.tools {
					tm[tool.SourceServerID] = append(tm[tool.SourceServerID], tool)
				}
				rt = buildRouteTable(sm, tm, c.sep, uint64(i+1), rt, nil)
				for _, e := range rt.Callable() {
					if IsMetaToolName(e.Alias) {
						t.Fatalf("step %d: tool %s got the meta-tool name %q", i, e.Name, e.Alias)
					}
					if history[e.Alias] == nil {
						history[e.Alias] = map[string]int64{}
					}
					history[e.Alias][e.Name] = e.ID
					ids := map[int64]bool{}
					for _, id := range history[e.Alias] {
						ids[id] = true
					}
					if len(ids) > 1 {
						t.Fatalf("step %d: alias %q re-pointed: it meant tools %v", i, e.Alias, history[e.Alias])
					}
				}
			}
			for name, want := range c.want {
				e, ok := rt.Tool(name)
				if !ok {
					t.Fatalf("tool %s missing", name)
				}
				plain := Alias(e.ServerName, e.OriginalName, c.sep)
				if want == "hashed" {
					if e.Alias == plain {
						t.Errorf("%s: alias %q, want a hashed alias", name, e.Alias)
					}
				} else if e.Alias != want {
					t.Errorf("%s: alias %q, want %q", name, e.Alias, want)
				}
				if r, err := rt.Resolve(e.Alias, ""); err != nil || r.Name != name {
					t.Errorf("alias %q resolves to %+v, %v; want %s", e.Alias, r, err, name)
				}
			}
		})
	}
}

// TestHashedAliasOutlivesItsCollision: a client that learnt a tool's hashed alias during a collision still reaches
// the same tool once the other tool is gone, and never another one.
func TestHashedAliasOutlivesItsCollision(t *testing.T) {
	up := persistence.StatusConnected
	servers := map[string]ServerEntry{"s1": {ID: "s1", Name: "n1__a", Status: up}, "s2": {ID: "s2", Name: "n1", Status: up}}
	old := persistence.Tool{ID: 1, Name: "n1__a.b", OriginalName: "b", SourceServerID: "s1"}
	newer := persistence.Tool{ID: 2, Name: "n1.a__b", OriginalName: "a__b", SourceServerID: "s2"}
	rt := buildRouteTable(servers, map[string][]persistence.Tool{"s1": {old}, "s2": {newer}}, "__", 1, nil, nil)
	e, _ := rt.Tool("n1.a__b")
	hashed := e.Alias
	if hashed == "n1__a__b" {
		t.Fatalf("newcomer took the old alias")
	}
	// The old tool's server is removed: after a restart (no previous table) the newcomer lists its plain alias,
	// and its hashed alias still resolves to it.
	delete(servers, "s1")
	rt = buildRouteTable(servers, map[string][]persistence.Tool{"s2": {newer}}, "__", 2, nil, nil)
	if r, err := rt.Resolve(hashed, ""); err != nil || r.Name != "n1.a__b" {
		t.Fatalf("hashed alias %q resolves to %+v, %v", hashed, r, err)
	}
	if r, err := rt.Resolve("n1__a__b", ""); err != nil || r.Name != "n1.a__b" {
		t.Fatalf("plain alias resolves to %+v, %v (the old tool no longer exists, so the plain alias may now name the newcomer)", r, err)
	}
}

// TestRoutedToolKeepsTheDefinitionOnce checks that the routing table's copy of a definition drops only what the
// entry holds in its own fields, and keeps a definition it cannot read as it is.
func TestRoutedToolKeepsTheDefinitionOnce(t *testing.T) {
	for _, tc := range []struct{ name, def, want string }{
		{"annotations kept", `{"name":"x","description":"d","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`,
			`{"annotations":{"readOnlyHint":true}}`},
		{"nothing else", `{"name":"x","description":"d","inputSchema":{"type":"object"}}`, ``},
		{"unreadable", `[1,2]`, `[1,2]`},
		{"none", ``, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := persistence.Tool{Name: "s.x", Description: "d", InputSchema: []byte(`{"type":"object"}`), Definition: []byte(tc.def)}
			if tc.def == "" {
				in.Definition = nil
			}
			out := RoutedTool(in)
			if string(out.Definition) != tc.want {
				t.Errorf("definition %s, want %s", out.Definition, tc.want)
			}
			if out.Name != in.Name || out.Description != in.Description || string(out.InputSchema) != string(in.InputSchema) {
				t.Errorf("fields changed: %+v", out)
			}
		})
	}
}
