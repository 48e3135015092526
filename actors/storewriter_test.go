package actors

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestStoreWriterOrderAndCoalescing: writes run one at a time in the order given; a keyed write that still waits is
// dropped when a newer one of its key arrives (the newer one runs after everything before it); a running write is
// never dropped; flush waits for everything enqueued before it.
func TestStoreWriterOrderAndCoalescing(t *testing.T) {
	w := &storeWriter{}
	var mu sync.Mutex
	var ran []string
	record := func(s string) func() {
		return func() {
			mu.Lock()
			ran = append(ran, s)
			mu.Unlock()
		}
	}
	gate := make(chan struct{})
	w.enqueue(func() { <-gate; record("first")() }) // running, blocked
	time.Sleep(20 * time.Millisecond)
	w.enqueueKeyed("health", record("health-1"))
	w.enqueue(record("transition"))
	w.enqueueKeyed("health", record("health-2")) // drops health-1, runs after the transition
	w.enqueueKeyed("health", record("health-3")) // drops health-2
	if n := w.pending(); n != 2 {
		t.Fatalf("%d writes wait, want 2 (the transition and the last health record)", n)
	}
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !w.flush(ctx) {
		t.Fatal("flush did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first", "transition", "health-3"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}
