package storeutil

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// TestPlanToolsSkipsRowsStoredAsListed: a kept tool whose stored row (by fingerprint) is what the listing would
// write is not rewritten; any difference in name, description, schema bytes or definition is; a store that gives
// no fingerprint gets every kept tool rewritten.
func TestPlanToolsSkipsRowsStoredAsListed(t *testing.T) {
	def := persistence.ToolDef{OriginalName: "echo", Description: "echoes", InputSchema: json.RawMessage(`{"type":"object"}`),
		Definition: json.RawMessage(`{"name":"echo"}`)}
	planned, err := PlanTools("srv", []persistence.ToolDef{def}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := planned.Insert[0]
	fp := RowFingerprint(stored.Name, stored.Description, stored.InputSchema, stored.Definition)
	with := func(mod func(*persistence.ToolDef)) persistence.ToolDef { d := def; mod(&d); return d }
	cases := []struct {
		name       string
		server     string
		def        persistence.ToolDef
		row        [32]byte
		wantUpdate bool
		wantChange bool
	}{
		{"same row", "srv", def, fp, false, false},
		{"no fingerprint from the store", "srv", def, [32]byte{}, true, false},
		{"server renamed", "srv2", def, fp, true, false},
		{"definition only (title, annotations)", "srv", with(func(d *persistence.ToolDef) {
			d.Definition = json.RawMessage(`{"name":"echo","title":"Echo"}`)
		}), fp, true, false},
		{"schema bytes reordered, same canonical schema", "srv", with(func(d *persistence.ToolDef) {
			d.InputSchema = json.RawMessage(`{ "type": "object" }`)
		}), fp, true, false},
		{"description", "srv", with(func(d *persistence.ToolDef) { d.Description = "repeats" }), fp, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			existing := map[string]ExistingTool{"echo": {ID: 7, Name: "srv.echo", Hash: stored.Hash, Row: c.row}}
			p, err := PlanTools(c.server, []persistence.ToolDef{c.def}, existing)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Insert) != 0 || len(p.Remove) != 0 || p.Diff.Total != 1 {
				t.Fatalf("plan %+v", p)
			}
			if got := len(p.Update) == 1; got != c.wantUpdate {
				t.Fatalf("update planned %v, want %v", got, c.wantUpdate)
			}
			if got := slices.Contains(p.Diff.Changed, c.server+".echo"); got != c.wantChange {
				t.Fatalf("reported changed %v, want %v", got, c.wantChange)
			}
		})
	}
}

func TestRowFingerprintIsLengthPrefixed(t *testing.T) {
	if RowFingerprint("a.b", "c", nil, nil) == RowFingerprint("a.", "bc", nil, nil) {
		t.Fatal("moving bytes between columns must change the fingerprint")
	}
	if RowFingerprint("a", "", []byte("{}"), nil) == RowFingerprint("a", "", nil, []byte("{}")) {
		t.Fatal("schema and definition must not be interchangeable")
	}
}
