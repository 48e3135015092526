package routing

import (
	"testing"
	"unsafe"

	"github.com/mcpgw/aggregator/persistence"
)

func servedRows(id, name string, originals ...string) ServerRows {
	rows := ServerRows{Found: true, Server: persistence.Server{ID: id, Name: name, Status: persistence.StatusDisconnected},
		Curation: NewServerCuration(persistence.ToolPolicy{}, nil)}
	for i, o := range originals {
		rows.Tools = append(rows.Tools, RoutedTool(persistence.Tool{ID: int64(i + 1), Name: name + "." + o, OriginalName: o, SourceServerID: id,
			Definition: []byte(`{"name":"` + o + `"}`), DefinitionHash: o}))
	}
	return rows
}

func TestBuilderStagesToolsOfAConnectingServer(t *testing.T) {
	b := NewBuilder("__", NewVersions(), NewPinHashes())
	b.ApplyStatus(StatusChange{ServerID: "s", ServerName: "files", To: persistence.StatusConnecting})
	b.ApplyServer("s", servedRows("s", "files", "read"), true)
	if tab, deltas := b.Build(nil); len(deltas) != 0 || len(tab.ToolsIn(nil)) != 0 {
		t.Fatalf("a CONNECTING server's tools entered the table (%d deltas)", len(deltas))
	}
	if !b.ApplyStatus(StatusChange{ServerID: "s", ServerName: "files", To: persistence.StatusConnected}) {
		t.Fatal("CONNECTED changed nothing")
	}
	tab, deltas := b.Build(nil)
	if len(deltas) != 1 || len(deltas[0].Added) != 1 || deltas[0].Version != 1 {
		t.Fatalf("deltas %+v, want one adding read at version 1", deltas)
	}
	if e, ok := tab.Server("s"); !ok || e.Status != persistence.StatusConnected || len(tab.ToolsIn(nil)) != 1 {
		t.Fatalf("table server %+v, %d tools; want CONNECTED with its tool", e, len(tab.ToolsIn(nil)))
	}
}

func TestBuilderApplyStatusOrder(t *testing.T) {
	tests := []struct {
		name    string
		second  StatusChange
		applied bool
	}{
		{name: "a newer sequence", second: StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusError, Epoch: 2, Seq: 6}, applied: true},
		{name: "a newer epoch", second: StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusError, Epoch: 3, Seq: 1}, applied: true},
		{name: "an older sequence", second: StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusError, Epoch: 2, Seq: 4}},
		{name: "an older epoch", second: StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusError, Epoch: 1, Seq: 9}},
		{name: "the same change again", second: StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusConnected}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder("__", NewVersions(), NewPinHashes())
			b.ApplyStatus(StatusChange{ServerID: "s", ServerName: "n", To: persistence.StatusConnected, Epoch: 2, Seq: 5})
			if got := b.ApplyStatus(tt.second); got != tt.applied {
				t.Fatalf("ApplyStatus = %v, want %v", got, tt.applied)
			}
		})
	}
}

func TestBuilderKeepsLiveStatusAndRemoves(t *testing.T) {
	b := NewBuilder("__", NewVersions(), NewPinHashes())
	b.ApplyStatus(StatusChange{ServerID: "s", ServerName: "files", To: persistence.StatusConnected})
	b.ApplyServer("s", servedRows("s", "files", "read", "write"), true) // the row says DISCONNECTED: it lags
	if e, _ := b.Server("s"); e.Status != persistence.StatusConnected {
		t.Fatalf("status %s after a load, want CONNECTED (the events are the truth)", e.Status)
	}
	if n := len(b.Snapshot()[0].Added); n != 2 {
		t.Fatalf("snapshot holds %d tools, want 2", n)
	}
	b.Remove("s")
	tab, _ := b.Build(nil)
	if _, ok := tab.Server("s"); ok || len(b.Snapshot()) != 0 {
		t.Fatal("a removed server is still in the table")
	}
	b.ApplyServer("gone", ServerRows{}, false)
	if _, ok := b.Server("gone"); ok {
		t.Fatal("a server not found was added")
	}
}

// TestBuilderStoredTools: the table holds every loaded server's stored rows (what admin reads answer), also while
// its served tools are staged, and an earlier table keeps the rows it was built with.
func TestBuilderStoredTools(t *testing.T) {
	b := NewBuilder("__", NewVersions(), NewPinHashes())
	b.ApplyStatus(StatusChange{ServerID: "s", ServerName: "files", To: persistence.StatusConnecting})
	rows := servedRows("s", "files", "read", "write")
	rows.Stored = rows.Tools
	b.ApplyServer("s", rows, true)
	first, _ := b.Build(nil)
	if got, ok := first.StoredTools("s"); !ok || len(got) != 2 || len(first.ToolsIn(nil)) != 0 {
		t.Fatalf("staged server: stored %d (known %v), served %d; want 2 stored, none served", len(got), ok, len(first.ToolsIn(nil)))
	}
	b.Remove("s")
	second, _ := b.Build(first)
	if _, ok := second.StoredTools("s"); ok {
		t.Fatal("a removed server's stored tools are still in the table")
	}
	if got, ok := first.StoredTools("s"); !ok || len(got) != 2 {
		t.Fatal("building a table changed an earlier one's stored tools")
	}
}

// TestStoredToolsShareServedText: with curation that changes what is served (an override here), a tool served as
// stored is its served row (its text held once) and a curated one keeps its stored text.
func TestStoredToolsShareServedText(t *testing.T) {
	desc := "curated"
	c := NewServerCuration(persistence.ToolPolicy{}, []persistence.ToolOverride{{ServerID: "s", OriginalName: "b", Description: &desc}})
	stored := func() []persistence.Tool {
		var out []persistence.Tool
		for i, o := range []string{"a", "b"} {
			out = append(out, persistence.Tool{ID: int64(i + 1), Name: "files." + o, OriginalName: o, Description: "stored " + o,
				SourceServerID: "s", Definition: []byte(`{"name":"` + o + `"}`), DefinitionHash: o})
		}
		return out
	}
	served := ServedTools("s", c.Serve(stored(), NewPinHashes(), nil), nil)
	got := StoredTools("s", c, stored(), served, nil)
	if len(got) != 2 || got[0].Description != "stored a" || got[1].Description != "stored b" || served[1].Description != "curated" {
		t.Fatalf("stored %+v, served %+v", got, served)
	}
	if unsafe.StringData(got[0].Description) != unsafe.StringData(served[0].Description) {
		t.Error("a tool served as stored got a copy of its text")
	}
}
