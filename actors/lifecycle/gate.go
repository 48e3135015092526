package lifecycle

import "sync"

// Gate counts tool calls in flight so that a shutdown can wait for them. The zero value is open.
type Gate struct {
	mu      sync.Mutex
	closing bool
	n       int
	idle    chan struct{} // closed when n reaches 0 after Close
}

// Enter admits one call; false once the gate is closed.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.n++
	return true
}

// Leave counts one admitted call out.
func (g *Gate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Close refuses new calls and returns a channel closed once no call is in flight, and how many are.
func (g *Gate) Close() (<-chan struct{}, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	ch := make(chan struct{})
	if g.n == 0 {
		close(ch)
	} else if g.idle != nil {
		ch = g.idle
	} else {
		g.idle = ch
	}
	return ch, g.n
}
