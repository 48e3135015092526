package placement

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Single ownership. Several processes may run on one store: several `serve` nodes, or `serve` beside
// `aggregator stdio`. Each server's session (and its stdio child) must then exist once, in one process. The store
// decides who that is with a lease per server (persistence.Lease): a server actor asks for its server's lease when
// it activates and holds it for as long as it lives (actors/server/server_lease.go); it opens a session only while it holds it,
// fences every status, health and tool write with it, and closes the session as soon as it learns the lease is
// gone. An actor whose lease another live process holds stands by, and asks again when that lease would lapse, so
// a process that dies is replaced within the lease's TTL (at once when it stopped cleanly and released its leases).
//
// One goroutine per process (the keeper) renews all of this process's leases in one statement every TTL/3 and
// records a heartbeat with the process's address (persistence.Node). A renewal that does not return a lease this
// process holds means it changed hands: the keeper tells that server's actor, which drops its session. A renewal
// also returns the leases that lapsed while the store was unreachable and that nobody took over since: they are
// this process's again (and one it holds no more is released at once). While the store cannot be reached, a
// process gives its sessions up only when another process could take them over (mayBeTakenOver): in a cluster,
// when etcd may have dropped this node from the membership (the others take a departed member's servers over at
// once); without a cluster, when it has seen other live processes and its leases may have lapsed. Otherwise it
// keeps serving: nobody can take a lease over without the store either.

// DefaultLeaseTTL is how long a lease lasts without renewal (MCP_AGGREGATOR_LEASE_TTL): the longest a server stays
// without an owner after its owner died without releasing it.
const DefaultLeaseTTL = 10 * time.Second

// Leases is this process's leases: which servers it owns, read by the server actors, discovery and the keeper.
type Leases struct {
	node  string
	ttl   time.Duration
	store persistence.Store

	// seq orders this process's status changes within a lease epoch (nextSeq).
	seq atomic.Int64

	mu   sync.Mutex
	held map[string]heldLease // server id -> lease
	// others is true once a heartbeat saw another live process on the store.
	others bool
	// addresses are the live processes' MCP addresses (node id -> base URL) the last renewal read.
	addresses map[string]string
	// acquiring counts the lease requests under way per server (a renewal may return their lease before they
	// record it: it is not a stray to release).
	acquiring map[string]int
	// takeoverRisk, when set, replaces the rule without a cluster: it reports whether another process may take
	// this one's leases over while the store is unreachable (SetTakeoverRisk, before Keep runs).
	takeoverRisk func() bool
}

// heldLease is a lease and when this process took it (a renewal that started earlier does not know it yet).
type heldLease struct {
	lease persistence.Lease
	since time.Time
}

// NewLeases is the leases of process node on store, each lasting ttl without renewal (DefaultLeaseTTL when 0).
func NewLeases(store persistence.Store, node string, ttl time.Duration) *Leases {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return &Leases{node: node, ttl: ttl, store: store, held: map[string]heldLease{}, acquiring: map[string]int{}}
}

// NextSeq is the sequence of a status change: it grows with every call and starts from the wall clock, so that a
// process that restarted and got its own lease back (same epoch) numbers its changes after its earlier ones.
func (o *Leases) NextSeq() int64 {
	for {
		last := o.seq.Load()
		next := max(last+1, time.Now().UnixNano())
		if o.seq.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Fence returns the lease that fences writes about server id, or nil when this process does not own it.
func (o *Leases) Fence(id string) *persistence.Lease {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.held[id]
	if !ok {
		return nil
	}
	l := h.lease
	return &l
}

func (o *Leases) put(l persistence.Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held[l.ServerID] = heldLease{lease: l, since: time.Now()}
}

// Drop forgets the lease of that epoch; false when another (or no) lease is recorded.
func (o *Leases) Drop(id string, epoch int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h, ok := o.held[id]; ok && h.lease.Epoch == epoch {
		delete(o.held, id)
		return true
	}
	return false
}

// Acquire asks the store for server id's lease (the caller runs it off any mailbox).
// from, when set, is a departed cluster member whose live lease may be taken over.
func (o *Leases) Acquire(ctx context.Context, id, from string) (persistence.Lease, error) {
	o.mu.Lock()
	o.acquiring[id]++
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		if o.acquiring[id]--; o.acquiring[id] <= 0 {
			delete(o.acquiring, id)
		}
		o.mu.Unlock()
	}()
	l, err := o.store.TakeOverLease(ctx, id, o.node, from, o.ttl)
	if err == nil {
		o.put(l)
	}
	return l, err
}

// Release ends a lease this process holds, if it still does.
func (o *Leases) Release(ctx context.Context, l persistence.Lease) error {
	if !o.Drop(l.ServerID, l.Epoch) {
		return nil
	}
	return o.store.ReleaseLease(ctx, l)
}

// RetryDelay is when to ask again for a lease another process holds until expires: just after it would lapse, and
// at least every TTL (the holder usually renews it), with jitter so that waiting processes do not ask together.
func (o *Leases) RetryDelay(expires time.Time) time.Duration {
	d := time.Until(expires)
	if d <= 0 || d > o.ttl {
		d = o.ttl
	}
	return d + time.Duration(rand.Int64N(int64(o.ttl/10)+1)) + 50*time.Millisecond
}

// Keep renews this process's leases and heartbeat every TTL/3 until ctx ends, telling the actor of each server
// whose lease is lost (lost is called from this goroutine). address is where this process's MCP endpoint
// answers (empty for a process without one).
func (o *Leases) Keep(ctx context.Context, address string, lost func(id string, epoch int64, why string), log interface {
	Warn(string, ...any)
}) {
	tick := time.NewTicker(o.ttl / 3)
	defer tick.Stop()
	lastOK := time.Now()
	// The first heartbeat goes out at once: another process (`aggregator stdio`) looks for this one at its start.
	hctx, cancel := context.WithTimeout(ctx, o.ttl/3)
	if err := o.store.Heartbeat(hctx, persistence.Node{ID: o.node, Address: address}); err != nil && ctx.Err() == nil {
		log.Warn("ownership: heartbeat", "error", err)
	}
	cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		started := time.Now()
		rctx, cancel := context.WithTimeout(ctx, o.ttl/3)
		renewed, err := o.store.RenewLeases(rctx, o.node, o.ttl)
		if err == nil {
			if herr := o.store.Heartbeat(rctx, persistence.Node{ID: o.node, Address: address}); herr != nil {
				log.Warn("ownership: heartbeat", "error", herr)
			}
			if nodes, nerr := o.store.ListNodes(rctx, 3*o.ttl); nerr == nil {
				o.setOthers(nodes)
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("ownership: cannot renew leases", "error", err, "since_last_renewal", time.Since(lastOK).Round(time.Millisecond).String())
			if o.mayBeTakenOver(time.Since(lastOK)) {
				for id, l := range o.snapshot() {
					if o.Drop(id, l.Epoch) {
						lost(id, l.Epoch, "leases could not be renewed: "+err.Error())
					}
				}
			}
			continue
		}
		lastOK = started
		current := make(map[string]int64, len(renewed))
		for _, l := range renewed {
			current[l.ServerID] = l.Epoch
		}
		o.mu.Lock()
		var gone []heldLease
		for id, h := range o.held {
			if e, ok := current[id]; (!ok || e != h.lease.Epoch) && h.since.Before(started) {
				gone = append(gone, h)
				delete(o.held, id)
			}
		}
		var strays []persistence.Lease
		for _, l := range renewed {
			if _, held := o.held[l.ServerID]; !held && o.acquiring[l.ServerID] == 0 {
				strays = append(strays, l)
			}
		}
		o.mu.Unlock()
		for _, h := range gone {
			lost(h.lease.ServerID, h.lease.Epoch, "lease taken over or released")
		}
		// A lease that lapsed while the store was away and that this process gave up meanwhile was renewed with
		// the others: let it go, so that it does not keep its server from another owner.
		for _, l := range strays {
			rctx, cancel := context.WithTimeout(ctx, o.ttl/3)
			if err := o.store.ReleaseLease(rctx, l); err != nil && ctx.Err() == nil {
				log.Warn("ownership: release a lease no longer held", "server_id", l.ServerID, "error", err)
			}
			cancel()
		}
	}
}

func (o *Leases) setOthers(nodes []persistence.Node) {
	others := false
	addresses := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if n.ID != o.node {
			others = true
		}
		if n.Address != "" {
			addresses[n.ID] = n.Address
		}
	}
	o.mu.Lock()
	o.others, o.addresses = others, addresses
	o.mu.Unlock()
}

// NodeAddress is where the MCP endpoint of process node answers, as recorded with its heartbeat and read with this
// process's last renewal (every TTL/3); false when that renewal did not see one.
func (o *Leases) NodeAddress(node string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a, ok := o.addresses[node]
	return a, ok
}

// mayBeTakenOver reports, while the store is unreachable (for since), whether another process may take this one's
// leases over, so that it must give its sessions up: in a cluster, when this node may be out of the membership
// (takeoverRisk); otherwise, once its leases may have lapsed (a little before) if it has seen other processes.
func (o *Leases) mayBeTakenOver(since time.Duration) bool {
	o.mu.Lock()
	risk, others := o.takeoverRisk, o.others
	o.mu.Unlock()
	if risk != nil {
		return risk()
	}
	return others && since > o.ttl-o.ttl/5
}

func (o *Leases) snapshot() map[string]persistence.Lease {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]persistence.Lease, len(o.held))
	for id, h := range o.held {
		out[id] = h.lease
	}
	return out
}

// Shutdown releases every lease of this process and forgets its node row, so that another process may take the
// servers over at once instead of after the TTL.
func (o *Leases) Shutdown(ctx context.Context) error {
	o.mu.Lock()
	o.held = map[string]heldLease{}
	o.mu.Unlock()
	_, err := o.store.ReleaseOwnerLeases(ctx, o.node)
	return errors.Join(err, o.store.RemoveNode(ctx, o.node))
}

// TTL is how long a lease lasts without renewal.
func (o *Leases) TTL() time.Duration { return o.ttl }

// SetTakeoverRisk replaces the rule without a cluster (call it before Keep): risk reports whether another process
// may take this one's leases over while the store is unreachable (in a cluster: whether this node may be out of
// the membership).
func (o *Leases) SetTakeoverRisk(risk func() bool) { o.takeoverRisk = risk }
