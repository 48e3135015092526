package actors_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// toolReadsOff is a store whose tool reads fail while off is set: a read that still answers came from elsewhere.
type toolReadsOff struct {
	persistence.Store
	off atomic.Bool
}

var errToolReadsOff = errors.New("tool reads are off in this test")

func (s *toolReadsOff) ListTools(ctx context.Context, f persistence.ListToolsFilter) ([]persistence.Tool, int, error) {
	if s.off.Load() {
		return nil, 0, errToolReadsOff
	}
	return s.Store.ListTools(ctx, f)
}

func (s *toolReadsOff) CountTools(ctx context.Context, id string) (persistence.ToolCounts, error) {
	if s.off.Load() {
		return persistence.ToolCounts{}, errToolReadsOff
	}
	return s.Store.CountTools(ctx, id)
}

// TestStoredToolsFromTheTable: an admin's read of a server's tools (System.StoredTools, which REST's tool listings,
// tool detail and include_tools answer from) comes from the routing table, not the store: it answers while the
// store's tool reads fail; it holds the tools the curation hides from the served table (with their stored
// description, not the override's); and it shows an acknowledged write at once (a rename, which renames every
// tool in the store, is seen by the very next read).
func TestStoredToolsFromTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	st := &toolReadsOff{Store: base}
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Config: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(sctx)
		base.Close()
	})
	_, url := manyTools(t, 12)
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "adm", TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"base_url":"` + url + `"}`), AutoConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, sys, 30*time.Second, "tools", hasTool("adm.tool_0011"))

	if _, err := sys.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{Filter: &persistence.ToolFilter{Mode: "deny", Patterns: []string{"tool_001*"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.PutToolOverride(ctx, persistence.ToolOverride{ServerID: srv.ID, OriginalName: "tool_0003", Description: ref("curated text")}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Update(ctx, srv.ID, persistence.ServerPatch{Name: ref("renamed")}); err != nil {
		t.Fatal(err)
	}
	// The read right after the acknowledged writes shows them; a second read, with the store's tool reads failing,
	// answers the same.
	got, err := sys.StoredTools(ctx, srv.ID)
	if err != nil {
		t.Fatalf("StoredTools: %v", err)
	}
	st.off.Store(true)
	again, err := sys.StoredTools(ctx, srv.ID)
	if err != nil {
		t.Fatalf("StoredTools with the store's tool reads failing: %v", err)
	}
	if !reflect.DeepEqual(got[srv.ID], again[srv.ID]) {
		t.Errorf("StoredTools changed when the store's tool reads failed")
	}
	tools := again[srv.ID]
	names := make([]string, len(tools))
	for i, tl := range tools {
		names[i] = tl.Name
	}
	want := make([]string, 12)
	for i := range want {
		want[i] = "renamed.tool_00" + string(rune('0'+i/10)) + string(rune('0'+i%10))
	}
	if !slices.Equal(names, want) {
		t.Fatalf("stored tools = %v, want every stored tool, renamed, by name: %v", names, want)
	}
	if d := tools[3].Description; d != "does thing number 3" {
		t.Errorf("tool_0003 description = %q, want the stored one, not the override's", d)
	}
	rt := sys.Routes()
	if hasTool("renamed.tool_0010")(rt) || !hasTool("renamed.tool_0009")(rt) {
		t.Errorf("the served table should leave out the hidden tool_0010 and keep tool_0009")
	}
	if e, ok := rt.Tool("renamed.tool_0003"); !ok || e.Description != "curated text" {
		t.Errorf("the served table should serve the override's description")
	}
}
