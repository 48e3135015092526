package placement

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestHandOverDrain: a leaving node drains each server for the drain timeout, or half of what its stop has left.
func TestHandOverDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		max      time.Duration
		lo, hi   time.Duration
	}{
		{"no deadline", 0, 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{"ample deadline", time.Minute, 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{"short deadline", 4 * time.Second, 5 * time.Second, 1900 * time.Millisecond, 2 * time.Second},
		{"no drain", time.Minute, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			if got := HandOverDrain(ctx, tc.max); got < tc.lo || got > tc.hi {
				t.Errorf("drain = %v, want within [%v, %v]", got, tc.lo, tc.hi)
			}
		})
	}
}

// TestSuccessor: a server goes to another member not leaving; with none, it waits.
func TestSuccessor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members map[string]string
		leaving []string
		want    string // "": none
	}{
		{"alone", map[string]string{"node-a": "a:1"}, []string{"node-a"}, ""},
		{"the other member", map[string]string{"node-a": "a:1", "node-b": "b:1"}, []string{"node-a"}, "node-b"},
		{"all others leaving too", map[string]string{"node-a": "a:1", "node-b": "b:1"}, []string{"node-a", "node-b"}, ""},
		{"one of two others", map[string]string{"node-a": "a:1", "node-b": "b:1", "node-c": "c:1"}, []string{"node-a", "node-c"}, "node-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMembers("node-a", "a:1")
			m.Update(tc.members)
			for _, id := range tc.leaving {
				m.MarkLeaving(id)
			}
			for _, srv := range []string{"s1", "s2", "s3", "s4"} {
				node, addr, ok := m.Successor(srv)
				if ok != (tc.want != "") || node != tc.want || (ok && addr != tc.members[node]) {
					t.Errorf("Successor(%s) = %q, %q, %v; want %q", srv, node, addr, ok, tc.want)
				}
			}
		})
	}
}

func TestHandOverAll(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	moved := HandOverAll([]string{"a", "b", "c", "d"}, func(id string) bool {
		mu.Lock()
		seen = append(seen, id)
		mu.Unlock()
		return id != "c"
	})
	if moved != 3 || len(seen) != 4 {
		t.Fatalf("moved %d of %v, want 3 of 4 (c did not move)", moved, seen)
	}
}
