package gopool

import (
	"sync"
	"testing"
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
