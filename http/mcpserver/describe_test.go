package mcpserver

import "testing"

// TestTopCounts: the largest counts first, ties by name, the rest summed up as "and N more".
func TestTopCounts(t *testing.T) {
	tests := []struct {
		name   string
		counts map[string]int
		n      int
		want   string
	}{
		{"empty", map[string]int{}, 3, ""},
		{"fewer than n", map[string]int{"b": 1, "a": 2}, 3, "a (2), b (1)"},
		{"ties by name", map[string]int{"b": 2, "a": 2, "c": 5}, 3, "c (5), a (2), b (2)"},
		{"more than n", map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, 2, "d (4), c (3), and 2 more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := topCounts(tc.counts, tc.n, func(k string) string { return k }); got != tc.want {
				t.Errorf("topCounts = %q, want %q", got, tc.want)
			}
		})
	}
}
