package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/served"
	"github.com/mcpgw/aggregator/search/toolsearch"
)

// searchActors searches a real engine over a fixed routing table, as actors.System does (served.Search).
type searchActors struct {
	fakeActors
	engine *toolsearch.Searcher
}

func (s *searchActors) Search(ctx context.Context, r gateway.SearchRequest) (gateway.SearchResponse, error) {
	return served.Search(ctx, s.engine, s.rt, r)
}

// searchCatalogue indexes two servers: vault, whose 30 tools match "delete the file" best (their name and
// description say it), and files, whose 8 tools match it less well; the skill of every tool is the taxonomy's
// first.
func searchCatalogue(t *testing.T) (*searchActors, string) {
	t.Helper()
	ctx := context.Background()
	engine, err := toolsearch.New(ctx, toolsearch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	servers := []routing.ServerEntry{
		{ID: "id-vault", Name: "vault", Status: persistence.StatusConnected},
		{ID: "id-files", Name: "files", Status: persistence.StatusConnected},
		{ID: "id-empty", Name: "empty", Status: persistence.StatusConnected},
	}
	skill := "file_operations"
	var tools []persistence.Tool
	deltas := map[string]*routing.ServedDelta{}
	add := func(id int64, serverID, server, name, desc string) {
		tl := persistence.Tool{ID: id, Name: server + "." + name, OriginalName: name, SourceServerID: serverID,
			Description: desc, DefinitionHash: fmt.Sprint("h", id), SkillIDs: []string{skill}, IsClassified: true}
		tools = append(tools, tl)
		d := deltas[serverID]
		if d == nil {
			d = &routing.ServedDelta{ServerID: serverID, ServerName: server, Version: 1, Full: true}
			deltas[serverID] = d
		}
		d.Added = append(d.Added, routing.ServedTool{Tool: &tl})
	}
	for i := range 30 {
		add(int64(100+i), "id-vault", "vault", fmt.Sprintf("delete_file_%02d", i), "Delete the file: delete a file, remove the file for good")
	}
	for i := range 8 {
		add(int64(200+i), "id-files", "files", fmt.Sprintf("trash_%02d", i), "Move a file to the trash bin; it can be deleted later")
	}
	x := served.NewIndex(engine, nil, nil)
	for _, d := range deltas {
		if x.Apply(ctx, d) != served.Applied {
			t.Fatalf("delta of %s not applied", d.ServerName)
		}
	}
	return &searchActors{fakeActors: fakeActors{rt: routing.NewRouteTable(servers, tools, "__")}, engine: engine}, skill
}

// Under a policy that hides the best-matching tools from a caller, search still answers up to limit tools the
// caller may see (the engine chooses among the visible ones), and its counts (tools searched, a matched skill's
// tools, servers searched: a server whose tools are all hidden is not one; the empty one is) count only those: a
// hidden tool's name, score or number never shows.
func TestSearchHonoursLimitUnderPolicy(t *testing.T) {
	a, skill := searchCatalogue(t)
	set, err := policy.Compile(policy.Document{Rules: []policy.Rule{
		{Name: "no-vault-for-ci", Effect: policy.Deny, When: `subject == "ci" && server == "vault"`}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(a, gateway.Options{Policy: &gateway.Rules{Source: staticPolicy{set}}})
	ci := auth.Identity{Name: "ci", Scope: auth.ScopeClient}
	alice := auth.Identity{Name: "alice", Scope: auth.ScopeClient}
	tests := []struct {
		name     string
		caller   auth.Identity
		limit    int
		strategy string
		hits     int
		searched int
		servers  int
		hidden   bool // vault's tools may be answered
	}{
		{"hidden tools rank first; the limit is still filled", ci, 5, gateway.StrategyDirect, 5, 8, 2, false},
		{"hierarchical too", ci, 5, gateway.StrategyHierarchical, 5, 8, 2, false},
		{"fewer visible than the limit: all of them", ci, 20, gateway.StrategyDirect, 8, 8, 2, false},
		{"a caller the rule does not hide from sees the best", alice, 5, gateway.StrategyDirect, 5, 38, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := gateway.SearchRequest{Query: "delete the file", ItemType: "tool", IncludeExternal: true, Limit: tt.limit,
				Strategy: tt.strategy, SkillThreshold: 0, ToolThreshold: 0}
			_, res, err := g.Search(context.Background(), tt.caller, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tools) != tt.hits {
				t.Errorf("answered %d tools, want %d: %v", len(res.Tools), tt.hits, names(res.Tools))
			}
			for _, h := range res.Tools {
				if vault := strings.HasPrefix(h.Tool.Name, "vault."); vault && !tt.hidden {
					t.Errorf("answered the hidden tool %s", h.Tool.Name)
				}
			}
			if tt.hidden && len(res.Tools) > 0 && !strings.HasPrefix(res.Tools[0].Tool.Name, "vault.") {
				t.Errorf("the best match for alice is %s, want a vault tool (the fixture ranks them first)", res.Tools[0].Tool.Name)
			}
			if res.ToolsSearched != tt.searched || res.ServersSearched != tt.servers {
				t.Errorf("searched %d tools of %d servers, want %d of %d", res.ToolsSearched, res.ServersSearched, tt.searched, tt.servers)
			}
			for _, m := range res.MatchedSkills {
				if m.Skill.ID == skill && m.ToolCount != tt.searched {
					t.Errorf("matched skill %s counts %d tools, want %d", skill, m.ToolCount, tt.searched)
				}
			}
		})
	}
}

func names(hits []gateway.SearchHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.Name
	}
	return out
}
