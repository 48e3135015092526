package routing

import "sync"

// Hooks are the functions told about every new routing table (the MCP endpoint's tools/list_changed, the access
// policy's followers). Safe for concurrent use; the zero value is ready.
type Hooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(*RouteTable)
}

// Add calls fn with every table passed to Call until the returned function is called.
func (h *Hooks) Add(fn func(*RouteTable)) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(*RouteTable){}
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

// Call tells every function added of t, outside the lock (a function may add or cancel one).
func (h *Hooks) Call(t *RouteTable) {
	h.mu.Lock()
	fns := make([]func(*RouteTable), 0, len(h.fns))
	for _, fn := range h.fns {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(t)
	}
}
