package storetest

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

const searchSchema = `{"type":"object","properties":{"q":{"type":"string"},"limit":{"type":"integer"}},"required":["q"]}`

// The same schema as searchSchema, encoded differently: must not count as a change.
const searchSchemaReordered = `{ "required": ["q"],
  "properties": {"limit": {"type": "integer"}, "q": {"type": "string"}},
  "type": "object" }`

func testReplaceServerTools(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "srv")
	bystander := mustCreate(t, s, "bystander")
	mustReplace(t, s, bystander.ID, []persistence.ToolDef{toolDef("search", "other server's", searchSchema)})
	bystanderTools := mustTools(t, s, bystander.ID)

	// Discovery 1: three new tools, one with a dotted original name, one without schema or definition.
	defA := toolDef("search", "Search things", searchSchema)
	defA.Definition = json.RawMessage(`{"name":"search","title":"Search","annotations":{"readOnlyHint":true}}`)
	before := clock()
	diff := mustReplace(t, s, srv.ID, []persistence.ToolDef{defA, toolDef("fetch", "Fetch a URL", `{"type":"object"}`),
		toolDef("ns.sub.tool", "dotted", "")})
	after := clock()
	wantDiff(t, "first discovery", diff, persistence.ToolDiff{
		Added: []string{"srv.fetch", "srv.ns.sub.tool", "srv.search"}, Total: 3})
	if got := mustGet(t, s, srv.ID); got.ToolCount != 3 {
		t.Errorf("ToolCount = %d, want 3", got.ToolCount)
	}
	first := toolsByName(mustTools(t, s, srv.ID))
	if len(first) != 3 {
		t.Fatalf("stored %d tools, want 3", len(first))
	}
	for _, tl := range first {
		between(t, tl.Name+" DiscoveredAt", tl.DiscoveredAt, before, after)
		if !tl.UpdatedAt.Equal(tl.DiscoveredAt) || tl.ChangedAt != nil {
			t.Errorf("%s: updated %v changed %v, want updated = discovered and no change", tl.Name, tl.UpdatedAt,
				tl.ChangedAt)
		}
		if tl.SourceServerID != srv.ID || !tl.IsExternal || tl.IsClassified ||
			tl.ClassificationState != persistence.ClassificationDiscovered || len(tl.SkillIDs) != 0 ||
			tl.PrimarySkillID != nil {
			t.Errorf("%s: new tool has %s", tl.Name, dump(tl))
		}
		if b, err := hex.DecodeString(tl.DefinitionHash); err != nil || len(b) != 32 {
			t.Errorf("%s: DefinitionHash %q is not a hex SHA-256", tl.Name, tl.DefinitionHash)
		}
		got, err := s.GetTool(ctx, tl.ID)
		if err != nil {
			t.Fatalf("GetTool(%d): %v", tl.ID, err)
		}
		equalTool(t, tl, got)
	}
	search, dotted := first["srv.search"], first["srv.ns.sub.tool"]
	if search.OriginalName != "search" || search.Description != "Search things" ||
		!jsonEqual(search.InputSchema, json.RawMessage(searchSchema)) || !jsonEqual(search.Definition, defA.Definition) {
		t.Errorf("srv.search stored as %s", dump(search))
	}
	if dotted.OriginalName != "ns.sub.tool" || !jsonEqual(dotted.InputSchema, json.RawMessage(`{}`)) ||
		!jsonEqual(dotted.Definition, json.RawMessage(`{}`)) {
		t.Errorf("srv.ns.sub.tool stored as %s, want original name ns.sub.tool and {} schema/definition", dump(dotted))
	}
	if first["srv.fetch"].DefinitionHash == search.DefinitionHash {
		t.Error("different tools have the same definition hash")
	}

	// Classification survives rediscovery.
	if err := s.SetToolClassification(ctx, search.ID, persistence.ToolClassification{
		State: persistence.ClassificationClassified, SkillIDs: []string{"search", "web"},
		PrimarySkillID: ptr("search")}); err != nil {
		t.Fatal(err)
	}
	search = mustTool(t, s, search.ID)

	// Discovery 2: search re-encoded with a new title (not a change), fetch described differently (a change),
	// the dotted tool gone, a new one, and a duplicate in the list (the last one counts).
	defA2 := toolDef("search", "Search things", searchSchemaReordered)
	defA2.Definition = json.RawMessage(`{"name":"search","title":"Search v2"}`)
	before = clock()
	diff = mustReplace(t, s, srv.ID, []persistence.ToolDef{
		toolDef("new", "first listing", ""), defA2, toolDef("fetch", "Fetch a URL over HTTP", `{"type":"object"}`),
		toolDef("new", "second listing", `{"type":"object"}`),
	})
	after = clock()
	wantDiff(t, "second discovery", diff, persistence.ToolDiff{Added: []string{"srv.new"},
		Removed: []string{"srv.ns.sub.tool"}, Changed: []string{"srv.fetch"}, Total: 3})
	second := toolsByName(mustTools(t, s, srv.ID))
	if len(second) != 3 || mustGet(t, s, srv.ID).ToolCount != 3 {
		t.Fatalf("after second discovery: %d tools, ToolCount %d; want 3", len(second), mustGet(t, s, srv.ID).ToolCount)
	}
	if _, err := s.GetTool(ctx, dotted.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("GetTool(removed tool): %v, want ErrNotFound", err)
	}

	gotSearch := second["srv.search"]
	wantSearch := search
	wantSearch.InputSchema, wantSearch.Definition = json.RawMessage(searchSchemaReordered), defA2.Definition
	between(t, "srv.search UpdatedAt", gotSearch.UpdatedAt, before, after)
	wantSearch.UpdatedAt = gotSearch.UpdatedAt
	equalTool(t, wantSearch, gotSearch) // same id, discovered_at, hash, classification; no ChangedAt

	gotFetch, oldFetch := second["srv.fetch"], first["srv.fetch"]
	if gotFetch.ID != oldFetch.ID || !gotFetch.DiscoveredAt.Equal(oldFetch.DiscoveredAt) {
		t.Errorf("srv.fetch: id %d discovered %v, want kept %d %v", gotFetch.ID, gotFetch.DiscoveredAt, oldFetch.ID,
			oldFetch.DiscoveredAt)
	}
	if gotFetch.ChangedAt == nil {
		t.Fatal("srv.fetch: ChangedAt not set after its description changed")
	}
	between(t, "srv.fetch ChangedAt", *gotFetch.ChangedAt, before, after)
	if gotFetch.DefinitionHash == oldFetch.DefinitionHash || gotFetch.Description != "Fetch a URL over HTTP" {
		t.Errorf("srv.fetch: hash %s description %q after change", gotFetch.DefinitionHash, gotFetch.Description)
	}
	if n := second["srv.new"]; n.Description != "second listing" || !jsonEqual(n.InputSchema, json.RawMessage(`{"type":"object"}`)) {
		t.Errorf("duplicate listing: stored %s, want the last one", dump(n))
	}

	// Discovery 3: only the input schema of search changes; fetch unchanged keeps its earlier ChangedAt.
	time.Sleep(2 * time.Millisecond)
	diff = mustReplace(t, s, srv.ID, []persistence.ToolDef{
		toolDef("search", "Search things", `{"type":"object","properties":{"q":{"type":"string"}}}`),
		toolDef("fetch", "Fetch a URL over HTTP", `{"type":"object"}`), toolDef("new", "second listing", `{"type":"object"}`),
	})
	wantDiff(t, "schema change", diff, persistence.ToolDiff{Changed: []string{"srv.search"}, Total: 3})
	third := toolsByName(mustTools(t, s, srv.ID))
	if third["srv.search"].ChangedAt == nil || third["srv.search"].IsClassified != true {
		t.Errorf("srv.search after schema change: %s, want ChangedAt set and classification kept", dump(third["srv.search"]))
	}
	if c := third["srv.fetch"].ChangedAt; c == nil || !c.Equal(*gotFetch.ChangedAt) {
		t.Errorf("srv.fetch ChangedAt = %v, want kept %v", c, gotFetch.ChangedAt)
	}

	// Discovery 4: the server lists nothing.
	diff = mustReplace(t, s, srv.ID, nil)
	wantDiff(t, "empty list", diff, persistence.ToolDiff{
		Removed: []string{"srv.fetch", "srv.new", "srv.search"}, Total: 0})
	if tools := mustTools(t, s, srv.ID); len(tools) != 0 {
		t.Errorf("%d tools left after an empty discovery", len(tools))
	}
	if got := mustGet(t, s, srv.ID); got.ToolCount != 0 {
		t.Errorf("ToolCount = %d after an empty discovery", got.ToolCount)
	}
	diff = mustReplace(t, s, srv.ID, []persistence.ToolDef{})
	wantDiff(t, "empty again", diff, persistence.ToolDiff{})

	// The other server was never touched.
	after2 := mustTools(t, s, bystander.ID)
	if len(after2) != 1 {
		t.Fatalf("bystander has %d tools", len(after2))
	}
	equalTool(t, bystanderTools[0], after2[0])
}

func mustTool(t *testing.T, s persistence.Store, id int64) persistence.Tool {
	t.Helper()
	tl, err := s.GetTool(t.Context(), id)
	if err != nil {
		t.Fatalf("GetTool(%d): %v", id, err)
	}
	return tl
}

func wantDiff(t *testing.T, what string, got, want persistence.ToolDiff) {
	t.Helper()
	if !sameStrings(got.Added, want.Added) || !sameStrings(got.Removed, want.Removed) ||
		!sameStrings(got.Changed, want.Changed) || got.Total != want.Total {
		t.Errorf("%s: diff = %s, want %s", what, dump(got), dump(want))
	}
}

func testReplaceServerToolsInvalid(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "inv")
	mustReplace(t, s, srv.ID, []persistence.ToolDef{toolDef("keep", "k", "")})
	want := mustTools(t, s, srv.ID)
	tests := []struct {
		name string
		defs []persistence.ToolDef
	}{
		{"invalid schema", []persistence.ToolDef{toolDef("ok", "", ""), toolDef("bad", "", `{"type":`)}},
		{"invalid definition", []persistence.ToolDef{{OriginalName: "bad", Definition: json.RawMessage(`[1,`)}}},
		{"trailing data in schema", []persistence.ToolDef{toolDef("bad", "", `{} {}`)}},
		{"empty name", []persistence.ToolDef{toolDef("", "no name", "")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.ReplaceServerTools(t.Context(), srv.ID, tc.defs, nil); err == nil {
				t.Fatal("ReplaceServerTools succeeded, want an error")
			}
			got := mustTools(t, s, srv.ID)
			if len(got) != 1 {
				t.Fatalf("after a refused replace: %d tools, want the 1 kept", len(got))
			}
			equalTool(t, want[0], got[0])
			if c := mustGet(t, s, srv.ID).ToolCount; c != 1 {
				t.Errorf("ToolCount = %d after a refused replace", c)
			}
		})
	}
}

// testDefinitionHashIsPortable pins the definition hash: SHA-256 of the JSON array [description, input schema with
// sorted keys and no spaces]. Both stores must compute it alike (a database moved from SQLite to PostgreSQL must not
// see every tool as changed) and it must not change between releases.
func testDefinitionHashIsPortable(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "hash")
	tests := []struct {
		name, description, schema, want string
	}{
		// sha256 of ["Create an issue",{"properties":{"title":{"type":"string"}},"required":["title"],"type":"object"}]
		{"create_issue", "Create an issue",
			`{"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}`,
			"835cddf8d03cc27f14e58e5fb09605b72db7492dc7edfad6e7cd934af20c54eb"},
		// sha256 of ["",{}]
		{"no_schema", "", "", "74ef87f9f2b6ee5d715f94ab1ca8f154025d32d2baa944d6a013d68024c75d27"},
	}
	var defs []persistence.ToolDef
	for _, tc := range tests {
		defs = append(defs, toolDef(tc.name, tc.description, tc.schema))
	}
	mustReplace(t, s, srv.ID, defs)
	got := toolsByName(mustTools(t, s, srv.ID))
	for _, tc := range tests {
		if h := got["hash."+tc.name].DefinitionHash; h != tc.want {
			t.Errorf("%s: DefinitionHash = %s, want %s", tc.name, h, tc.want)
		}
	}
}

// testReplaceManyTools is EC-006: a large discovery is one quick call.
func testReplaceManyTools(t *testing.T, s persistence.Store) {
	const n = 1200
	srv := mustCreate(t, s, "big")
	defs := make([]persistence.ToolDef, n)
	for i := range defs {
		defs[i] = toolDef(fmt.Sprintf("tool_%04d", i), fmt.Sprintf("Tool number %d", i),
			fmt.Sprintf(`{"type":"object","properties":{"arg%d":{"type":"string"}}}`, i))
	}
	timed := func(what string, defs []persistence.ToolDef) persistence.ToolDiff {
		t.Helper()
		start := time.Now()
		d := mustReplace(t, s, srv.ID, defs)
		took := time.Since(start)
		t.Logf("%s: %d tools in %v", what, len(defs), took)
		if took > 20*time.Second { // generous: the race detector and a shared CI machine are slow
			t.Errorf("%s took %v", what, took)
		}
		return d
	}
	if d := timed("insert", defs); len(d.Added) != n || d.Total != n {
		t.Fatalf("insert: %d added, total %d; want %d", len(d.Added), d.Total, n)
	}
	if d := timed("unchanged", defs); len(d.Added)+len(d.Removed)+len(d.Changed) != 0 || d.Total != n {
		t.Errorf("unchanged rediscovery: %d added, %d removed, %d changed, total %d", len(d.Added), len(d.Removed),
			len(d.Changed), d.Total)
	}
	// Change every third description, drop the last 100, add 100 more.
	next := make([]persistence.ToolDef, 0, n)
	for i, d := range defs[:n-100] {
		if i%3 == 0 {
			d.Description += " (v2)"
		}
		next = append(next, d)
	}
	for i := n; i < n+100; i++ {
		next = append(next, toolDef(fmt.Sprintf("tool_%04d", i), "added", ""))
	}
	d := timed("mixed", next)
	if len(d.Added) != 100 || len(d.Removed) != 100 || len(d.Changed) != (n-100+2)/3 || d.Total != n {
		t.Errorf("mixed: %d added, %d removed, %d changed, total %d; want 100, 100, %d, %d", len(d.Added),
			len(d.Removed), len(d.Changed), d.Total, (n-100+2)/3, n)
	}
	if got := mustGet(t, s, srv.ID).ToolCount; got != n {
		t.Errorf("ToolCount = %d, want %d", got, n)
	}
	page, total, err := s.ListTools(t.Context(), persistence.ListToolsFilter{ServerID: srv.ID, Limit: 50, Offset: n - 20})
	if err != nil {
		t.Fatal(err)
	}
	if total != n || len(page) != 20 || page[0].Name != fmt.Sprintf("big.tool_%04d", n-20+100) {
		t.Errorf("last page: total %d, %d tools starting %q", total, len(page), toolNames(page))
	}
}

func testListTools(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	s1 := mustCreate(t, s, "s1")
	s2 := mustCreate(t, s, "s2")
	empty := mustCreate(t, s, "empty")
	mustReplace(t, s, s1.ID, []persistence.ToolDef{toolDef("b", "", ""), toolDef("a", "", ""), toolDef("c", "", "")})
	mustReplace(t, s, s2.ID, []persistence.ToolDef{toolDef("z", "", ""), toolDef("a", "", "")})

	tests := []struct {
		name      string
		filter    persistence.ListToolsFilter
		want      []string
		wantTotal int
	}{
		{"all", persistence.ListToolsFilter{}, []string{"s1.a", "s1.b", "s1.c", "s2.a", "s2.z"}, 5},
		{"all paged", persistence.ListToolsFilter{Limit: 2, Offset: 2}, []string{"s1.c", "s2.a"}, 5},
		{"all offset", persistence.ListToolsFilter{Offset: 3}, []string{"s2.a", "s2.z"}, 5},
		{"past the end", persistence.ListToolsFilter{Limit: 10, Offset: 9}, nil, 5},
		{"server", persistence.ListToolsFilter{ServerID: s1.ID}, []string{"s1.a", "s1.b", "s1.c"}, 3},
		{"server first page", persistence.ListToolsFilter{ServerID: s1.ID, Limit: 2}, []string{"s1.a", "s1.b"}, 3},
		{"server second page", persistence.ListToolsFilter{ServerID: s1.ID, Limit: 2, Offset: 2}, []string{"s1.c"}, 3},
		{"other server", persistence.ListToolsFilter{ServerID: s2.ID, Limit: 1, Offset: 1}, []string{"s2.z"}, 2},
		{"server without tools", persistence.ListToolsFilter{ServerID: empty.ID}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, total, err := s.ListTools(ctx, tc.filter)
			if err != nil {
				t.Fatalf("ListTools(%+v): %v", tc.filter, err)
			}
			if total != tc.wantTotal || !sameStrings(toolNames(got), tc.want) {
				t.Errorf("ListTools = %v (total %d), want %v (total %d)", toolNames(got), total, tc.want, tc.wantTotal)
			}
			for _, tl := range got {
				equalTool(t, mustTool(t, s, tl.ID), tl)
			}
		})
	}
}

func testSetToolClassificationAndCountTools(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	s1 := mustCreate(t, s, "s1")
	s2 := mustCreate(t, s, "s2")
	empty := mustCreate(t, s, "empty")
	mustReplace(t, s, s1.ID, []persistence.ToolDef{toolDef("a", "", ""), toolDef("b", "", ""), toolDef("c", "", "")})
	mustReplace(t, s, s2.ID, []persistence.ToolDef{toolDef("a", "", ""), toolDef("b", "", "")})
	tools := toolsByName(mustTools(t, s, ""))

	classify := []struct {
		tool string
		c    persistence.ToolClassification
	}{
		{"s1.a", persistence.ToolClassification{State: persistence.ClassificationClassified,
			SkillIDs: []string{"code_management", "issue_tracking"}, PrimarySkillID: ptr("issue_tracking")}},
		{"s1.b", persistence.ToolClassification{State: persistence.ClassificationUnclassified}},
		{"s1.c", persistence.ToolClassification{State: persistence.ClassificationClassifying}},
		{"s2.a", persistence.ToolClassification{State: persistence.ClassificationClassified, SkillIDs: []string{"web"}}},
	}
	for _, c := range classify {
		t.Run("classify "+c.tool, func(t *testing.T) {
			tl := tools[c.tool]
			before := clock()
			if err := s.SetToolClassification(ctx, tl.ID, c.c); err != nil {
				t.Fatalf("SetToolClassification: %v", err)
			}
			got := mustTool(t, s, tl.ID)
			between(t, "UpdatedAt", got.UpdatedAt, before, clock())
			want := tl
			want.UpdatedAt, want.ClassificationState, want.SkillIDs, want.PrimarySkillID = got.UpdatedAt, c.c.State,
				c.c.SkillIDs, c.c.PrimarySkillID
			want.IsClassified = c.c.State == persistence.ClassificationClassified
			equalTool(t, want, got)
		})
	}
	counts := []struct {
		name   string
		server string
		want   persistence.ToolCounts
	}{
		{"all", "", persistence.ToolCounts{Total: 5, Classified: 2, Unclassified: 3}},
		{"s1", s1.ID, persistence.ToolCounts{Total: 3, Classified: 1, Unclassified: 2}},
		{"s2", s2.ID, persistence.ToolCounts{Total: 2, Classified: 1, Unclassified: 1}},
		{"no tools", empty.ID, persistence.ToolCounts{}},
	}
	for _, c := range counts {
		t.Run("count "+c.name, func(t *testing.T) {
			got, err := s.CountTools(ctx, c.server)
			if err != nil || got != c.want {
				t.Errorf("CountTools(%s) = %+v, %v; want %+v", c.name, got, err, c.want)
			}
		})
	}
	t.Run("reclassify", func(t *testing.T) {
		if err := s.SetToolClassification(ctx, tools["s1.a"].ID, persistence.ToolClassification{
			State: persistence.ClassificationClassifying}); err != nil {
			t.Fatal(err)
		}
		got := mustTool(t, s, tools["s1.a"].ID)
		if got.IsClassified || len(got.SkillIDs) != 0 || got.PrimarySkillID != nil {
			t.Errorf("after reclassify: %s, want unclassified without skills", dump(got))
		}
		if c, err := s.CountTools(ctx, ""); err != nil || c != (persistence.ToolCounts{Total: 5, Classified: 1, Unclassified: 4}) {
			t.Errorf("CountTools after reclassify = %+v, %v", c, err)
		}
	})
	t.Run("unknown state", func(t *testing.T) {
		tl := mustTool(t, s, tools["s2.b"].ID)
		if err := s.SetToolClassification(ctx, tl.ID, persistence.ToolClassification{State: "DONE"}); err == nil ||
			errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("SetToolClassification(state DONE): %v, want a validation error", err)
		}
		equalTool(t, tl, mustTool(t, s, tl.ID))
	})
}
