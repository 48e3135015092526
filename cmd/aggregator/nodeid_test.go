package main

import (
	"strings"
	"testing"
)

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

// TestOurRaces: a race report counts when code of this module makes one of its two accesses, not when the accesses
// are made inside a library (even called from our code), nor when only the goroutine's creation passes through it.
func TestOurRaces(t *testing.T) {
	upstream := "==================\nWARNING: DATA RACE\nWrite at 0x1 by goroutine 2:\n  github.com/asynkron/protoactor-go/remote.(*BlockList).Block()\n  github.com/mcpgw/aggregator/actors.(*System).leaveCluster()\n\n" +
		"Previous read at 0x1 by goroutine 3:\n  github.com/asynkron/protoactor-go/remote.(*BlockList).BlockedMembers()\n\n" +
		"Goroutine 2 (running) created at:\n  github.com/mcpgw/aggregator/actors.Start()\n==================\n"
	ours := "==================\nWARNING: DATA RACE\nRead at 0x2 by goroutine 4:\n  github.com/mcpgw/aggregator/actors.(*System).reconcileSoon()\n\n" +
		"Previous write at 0x2 by main goroutine:\n  github.com/mcpgw/aggregator/actors.(*System).startReconciler()\n==================\n"
	if got := ourRaces("log\n" + upstream + "more\n" + ours); len(got) != 1 || !strings.Contains(got[0], "reconcileSoon") {
		t.Fatalf("ourRaces = %q, want only the report in our code", got)
	}
	if got := ourRaces(upstream); len(got) != 0 {
		t.Fatalf("a race inside protoactor only: %q", got)
	}
}
