// Package hooks is a set of functions told about values of one type (a new routing table, a backend's resource
// update), added and cancelled at any time from any goroutine. It exists so that the actor system's followers are
// kept one way, not once per event kind.
package hooks

import "sync"

// Set is the functions told about values of type T. Safe for concurrent use; the zero value is ready.
type Set[T any] struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(T)
}

// Add calls fn with every value passed to Call until the returned function is called.
func (h *Set[T]) Add(fn func(T)) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(T){}
	}
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.fns, id)
	}
}

// Call tells every function added of v, outside the lock (a function may add or cancel one).
func (h *Set[T]) Call(v T) {
	h.mu.Lock()
	fns := make([]func(T), 0, len(h.fns))
	for _, fn := range h.fns {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}
