package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/mcpgw/aggregator/persistence"
)

// Where a server's actor lives in a cluster. The server's lease decides (the identity lookup of protoactor's
// cluster, backed by the store): a server whose lease a live member holds lives on that member; a server nobody
// holds (or whose holder left the cluster) is placed on the member chosen by rendezvous hashing over the members
// that are not leaving, which takes the lease (over, from a member that left) when its actor activates. Every
// answer is cached (protoactor's PID cache) until the actor is gone: a dead letter, or an answer saying the server
// moved, sends the caller back here. (On one node there is no lookup: the server's actor lives in the node's
// placement actor.)

// ServerKind is the cluster kind of server actors (their identity is the server id).
const ServerKind = "mcpserver"

// PlacementName is the fixed name of every node's placement actor (the parent of its server actors): another node
// addresses it from the member's address alone.
const PlacementName = "placement"

// Why a server cannot be placed now (Lookup.Locate answers Unplaceable with it).
var (
	// ErrNoMember: no member may host the server now.
	ErrNoMember = errors.New("no member to place the server on")
	// ErrNotMember: the asked node is out of the membership now.
	ErrNotMember = errors.New("node is not a member of the cluster now")
	// ErrLeaving: the asked node hands its servers over and hosts nothing new.
	ErrLeaving = errors.New("node is leaving the cluster")
	// ErrUnreachable: the asked node left, or a connection with it broke, while it was asked (the request or its
	// answer may be lost: Links).
	ErrUnreachable = errors.New("the cluster node asked to serve it could not be reached")
	// ErrNoAnswer: the asked node did not answer in time.
	ErrNoAnswer = errors.New("the cluster node chosen to serve it did not answer in time")
)

// LeaseReader reads a server's lease and the store's clock (persistence.Store does).
type LeaseReader interface {
	GetLease(ctx context.Context, serverID string) (persistence.Lease, time.Time, error)
}

// Lookup is the cluster's identity lookup (cluster.IdentityLookup: Get, RemovePid, Setup, Shutdown): a server's
// identity is its id, and where it lives follows its lease in the store, not a hash ring (protoactor's disthash
// lookup, which also races on topology changes in the version we build with). Locate is Get with a context and an
// error saying why a server cannot be placed.
type Lookup struct {
	// Leases reads the servers' leases; Members is this node's view of the membership.
	Leases  LeaseReader
	Members *Members
	// Activate asks the placement actor of a node (at its PlacementName) to host a server: dead names a departed
	// member whose lease the actor may take over. It answers ErrLeaving, ErrNotMember, ErrUnreachable or
	// ErrNoAnswer (wrapped) when the node cannot host it now.
	Activate func(ctx context.Context, placement *actor.PID, id, dead string) (*actor.PID, error)
	// Unplaceable is the error for a server that no node can host now (a 503 with Retry-After for the caller).
	Unplaceable func(id, why string) error
	// OnTopology follows the membership (it runs on protoactor's event stream).
	OnTopology func(*cluster.ClusterTopology)
	// GetTimeout bounds Get, which has no context.
	GetTimeout time.Duration

	cache *cluster.PidCacheValue // set by Setup
}

var _ cluster.IdentityLookup = (*Lookup)(nil)

// Get implements cluster.IdentityLookup.
func (l *Lookup) Get(ci *cluster.ClusterIdentity) *actor.PID {
	if ci.Kind != ServerKind {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.GetTimeout)
	defer cancel()
	pid, err := l.Locate(ctx, ci.Identity)
	if err != nil {
		return nil
	}
	return pid
}

// RemovePid implements cluster.IdentityLookup: the cached PID of a server actor that is gone is forgotten.
func (l *Lookup) RemovePid(ci *cluster.ClusterIdentity, pid *actor.PID) {
	l.cache.RemoveByValue(ci.Identity, ci.Kind, pid)
}

// Setup implements cluster.IdentityLookup: it caches in the cluster's PID cache and follows the membership.
func (l *Lookup) Setup(c *cluster.Cluster, _ []string, _ bool) {
	l.cache = c.PidCache
	c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok && l.OnTopology != nil {
			l.OnTopology(t)
		}
	})
}

// Shutdown implements cluster.IdentityLookup.
func (l *Lookup) Shutdown() {}

// Cached is the cached actor of a server, if any.
func (l *Lookup) Cached(id string) (*actor.PID, bool) {
	return l.cache.Get(id, ServerKind)
}

// Forget drops a cached actor that turned out dead or moved.
func (l *Lookup) Forget(id string) {
	l.cache.Remove(id, ServerKind)
}

// Locate finds (activating if need be) the actor of a server in the cluster and caches it. A node out of the
// membership places nothing (it has given its servers up until it rejoins): the caller gets Unplaceable, as when
// no member can take the server now.
func (l *Lookup) Locate(ctx context.Context, id string) (*actor.PID, error) {
	if _, joined := l.Members.Status(); !joined {
		return nil, l.Unplaceable(id, "this cluster node is not a member of the cluster now (it is rejoining)")
	}
	if pid, ok := l.cache.Get(id, ServerKind); ok {
		return pid, nil
	}
	var last error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt) * 25 * time.Millisecond):
			}
		}
		target, dead, err := l.placeOf(ctx, id)
		if err != nil {
			return nil, err
		}
		if target == "" {
			last = ErrNoMember
			continue
		}
		pid, err := l.Activate(ctx, actor.NewPID(target, PlacementName), id, dead)
		switch {
		case err == nil:
			l.cache.Set(id, ServerKind, pid)
			return pid, nil
		case errors.Is(err, ErrLeaving):
			l.Members.MarkLeaving(l.Members.IDAt(target))
			last = err
		case errors.Is(err, ErrNoAnswer):
			// The chosen node did not answer within the ask deadline: asking it again would only wait as long again.
			return nil, l.Unplaceable(id, ErrNoAnswer.Error())
		default:
			last = err
		}
	}
	if errors.Is(last, ErrNoMember) || errors.Is(last, ErrLeaving) || errors.Is(last, ErrNotMember) || errors.Is(last, ErrUnreachable) {
		return nil, l.Unplaceable(id, last.Error())
	}
	return nil, fmt.Errorf("locate server %s: %w", id, last)
}

// placeOf decides which member should host a server now, from its lease (Members.Holder): its holder when that is
// a member not leaving; otherwise the rendezvous choice, with the holder named as dead when it was seen leaving
// the cluster (its lease is taken over at once rather than after it lapses). A holder handing its servers over is
// waited for.
func (l *Lookup) placeOf(ctx context.Context, id string) (target, dead string, err error) {
	lease, now, err := l.Leases.GetLease(ctx, id)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		// Never owned: exists? The actor activated for it says (errcode.ServerNotFound) when it does not.
	case err != nil:
		return "", "", err
	default:
		holder, from, wait := l.Members.Holder(lease, now)
		switch {
		case wait:
			return "", "", nil // it releases the lease once its calls drained; ask again shortly
		case holder != "":
			addr, _ := l.Members.Addr(holder)
			return addr, "", nil
		}
		dead = from
		// A live lease of a process outside the cluster (`aggregator stdio`, a daemon without cluster settings) or
		// of a member not seen yet: the chosen member's actor stands by until the lease is free.
	}
	_, addr := l.Members.Choose(id)
	return addr, dead, nil
}
