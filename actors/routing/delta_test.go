package routing

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func TestDiffServed(t *testing.T) {
	weather := "weather"
	tool := func(id int64, desc string, mod func(*persistence.Tool)) persistence.Tool {
		x := persistence.Tool{ID: id, Name: "s.t" + string(rune('0'+id)), OriginalName: "t" + string(rune('0'+id)), Description: desc,
			InputSchema: json.RawMessage(`{"type":"object"}`), DefinitionHash: "h-" + desc, ClassificationState: persistence.ClassificationDiscovered}
		if mod != nil {
			mod(&x)
		}
		return x
	}
	classified := func(x *persistence.Tool) {
		x.ClassificationState, x.IsClassified, x.SkillIDs, x.PrimarySkillID = persistence.ClassificationClassified, true, []string{weather}, &weather
	}
	before := []persistence.Tool{tool(1, "a", nil), tool(2, "b", nil), tool(3, "c", nil)}
	cases := []struct {
		name                    string
		after                   []persistence.Tool
		added, changed, removed []int64
		redefined               []int64
	}{
		{name: "same", after: before},
		{name: "added", after: append(slices.Clone(before), tool(4, "d", nil)), added: []int64{4}},
		{name: "removed", after: before[:2], removed: []int64{3}},
		{name: "redefined", after: []persistence.Tool{before[0], tool(2, "b2", nil), before[2]}, changed: []int64{2}, redefined: []int64{2}},
		{name: "classified", after: []persistence.Tool{tool(1, "a", classified), before[1], before[2]}, changed: []int64{1}},
		{name: "all", after: []persistence.Tool{tool(1, "a", classified), tool(3, "c3", nil), tool(5, "e", nil)},
			added: []int64{5}, changed: []int64{1, 3}, removed: []int64{2}, redefined: []int64{3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := DiffServed("s", "s", 7, before, tc.after, func(string) string { return "" })
			ids := func(list []ServedTool, only func(ServedTool) bool) []int64 {
				var out []int64
				for _, st := range list {
					if only == nil || only(st) {
						out = append(out, st.Tool.ID)
					}
				}
				return out
			}
			if got := ids(d.Added, nil); !slices.Equal(got, tc.added) {
				t.Errorf("added %v, want %v", got, tc.added)
			}
			if got := ids(d.Changed, nil); !slices.Equal(got, tc.changed) {
				t.Errorf("changed %v, want %v", got, tc.changed)
			}
			if got := ids(d.Changed, func(st ServedTool) bool { return st.Redefined }); !slices.Equal(got, tc.redefined) {
				t.Errorf("redefined %v, want %v", got, tc.redefined)
			}
			if !slices.Equal(d.Removed, tc.removed) {
				t.Errorf("removed %v, want %v", d.Removed, tc.removed)
			}
			if d.Empty() != (tc.added == nil && tc.changed == nil && tc.removed == nil) {
				t.Errorf("Empty() = %v", d.Empty())
			}
			if d.Version != 7 || d.Full {
				t.Errorf("version %d full %v", d.Version, d.Full)
			}
		})
	}
}

func ExampleDiffServed() {
	before := []persistence.Tool{{ID: 1, Name: "s.a", Description: "old"}, {ID: 2, Name: "s.b"}}
	after := []persistence.Tool{{ID: 1, Name: "s.a", Description: "new"}, {ID: 3, Name: "s.c"}}
	d := DiffServed("id-1", "s", 2, before, after, func(string) string { return "" })
	for _, st := range d.Added {
		fmt.Println("added", st.Tool.Name)
	}
	for _, st := range d.Changed {
		fmt.Println("changed", st.Tool.Name, "redefined:", st.Redefined)
	}
	fmt.Println("removed", d.Removed, "version", d.Version)
	// Output:
	// added s.c
	// changed s.a redefined: true
	// removed [2] version 2
}
