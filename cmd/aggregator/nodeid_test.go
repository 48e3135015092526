package main

import "testing"

// TestNodeIdentity: a process restarting on a data directory gets its id back; a second process running at the
// same time gets another one; without a data directory every call is a fresh id.
func TestNodeIdentity(t *testing.T) {
	dir := t.TempDir()
	first, lock1, err := nodeIdentity(dir)
	if err != nil || first == "" {
		t.Fatalf("first claim: %q %v", first, err)
	}
	second, lock2, err := nodeIdentity(dir)
	if err != nil || second == "" || second == first {
		t.Fatalf("a second process on the same directory got %q (first %q), err %v", second, first, err)
	}
	lock1.Close() // the first process dies
	again, lock3, err := nodeIdentity(dir)
	if err != nil || again != first {
		t.Fatalf("restarted process got %q, want its old id %q (err %v)", again, first, err)
	}
	lock2.Close()
	lock3.Close()
	a, _, _ := nodeIdentity("")
	b, _, _ := nodeIdentity("")
	if a == "" || a == b {
		t.Fatalf("ids without a data directory: %q %q", a, b)
	}
}
