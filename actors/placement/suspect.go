package placement

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Fast failover. A member that dies (SIGKILL, a crash) leaves the membership only when its provider notices: etcd
// when the member's key lapses (its 3 s lease), automanaged at its next round of health checks (every second).
// Its remoting connections break at once, though: the kernel closes its sockets, and the others' links see the
// connections end (Links). A broken link is only a suspicion (connections also churn between live nodes), so this
// node then confirms it by dialling the member's remoting port: a refusal means no process listens there any more
// (the remoting listener lives as long as the process), and the member is dead. The node then has the provider
// take it out of the membership at once (Evictor: etcd revokes its lease, which every node sees through its
// watch), and every node goes through the ordinary departure (the reconciler takes the member's servers over,
// through their leases in the store, which stay the authority).
//
// Another node need not have confirmed the death itself, though (none of its connections with the member broke, or
// its dial failed at once, otherwise than refused, while the process was torn down), and with a provider whose
// membership is each node's own view (automanaged) an eviction is only the evicting node's: the other nodes would
// wait for their own next round of health checks. So the node that found the member dead tells the others (Tell: a
// MemberDead message to each member's suspicion actor), and each of them takes the word as a suspicion of its own
// (Told): it dials the member itself and evicts it only when its own dial is refused too. A peer's word alone never
// evicts anything.
//
// A frozen (SIGSTOP) or partitioned member is never evicted this way: the kernel of a stopped process still accepts
// connections on its port, and a partition drops the dial (no answer), so both fall back to the provider's own
// detection, after which the member gives its servers up as soon as it runs again (it learns it left), and its
// writes are fenced by the store meanwhile.

// Evictor is a membership provider that can take a member confirmed dead out of the membership at once.
type Evictor interface {
	// Evict takes the member whose remoting listens at addr out of the membership; false when no such member is
	// known (it left already). It never evicts this node.
	Evict(ctx context.Context, addr string) (bool, error)
}

// ProbeResult is what dialling a member's remoting port says.
type ProbeResult int

const (
	// ProbeAnswered: something accepted the connection (a live process, or the kernel of a stopped one).
	ProbeAnswered ProbeResult = iota
	// ProbeRefused: nothing listens there; the process is gone.
	ProbeRefused
	// ProbeNoAnswer: the dial timed out or failed otherwise (a partition, an unreachable host, a handshake reset by a
	// process being torn down): nothing is known yet.
	ProbeNoAnswer
)

// DialProbe dials addr over TCP within timeout and closes the connection at once.
func DialProbe(ctx context.Context, addr string, timeout time.Duration) ProbeResult {
	r, _ := dialProbe(ctx, addr, timeout)
	return r
}

// dialProbe is DialProbe with the dial's error (nil when answered).
func dialProbe(ctx context.Context, addr string, timeout time.Duration) (ProbeResult, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = conn.Close()
		return ProbeAnswered, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ProbeRefused, err
	}
	return ProbeNoAnswer, err
}

// Suspicion confirms the members whose links broke and evicts the dead ones (see above). Its zero value is not
// usable: set Members and Evictor.
type Suspicion struct {
	// Members is this node's view; only a member other than this node is probed.
	Members *Members
	// Evictor takes a member confirmed dead out of the membership.
	Evictor Evictor
	// Probe dials a member's remoting address (nil: DialProbe with ProbeTimeout).
	Probe func(ctx context.Context, addr string) ProbeResult
	// Logger receives what the suspicion decides (nil: discarded).
	Logger *slog.Logger
	// Tell, when set, is told of each member this node found dead upon a broken connection of its own (its address
	// and member id), to have the other members probe it too (Told on each of them); it must not block.
	Tell func(addr, member string)

	mu      sync.Mutex
	probing map[string]bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

const (
	// ProbeTimeout bounds one dial of a suspect's remoting port.
	ProbeTimeout = 300 * time.Millisecond
	// probeAttempts and probeDelay: a suspect whose port still answers is dialled again for about a second (a
	// process being killed may accept a connection in the instant before its listener closes: its connections
	// close before its listener does); one that stays reachable was only churn. The first retries come soon (20,
	// 40, 80 ms after the one before), since a dead process's listener is gone within milliseconds, then every
	// 100 ms.
	probeAttempts = 13
	evictTimeout  = 2 * time.Second
)

// Suspect is called when a connection with the node at addr broke: it probes that node in the background, once at a
// time per address, and evicts it if it is a member and is dead.
func (s *Suspicion) Suspect(addr string) { s.suspect(addr, "") }

// Told is another member's word (from: its address) that the member at addr is dead: this node probes it as if its
// own connection with it had broken, and evicts it only when its own dial is refused (it does not tell the others
// again: the member that found it dead told them all).
func (s *Suspicion) Told(addr, from string) { s.suspect(addr, from) }

// suspect probes addr in the background; from is the member whose word it is ("": a connection of this node broke).
func (s *Suspicion) suspect(addr, from string) {
	if id := s.Members.IDAt(addr); id == "" || id == s.Members.self {
		return
	}
	s.mu.Lock()
	if s.probing == nil {
		s.probing = map[string]bool{}
	}
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	if s.probing[addr] || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.probing[addr] = true
	ctx := s.ctx
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.probing, addr)
			s.mu.Unlock()
		}()
		s.confirm(ctx, addr, from)
	}()
}

// confirm probes addr until it is refused (evict), or is no longer a member, or probeAttempts dials were answered or
// failed otherwise (churn, or a partition: left to the provider). from is the member that told this node so ("": a
// connection of this node broke).
func (s *Suspicion) confirm(ctx context.Context, addr, from string) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lastErr error // (the default probe's: for the log)
	probe := s.Probe
	if probe == nil {
		probe = func(ctx context.Context, addr string) ProbeResult {
			r, err := dialProbe(ctx, addr, ProbeTimeout)
			lastErr = err
			return r
		}
	}
	// A dial that fails otherwise than refused (no answer within the timeout, or another error: a dying process's
	// kernel may reset the handshake) is dialled again like an answered one, for the whole schedule; only a refusal
	// evicts, and a member that never refuses is left to the membership's own detection.
	last := ProbeAnswered
	for i := 0; i < probeAttempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(probeDelay(i)):
			}
		}
		id := s.Members.IDAt(addr)
		if id == "" || ctx.Err() != nil {
			return // it left meanwhile
		}
		switch last = probe(ctx, addr); last {
		case ProbeAnswered, ProbeNoAnswer:
			continue
		case ProbeRefused:
			if from == "" && s.Tell != nil {
				s.Tell(addr, id)
			}
			ectx, cancel := context.WithTimeout(ctx, evictTimeout)
			evicted, err := s.Evictor.Evict(ectx, addr)
			cancel()
			switch {
			case err != nil:
				log.Warn("cluster: a member confirmed dead could not be evicted; leaving it to the membership's own detection",
					"member", id, "address", addr, "error", err)
			case evicted && from == "":
				log.Info("cluster: member confirmed dead (its connection broke and its remoting port refuses connections): evicted from the membership",
					"member", id, "address", addr)
			case evicted:
				log.Info("cluster: member confirmed dead (another member found it dead, and its remoting port refuses connections here too): evicted from the membership",
					"member", id, "address", addr, "told_by", from)
			}
			return
		}
	}
	if last == ProbeNoAnswer {
		log.Info("cluster: a member's remoting port does not answer; leaving it to the membership's own detection",
			"member", s.Members.IDAt(addr), "address", addr, "told_by", from, "error", lastErr)
	}
}

// Close stops the probes under way and waits for them.
func (s *Suspicion) Close() {
	s.mu.Lock()
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
}

// SuspicionActor is the name of each node's suspicion actor (Suspicion.Props), to which a node that found a member
// dead sends MemberDead (TellOthers).
const SuspicionActor = "cluster-suspicion"

// Props is the suspicion actor: each MemberDead another member sends is its word (Told), on which this node probes
// the member itself.
func (s *Suspicion) Props() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*pb.MemberDead); ok {
			from := m.GetFrom()
			if from == "" {
				from = "another member"
			}
			s.Told(m.GetAddress(), from)
		}
	})
}

// TellOthers is a Tell that sends MemberDead, from this node (at self), to the suspicion actor of every other
// member in m's view but the dead one.
func TellOthers(root *actor.RootContext, m *Members, self string) func(addr, member string) {
	return func(addr, member string) {
		for _, other := range m.Others() {
			if other != addr {
				root.Send(actor.NewPID(other, SuspicionActor), &pb.MemberDead{Address: addr, Member: member, From: self})
			}
		}
	}
}

// probeDelay is the wait before probe attempt i (i >= 1): 20 ms doubling up to 100 ms.
func probeDelay(i int) time.Duration {
	d := 20 * time.Millisecond << (i - 1)
	if i > 4 || d > 100*time.Millisecond {
		return 100 * time.Millisecond
	}
	return d
}
