package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Writer runs one server actor's store writes (state transitions, health checks, auto_connect) in the order
// the actor made them, on a goroutine of its own: a slow or unreachable store delays the writes, never the actor's
// mailbox, so calls to the server (and to every other server) go on meanwhile. A transition's event is published
// by its write once it is persisted, so whoever reacts to the event finds the row already changed. Writes that only
// matter in their latest form (a health record) replace the one still waiting, so a slow store does not make the
// queue grow with every health check.
type Writer struct {
	// Log receives the panics of writes (nil: they are dropped silently; the writes after them still run).
	Log     *slog.Logger
	mu      sync.Mutex
	queue   []queuedWrite
	running bool
}

// queuedWrite is a write waiting its turn; key names what a newer write of the same key replaces ("": none).
type queuedWrite struct {
	key string
	fn  func()
}

// Enqueue adds a write; it runs after every write enqueued before it.
func (w *Writer) Enqueue(fn func()) { w.EnqueueKeyed("", fn) }

// EnqueueKeyed adds a write after every write enqueued before it, dropping a write of the same key that still
// waits (it would be overwritten anyway).
func (w *Writer) EnqueueKeyed(key string, fn func()) {
	w.mu.Lock()
	if key != "" {
		for i := range w.queue {
			if w.queue[i].key == key {
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				break
			}
		}
	}
	w.queue = append(w.queue, queuedWrite{key: key, fn: fn})
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.drain()
	}
}

// Pending is how many writes wait (not counting one running).
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func (w *Writer) drain() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		fn := w.queue[0].fn
		w.queue[0] = queuedWrite{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		w.run(fn)
	}
}

// run runs one write; a write that panics (a bug in a store) is logged, and the writes after it still run.
func (w *Writer) run(fn func()) {
	defer func() {
		if r := recover(); r != nil && w.Log != nil {
			w.Log.Error("store write panicked", "panic", fmt.Sprint(r))
		}
	}()
	fn()
}

// Flush waits until every write enqueued so far has run, or ctx ends (false).
func (w *Writer) Flush(ctx context.Context) bool {
	done := make(chan struct{})
	w.Enqueue(func() { close(done) })
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
