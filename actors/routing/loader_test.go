package routing_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// storeWith opens a real SQLite store holding one server with tools a and b and an override renaming b.
func storeWith(t *testing.T, policy persistence.ToolPolicy) (persistence.Store, persistence.Server) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	srv := persistence.Server{Name: "files", TransportType: "STDIO", Status: persistence.StatusDisconnected, Policy: policy,
		ConnectionConfig: []byte(`{"command":"true"}`)}
	if err := st.CreateServer(ctx, &srv, 0); err != nil {
		t.Fatal(err)
	}
	defs := []persistence.ToolDef{
		{OriginalName: "a", Description: "tool a", InputSchema: []byte(`{"type":"object"}`), Definition: []byte(`{"name":"a","inputSchema":{"type":"object"}}`)},
		{OriginalName: "b", Description: "tool b", InputSchema: []byte(`{"type":"object"}`), Definition: []byte(`{"name":"b","inputSchema":{"type":"object"}}`)},
	}
	if _, err := st.ReplaceServerTools(ctx, srv.ID, defs, nil); err != nil {
		t.Fatal(err)
	}
	exposed := "bee"
	if _, err := st.PutToolOverride(ctx, persistence.ToolOverride{ServerID: srv.ID, OriginalName: "b", ExposedName: &exposed}); err != nil {
		t.Fatal(err)
	}
	return st, srv
}

func TestLoaderLoadServer(t *testing.T) {
	tests := []struct {
		name      string
		policy    persistence.ToolPolicy
		wantTools []string
	}{
		{name: "no filter", wantTools: []string{"a", "b"}},
		{name: "deny a", policy: persistence.ToolPolicy{Filter: persistence.ToolFilter{Mode: persistence.FilterDeny, Patterns: []string{"a"}}}, wantTools: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, srv := storeWith(t, tt.policy)
			l := &routing.Loader{Store: st, Pins: routing.NewPinHashes()}
			rows, err := l.LoadServer(context.Background(), srv.ID, nil, nil)
			if err != nil || !rows.Found {
				t.Fatalf("LoadServer = found %v, %v", rows.Found, err)
			}
			var got []string
			for _, tool := range rows.Tools {
				got = append(got, tool.OriginalName)
			}
			if len(got) != len(tt.wantTools) {
				t.Fatalf("served tools %v, want %v", got, tt.wantTools)
			}
			for i := range got {
				if got[i] != tt.wantTools[i] {
					t.Fatalf("served tools %v, want %v", got, tt.wantTools)
				}
			}
			// The stored rows, what an admin reads, keep every tool whatever the curation serves.
			var stored []string
			for _, tool := range rows.Stored {
				stored = append(stored, tool.OriginalName)
			}
			if !slices.Equal(stored, []string{"a", "b"}) {
				t.Fatalf("stored tools %v, want [a b]", stored)
			}
			if name := rows.Curation.ExposedName("b"); name != "bee" {
				t.Fatalf("curation exposes b as %q, want bee (the override)", name)
			}
			again, err := l.LoadServer(context.Background(), srv.ID, rows.Tools, rows.Stored)
			if err != nil || len(again.Tools) != len(rows.Tools) {
				t.Fatalf("reload with prev = %d tools, %v", len(again.Tools), err)
			}
		})
	}
}

func TestLoaderMissingServerIsNotFound(t *testing.T) {
	st, _ := storeWith(t, persistence.ToolPolicy{})
	l := &routing.Loader{Store: st, Pins: routing.NewPinHashes()}
	rows, err := l.LoadServer(context.Background(), "no-such-server", nil, nil)
	if err != nil || rows.Found {
		t.Fatalf("LoadServer(missing) = found %v, %v; want not found, no error", rows.Found, err)
	}
	if _, found, err := l.LoadFeatures(context.Background(), "no-such-server"); err != nil || found {
		t.Fatalf("LoadFeatures(missing) = found %v, %v", found, err)
	}
}

func TestLoaderLoadAll(t *testing.T) {
	st, srv := storeWith(t, persistence.ToolPolicy{})
	l := &routing.Loader{Store: st, Pins: routing.NewPinHashes()}
	c, err := l.LoadAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Servers[srv.ID]; e.Name != "files" {
		t.Fatalf("catalogue server = %+v", e)
	}
	if n := len(c.Tools[srv.ID]); n != 2 {
		t.Fatalf("catalogue has %d tools of the server, want 2", n)
	}
	if n := len(c.Stored[srv.ID]); n != 2 {
		t.Fatalf("catalogue has %d stored tools of the server, want 2", n)
	}
	if c.Curated[srv.ID].ExposedName("b") != "bee" {
		t.Fatal("catalogue lost the override")
	}
}

// A Loader reads one server's rows from the store and builds its served tools (curation applied); the router
// applies the result off its mailbox.
func ExampleLoader() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "loader-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	srv := persistence.Server{Name: "files", TransportType: "STDIO", ConnectionConfig: []byte(`{"command":"true"}`)}
	_ = st.CreateServer(ctx, &srv, 0)
	_, _ = st.ReplaceServerTools(ctx, srv.ID, []persistence.ToolDef{{OriginalName: "read", Definition: []byte(`{"name":"read"}`)}}, nil)

	l := &routing.Loader{Store: st, Pins: routing.NewPinHashes()}
	rows, err := l.LoadServer(ctx, srv.ID, nil, nil)
	fmt.Println(rows.Found, len(rows.Tools), rows.Tools[0].OriginalName, err)
	// Output: true 1 read <nil>
}
