package gopool

import (
	"sync"
	"testing"
	"time"
)

// TestPoolRunsEveryFunction: every function runs, those handed over while others still run included (none waits
// for another: a pool with every goroutine busy starts a new one), and functions run one after another take the
// goroutines left idle instead of starting one each.
func TestPoolRunsEveryFunction(t *testing.T) {
	p := New()
	const n = 50
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		p.Go(func() { // all n block together: each needs a goroutine of its own
			defer wg.Done()
			<-release
		})
	}
	if got := p.started.Load(); got != n {
		t.Fatalf("%d functions blocked together ran on %d goroutines, want %d", n, got, n)
	}
	close(release)
	wg.Wait()

	const seq = 200
	before := p.started.Load()
	for range seq {
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
	}
	if started := p.started.Load() - before; started >= seq {
		t.Fatalf("%d functions run one after another started %d goroutines: none was reused", seq, started)
	}
}

// TestLater: every function runs, none before the delay after it was handed over, in the order handed over, also
// when they are handed over while earlier ones wait and after the queue emptied.
func TestLater(t *testing.T) {
	for _, l := range []*Later{NewLater(20 * time.Millisecond)} {
		var mu sync.Mutex
		var order []int
		var early []int
		var wg sync.WaitGroup
		add := func(i int) {
			wg.Add(1)
			handed := time.Now()
			l.After(func() {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if time.Since(handed) < 20*time.Millisecond {
					early = append(early, i)
				}
				order = append(order, i)
			})
		}
		for i := range 10 {
			add(i)
			if i == 4 {
				time.Sleep(5 * time.Millisecond) // later ones wait behind the first timer
			}
		}
		wg.Wait()
		add(10) // after the queue emptied: a new timer
		wg.Wait()
		if len(early) > 0 {
			t.Errorf("functions %v ran before their delay", early)
		}
		if len(order) != 11 {
			t.Fatalf("%d functions ran, want 11", len(order))
		}
		for i, v := range order {
			if v != i {
				t.Fatalf("ran in the order %v, want the order handed over", order)
			}
		}
	}
}

// TestPoolThen: then runs after every function, before the function's goroutine is handed the next.
func TestPoolThen(t *testing.T) {
	ran := make(chan string, 4)
	p := NewThen(func() { ran <- "then" })
	for _, name := range []string{"a", "b", "c"} {
		p.Go(func() { ran <- name })
		if got := <-ran; got != name {
			t.Fatalf("got %q first, want the function %q", got, name)
		}
		select {
		case got := <-ran:
			if got != "then" {
				t.Fatalf("got %q after %q, want then", got, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("then never ran after %q", name)
		}
	}
}
