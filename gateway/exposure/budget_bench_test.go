package exposure

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/rankeval"
)

// fixtureItems is both fixture catalogues as listed items, their tokens estimated on the JSON tools/list serves.
func fixtureItems(t testing.TB) []Item {
	var items []Item
	for _, set := range []string{"livemcpbench", "bfcl"} {
		for _, tl := range rankeval.Load(t, set).Tools {
			schema := tl.InputSchema
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			b, _ := json.Marshal(map[string]any{"name": tl.Server + "__" + tl.Name, "description": tl.Description, "inputSchema": schema})
			items = append(items, Item{Alias: tl.Server + "__" + tl.Name, Name: tl.Server + "." + tl.Name, Server: tl.Server, Tokens: Tokens(b)})
		}
	}
	return items
}

// TestBudgetOnFixtures logs what a 20,000-token budget serves of the real catalogues and of a 50-tool setup (for
// BENCHMARKS.md), and checks the budget holds.
func TestBudgetOnFixtures(t *testing.T) {
	items := fixtureItems(t)
	for _, tc := range []struct {
		name  string
		items []Item
	}{{"2,192 tools (both fixtures)", items}, {"50 tools", items[:50]}} {
		whole := 0
		for _, it := range tc.items {
			whole += it.Tokens
		}
		chosen, more := Choose(Order(tc.items, nil), nil, 20_000, nil)
		spent := 0
		for _, it := range chosen {
			spent += it.Tokens
		}
		if spent > 20_000 {
			t.Fatalf("%s: spent %d", tc.name, spent)
		}
		t.Logf("%s: whole catalogue %d tokens; within 20,000: %d tools, %d tokens, %d left out", tc.name, whole, len(chosen), spent, more)
	}
}

// BenchmarkChoose10k is the work of a budgeted tools/list at 10,000 tools: Choose over the ranked catalogue with
// a caller's 16 recent tools (Order runs at most every 10 s or on a catalogue change, measured apart).
func BenchmarkChoose10k(b *testing.B) {
	base := fixtureItems(b)
	items := make([]Item, 0, 10_000)
	for i := 0; len(items) < 10_000; i++ {
		it := base[i%len(base)]
		it.Alias, it.Name = fmt.Sprintf("%s_%d", it.Alias, i), fmt.Sprintf("%s_%d", it.Name, i)
		items = append(items, it)
	}
	u := NewUsage(24 * time.Hour)
	now := time.Now()
	for i := range 500 {
		u.Record("ann", items[i*7%len(items)].Name, now)
	}
	w := u.Weights(now)
	b.Run("order", func(b *testing.B) {
		for b.Loop() {
			Order(items, func(n string) float64 { return w[n] })
		}
	})
	ordered := Order(items, func(n string) float64 { return w[n] })
	recent := u.Recent("ann")
	b.Run("choose", func(b *testing.B) {
		for b.Loop() {
			Choose(ordered, recent, 20_000, nil)
		}
	})
}
