package lifecycle

import (
	"sync"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Startup is the servers a start waits for until each has an outcome: connected (its tools routed), failed, or
// removed. Settle records an outcome; Done is closed once every server has one. Safe for concurrent use (events
// arrive on the event stream's goroutines while the starter reads the live state).
type Startup struct {
	mu      sync.Mutex
	pending map[string]bool
	done    chan struct{}
}

// NewStartup waits for ids (none: Done is closed at once).
func NewStartup(ids []string) *Startup {
	s := &Startup{pending: make(map[string]bool, len(ids)), done: make(chan struct{})}
	for _, id := range ids {
		s.pending[id] = true
	}
	if len(ids) == 0 {
		close(s.done)
	}
	return s
}

// Pending lists the servers without an outcome yet.
func (s *Startup) Pending() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for id := range s.pending {
		out = append(out, id)
	}
	return out
}

// Settle records that server id has an outcome.
func (s *Startup) Settle(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pending[id] {
		return
	}
	delete(s.pending, id)
	if len(s.pending) == 0 {
		close(s.done)
	}
}

// Done is closed once every server has an outcome.
func (s *Startup) Done() <-chan struct{} { return s.done }

// Follow settles the server an event gives an outcome: removed; CONNECTED after CONNECTING (a server enters
// CONNECTED once its tools are in the routing table); ERROR; DISCONNECTED other than from CONNECTING or by the reset
// of a status an unclean stop left behind (resetReason: that reset is not an outcome, the server is about to
// connect).
func (s *Startup) Follow(evt any, resetReason string) {
	switch e := evt.(type) {
	case *pb.ServerRemoved:
		s.Settle(e.ServerId)
	case *pb.ServerStatusChanged:
		if e.To == persistence.StatusConnected && e.From == persistence.StatusConnecting ||
			e.To == persistence.StatusError || e.To == persistence.StatusDisconnected &&
			e.From != persistence.StatusConnecting && e.Reason != resetReason {
			s.Settle(e.ServerId)
		}
	}
}
