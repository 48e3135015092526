package served_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/served"
)

func table() *routing.RouteTable {
	servers := []routing.ServerEntry{
		{ID: "id-a", Name: "a", Status: persistence.StatusConnected},
		{ID: "id-b", Name: "b", Status: persistence.StatusConnected},
		{ID: "id-c", Name: "c", Status: persistence.StatusDisconnected},
	}
	tool := func(id int64, serverID, server, name string, skills ...string) persistence.Tool {
		return persistence.Tool{ID: id, Name: server + "." + name, OriginalName: name, SourceServerID: serverID, SkillIDs: skills}
	}
	return routing.NewRouteTable(servers, []persistence.Tool{
		tool(1, "id-a", "a", "one", "x"),
		tool(2, "id-a", "a", "two", "x", "y"),
		tool(3, "id-b", "b", "three", "y"),
		tool(4, "id-c", "c", "four", "x"),
	}, "__")
}

func TestRequest(t *testing.T) {
	rt := table()
	tests := []struct {
		name    string
		req     gateway.SearchRequest
		servers []string
		skills  bool
	}{
		{"external tools left out", gateway.SearchRequest{Query: "q"}, nil, false},
		{"callable servers only", gateway.SearchRequest{Query: "q", IncludeExternal: true}, []string{"id-a", "id-b"}, false},
		{"filtered by name", gateway.SearchRequest{IncludeExternal: true, ServerFilter: []string{"b", "c"}}, []string{"id-b"}, false},
		{"skills only", gateway.SearchRequest{ItemType: "skill", IncludeExternal: true, ServerFilter: []string{"a"}}, []string{"id-a"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := served.Request(rt, tt.req)
			if !slices.Equal(got.ServerIDs, tt.servers) || got.SkillsOnly != tt.skills || got.Query != tt.req.Query {
				t.Errorf("Request = servers %v skills-only %v query %q, want %v %v %q", got.ServerIDs, got.SkillsOnly,
					got.Query, tt.servers, tt.skills, tt.req.Query)
			}
			if got.Allow != nil {
				t.Error("an unrestricted scope got a filter")
			}
		})
	}
	// A scope naming no profile of the table holds nothing.
	if req := served.Request(rt, gateway.SearchRequest{Scope: routing.Scope{"nobody"}}); req.Allow == nil || req.Allow(1) {
		t.Error("a restricted scope let a tool outside it through")
	}
}

func TestCatalog(t *testing.T) {
	rt := table()
	tests := []struct {
		name    string
		scope   routing.Scope
		servers []string
		tools   int
		skills  map[string]int
		tool1   bool
	}{
		{"one server", nil, []string{"id-a"}, 2, map[string]int{"x": 2, "y": 1}, true},
		{"two servers", nil, []string{"id-a", "id-b"}, 3, map[string]int{"x": 2, "y": 2}, true},
		{"none", nil, nil, 0, map[string]int{}, true},
		{"empty scope", routing.Scope{"nobody"}, []string{"id-a"}, 0, map[string]int{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := served.Catalog{Table: rt, Scope: tt.scope}
			tools, bySkill := c.Count(tt.servers)
			if tools != tt.tools || !maps.Equal(bySkill, tt.skills) {
				t.Errorf("Count = %d %v, want %d %v", tools, bySkill, tt.tools, tt.skills)
			}
			got, ok := c.Tool(1)
			if ok != tt.tool1 || ok && (got.Name != "a.one" || got.ServerID != "id-a") {
				t.Errorf("Tool(1) = %+v, %v", got, ok)
			}
		})
	}
}

// Under a Visible filter (the access policy) the request allows, and the catalog counts and answers, only the
// tools it accepts; a server whose tools are all hidden is not searched, a callable server without tools still is.
func TestVisible(t *testing.T) {
	rt := table()
	hideB := func(_ *routing.RouteTable, e *routing.ToolEntry) bool { return e.SourceServerID != "id-b" }
	hideTwo := func(_ *routing.RouteTable, e *routing.ToolEntry) bool { return e.ID != 2 }
	tests := []struct {
		name    string
		visible func(*routing.RouteTable, *routing.ToolEntry) bool
		servers []string
		tools   int
		skills  map[string]int
		allow   map[int64]bool
	}{
		{"a server's tools all hidden", hideB, []string{"id-a"}, 2, map[string]int{"x": 2, "y": 1}, map[int64]bool{1: true, 2: true, 3: false}},
		{"one tool hidden", hideTwo, []string{"id-a", "id-b"}, 2, map[string]int{"x": 1, "y": 1}, map[int64]bool{1: true, 2: false, 3: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := served.Request(rt, gateway.SearchRequest{Query: "q", IncludeExternal: true, Visible: tt.visible})
			if !slices.Equal(req.ServerIDs, tt.servers) || req.Allow == nil {
				t.Fatalf("servers %v (filter %v), want %v", req.ServerIDs, req.Allow != nil, tt.servers)
			}
			for id, want := range tt.allow {
				if req.Allow(id) != want {
					t.Errorf("Allow(%d) = %v", id, !want)
				}
			}
			c := served.Catalog{Table: rt, Visible: tt.visible}
			tools, bySkill := c.Count([]string{"id-a", "id-b"})
			if tools != tt.tools || !maps.Equal(bySkill, tt.skills) {
				t.Errorf("Count = %d %v, want %d %v", tools, bySkill, tt.tools, tt.skills)
			}
			for id, want := range tt.allow {
				if _, ok := c.Tool(id); ok != want {
					t.Errorf("Tool(%d) found %v", id, ok)
				}
			}
		})
	}
}
