package exposure

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func names(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Name
	}
	return out
}

func TestOrder(t *testing.T) {
	items := []Item{
		{Name: "a.1", Server: "a"}, {Name: "a.2", Server: "a"}, {Name: "a.3", Server: "a"},
		{Name: "b.1", Server: "b"}, {Name: "c.1", Server: "c"}, {Name: "c.2", Server: "c"},
	}
	for _, tc := range []struct {
		name   string
		weight map[string]float64
		want   []string
	}{
		{"no use: one per server in turn", nil, []string{"a.1", "b.1", "c.1", "a.2", "c.2", "a.3"}},
		{"used first, most used first", map[string]float64{"c.2": 1, "a.3": 5}, []string{"a.3", "c.2", "a.1", "b.1", "c.1", "a.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := names(Order(items, func(n string) float64 { return tc.weight[n] }))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	ordered := []Item{
		{Name: "a", Tokens: 100}, {Name: "b", Tokens: 300}, {Name: "c", Tokens: 50}, {Name: "d", Tokens: 100}, {Name: "e", Tokens: 10},
	}
	for _, tc := range []struct {
		name     string
		recent   []string
		budget   int
		hidden   string
		want     []string
		wantMore int
	}{
		{"everything fits", nil, 1000, "", []string{"a", "b", "c", "d", "e"}, 0},
		{"too big passed over for smaller ones", nil, 200, "", []string{"a", "c", "e"}, 2},
		{"recent first", []string{"d", "gone", "d"}, 250, "", []string{"d", "a", "c"}, 2},
		{"hidden spends nothing and is not counted", nil, 200, "a", []string{"c", "d", "e"}, 1},
		{"hidden recent is skipped", []string{"a"}, 200, "a", []string{"c", "d", "e"}, 1},
		{"nothing fits", nil, 5, "", nil, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more := Choose(ordered, tc.recent, tc.budget, func(it Item) bool { return it.Name != tc.hidden })
			if !slices.Equal(names(got), tc.want) || more != tc.wantMore {
				t.Fatalf("chose %v (%d more), want %v (%d more)", names(got), more, tc.want, tc.wantMore)
			}
			spent := 0
			for _, it := range got {
				spent += it.Tokens
			}
			if spent > tc.budget {
				t.Fatalf("spent %d of %d", spent, tc.budget)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	u := NewUsage(time.Hour)
	t0 := time.Unix(1_000_000, 0)
	u.Record("ann", "x", t0)
	u.Record("ann", "y", t0)
	u.Record("ann", "x", t0)
	u.Record("bob", "z", t0)
	if got := u.Recent("ann"); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("ann's recent %v", got)
	}
	if got := u.Recent("carl"); got != nil {
		t.Fatalf("carl's recent %v", got)
	}
	w := u.Weights(t0.Add(time.Hour))
	if w["x"] != 1 || w["y"] != 0.5 || w["z"] != 0.5 {
		t.Fatalf("weights after one half-life %v", w)
	}
	u.Found("bob", []string{"s1", "s2", "z"})
	if got := u.Recent("bob"); !slices.Equal(got, []string{"z", "s1", "s2", "z"}) {
		t.Fatalf("bob's recent then found %v", got)
	}
	if w := u.Weights(t0); w["s1"] != 0 {
		t.Fatalf("a found tool counts as used: %v", w)
	}
	for i := range RecentPerCaller + 5 {
		u.Record("ann", fmt.Sprint("t", i), t0)
	}
	if got := u.Recent("ann"); len(got) != RecentPerCaller || got[0] != fmt.Sprint("t", RecentPerCaller+4) {
		t.Fatalf("ann's recent %v", got)
	}
	for i := range MaxCallers {
		u.Record(fmt.Sprint("caller", i), "x", t0)
	}
	if len(u.recent) != MaxCallers || u.Recent("ann") != nil {
		t.Fatalf("%d callers kept, ann's %v: the least recently active should go first", len(u.recent), u.Recent("ann"))
	}
}

func ExampleChoose() {
	catalogue := []Item{
		{Alias: "git__log", Name: "git.log", Server: "git", Tokens: 120},
		{Alias: "git__diff", Name: "git.diff", Server: "git", Tokens: 150},
		{Alias: "db__query", Name: "db.query", Server: "db", Tokens: 400},
		{Alias: "web__fetch", Name: "web.fetch", Server: "web", Tokens: 90},
	}
	u := NewUsage(24 * time.Hour)
	now := time.Now()
	u.Record("ann", "git.diff", now)
	ordered := Order(catalogue, func(n string) float64 { return u.Weights(now)[n] })
	chosen, more := Choose(ordered, u.Recent("ann"), 400, nil)
	for _, it := range chosen {
		fmt.Println(it.Alias)
	}
	fmt.Println(more, "more")
	// Output:
	// git__diff
	// git__log
	// web__fetch
	// 1 more
}
