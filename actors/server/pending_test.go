package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPendingRequestsWatchMissesNoEnd: the requests a watch counts are exactly those whose done reports the watch,
// however their ends interleave with it, so an actor waiting for its calls to drain hears of the last one.
func TestPendingRequestsWatchMissesNoEnd(t *testing.T) {
	const requests = 200
	for round := range 50 {
		p := newPendingRequests()
		for id := range uint64(requests) {
			p.add(id, func(error) {}, "")
		}
		var told atomic.Int64
		var wg sync.WaitGroup
		for id := range uint64(requests) {
			wg.Go(func() {
				if p.done(id, "") {
					told.Add(1)
				}
			})
		}
		n := p.watch()
		wg.Wait()
		if int64(n) != told.Load() {
			t.Fatalf("round %d: watch counted %d requests in flight, %d ends told the actor", round, n, told.Load())
		}
		if p.len() != 0 {
			t.Fatalf("round %d: %d requests left", round, p.len())
		}
	}
}

func TestPendingRequests(t *testing.T) {
	p := newPendingRequests()
	var causes [3]error
	for i := range 3 {
		ctx, cancel := context.WithCancelCause(context.Background())
		p.add(uint64(i+1), func(cause error) { cancel(cause); causes[i] = context.Cause(ctx) }, map[int]string{0: "call-a", 1: "call-b"}[i])
	}
	if got := p.len(); got != 3 {
		t.Fatalf("len = %d, want 3", got)
	}
	if p.cancel("call-none") {
		t.Error("cancel of an unknown call id reported a call")
	}
	if !p.cancel("call-b") || !errors.Is(causes[1], context.Canceled) || causes[0] != nil {
		t.Fatalf("cancel(call-b): causes %v", causes)
	}
	if p.done(2, "call-b") {
		t.Error("done reported a watch nobody started")
	}
	if p.cancel("call-b") {
		t.Error("a finished call is still found by its call id")
	}
	shutdown := errors.New("shutting down")
	p.cancelAll(shutdown)
	if !errors.Is(causes[0], shutdown) || !errors.Is(causes[2], shutdown) {
		t.Fatalf("cancelAll: causes %v", causes)
	}
	if got := p.watch(); got != 2 {
		t.Fatalf("watch = %d, want the 2 requests still in flight", got)
	}
	if !p.done(1, "call-a") {
		t.Error("done did not report the watch")
	}
	p.unwatch()
	if p.done(3, "") {
		t.Error("done reported a watch that ended")
	}
	if got := p.len(); got != 0 {
		t.Fatalf("len = %d after every done", got)
	}
}
