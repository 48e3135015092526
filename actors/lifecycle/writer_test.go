package lifecycle

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestWriterOrderAndCoalescing: writes run one at a time in the order given; a keyed write that still waits is
// dropped when a newer one of its key arrives (the newer one runs after everything before it); a running write is
// never dropped; flush waits for everything enqueued before it.
func TestWriterOrderAndCoalescing(t *testing.T) {
	w := &Writer{}
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
	w.Enqueue(func() { <-gate; record("first")() }) // running, blocked
	time.Sleep(20 * time.Millisecond)
	w.EnqueueKeyed("health", record("health-1"))
	w.Enqueue(record("transition"))
	w.EnqueueKeyed("health", record("health-2")) // drops health-1, runs after the transition
	w.EnqueueKeyed("health", record("health-3")) // drops health-2
	if n := w.Pending(); n != 2 {
		t.Fatalf("%d writes wait, want 2 (the transition and the last health record)", n)
	}
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !w.Flush(ctx) {
		t.Fatal("flush did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first", "transition", "health-3"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}
