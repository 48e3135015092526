package server

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestCallWork: the last call a run starts runs on the run's goroutine after it (runLeft), a call kept when another
// starts goes to a worker at once, flush hands the kept call on, and every call runs exactly once.
func TestCallWork(t *testing.T) {
	w := newCallWork()
	var mu sync.Mutex
	var ran []string
	var wg sync.WaitGroup
	call := func(name string) func() {
		wg.Add(1)
		return func() {
			defer wg.Done()
			mu.Lock()
			ran = append(ran, name)
			mu.Unlock()
		}
	}
	ranNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ran)
	}
	waitRan := func(name string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Contains(ranNow(), name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never ran (ran %v)", name, ranNow())
			}
			time.Sleep(time.Millisecond)
		}
	}

	// One call in a run: kept, run by runLeft.
	w.Go(call("a"))
	time.Sleep(20 * time.Millisecond)
	if got := ranNow(); len(got) != 0 {
		t.Fatalf("a kept call ran before its run ended: %v", got)
	}
	w.runLeft()
	if got := ranNow(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("runLeft ran %v, want [a] on its own goroutine", got)
	}

	// Two calls in a run: the first goes to a worker when the second starts, the second waits for runLeft.
	w.Go(call("b"))
	w.Go(call("c"))
	waitRan("b")
	if slices.Contains(ranNow(), "c") {
		t.Fatal("the run's last call ran before the run ended")
	}
	w.runLeft()
	waitRan("c")

	// Other work: flush hands the kept call on.
	w.Go(call("d"))
	w.flush()
	waitRan("d")
	w.runLeft() // nothing kept: nothing runs twice

	// Runs racing each other's runLeft: every call exactly once.
	const n = 200
	var runs sync.WaitGroup
	for i := range n {
		runs.Add(1)
		go func() {
			defer runs.Done()
			w.Go(call("r" + string(rune('0'+i%10))))
			w.runLeft()
		}()
	}
	runs.Wait()
	wg.Wait()
	if got := len(ranNow()); got != 4+n {
		t.Fatalf("%d calls ran, want %d", got, 4+n)
	}
}
