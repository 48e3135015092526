package placement

import (
	"errors"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Verdict is what a server actor does once it has read its registration and asked for its server's lease
// (Decide). The actor carries it out (actors/server/server_lease.go); the rule lives here.
type Verdict int

const (
	// Own: the lease is granted; the actor owns the server and serves it.
	Own Verdict = iota + 1
	// Gone: the server does not exist; the actor retires answering SERVER_NOT_FOUND.
	Gone
	// RetryLoad: the registration could not be read; the actor answers SERVER_UNAVAILABLE and asks again later.
	RetryLoad
	// Moved: another cluster member holds the lease; the actor is in the wrong place and retires answering
	// SERVER_MOVED (the caller looks the server up again).
	Moved
	// StandBy: a process outside the cluster holds the lease (`aggregator stdio`, or a daemon on the same store
	// without cluster settings); the actor opens no session and asks again when that lease would lapse.
	StandBy
	// RetryLease: the store did not answer the lease request; the actor asks again later.
	RetryLease
	// Lost: outside a cluster, the actor lost the lease it held (AfterLoss); it closes its session, stands by and
	// asks again.
	Lost
)

var verdictNames = [...]string{Own: "own", Gone: "gone", RetryLoad: "retry-load", Moved: "moved", StandBy: "stand-by",
	RetryLease: "retry-lease", Lost: "lost"}

func (v Verdict) String() string {
	if v > 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "unknown"
}

// Decide is the verdict on a server actor's activation: loadErr is the outcome of reading the registration,
// leaseErr of asking for the lease (persistence.ErrLeaseHeld with the holder's lease in held). m is this node's
// view of the membership (nil on a single node) and self this node's id. A lease held by a cluster member other
// than this node means the server is served elsewhere (Moved); held by anyone else, the actor stands by.
func Decide(m *Members, self string, held persistence.Lease, loadErr, leaseErr error) Verdict {
	switch {
	case errors.Is(loadErr, persistence.ErrNotFound), errors.Is(leaseErr, persistence.ErrNotFound):
		return Gone
	case loadErr != nil:
		return RetryLoad
	case leaseErr == nil:
		return Own
	case errors.Is(leaseErr, persistence.ErrLeaseHeld):
		if m != nil {
			if _, member := m.Addr(held.Owner); member && held.Owner != self {
				return Moved
			}
		}
		return StandBy
	}
	return RetryLease
}

// AfterLoss is the verdict on an owner that lost its lease (it closes its session at once either way): in a
// cluster (m set) the server is another member's now, and the actor retires (Moved: the lookup finds the new
// owner); otherwise it stands by (Lost).
func AfterLoss(m *Members) Verdict {
	if m != nil {
		return Moved
	}
	return Lost
}

// AskAgain is how long a server actor that does not own its server waits before it asks for the lease again after
// verdict v: standing by (held by another process), until that lease would lapse (RetryDelay); after it lost its
// own, TTL/2; after the store failed it (RetryLoad, RetryLease), TTL/3.
func (o *Leases) AskAgain(v Verdict, held persistence.Lease) time.Duration {
	switch v {
	case StandBy:
		return o.RetryDelay(held.ExpiresAt)
	case Lost:
		return o.ttl / 2
	}
	return o.ttl / 3
}
