package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Where a server's actor lives. On one node: in this node's placement actor, at a fixed name, so a call addresses
// it with no lookup at all; it is activated on first use or by the reconciler. In a cluster the server's lease
// decides (the identity lookup of protoactor's cluster, backed by the store): a server whose lease a live member
// holds lives on that member; a server nobody holds (or whose holder left the cluster) is placed on the member
// chosen by rendezvous hashing over the members that are not leaving, which takes the lease (over, from a member
// that left) when its actor activates. Every answer is cached (protoactor's PID cache) until the actor is gone:
// a dead letter, or an answer saying the server moved, sends the caller back here.

// ServerKind is the cluster kind of server actors (their identity is the server id).
const ServerKind = "mcpserver"

// memberView is this node's picture of the cluster: the members and their addresses, the ones seen leaving the
// membership (whose leases may be taken over before they lapse) and the ones handing their servers over.
type memberView struct {
	self string
	mu   sync.RWMutex
	// addrs maps member id (= node id) to its address.
	addrs map[string]string
	// left holds members seen leaving and not back since; departed is closed per address when it leaves.
	left     map[string]bool
	departed map[string]chan struct{}
	leaving  map[string]bool
	ids      []string // sorted member ids, for rendezvous hashing
	// joined: the membership includes this node (it has joined the cluster).
	joined bool
}

func newMemberView(self, selfAddr string) *memberView {
	v := &memberView{self: self, addrs: map[string]string{self: selfAddr}, left: map[string]bool{},
		departed: map[string]chan struct{}{}, leaving: map[string]bool{}}
	v.ids = []string{self}
	return v
}

// update installs a new membership (ids -> addresses): members absent from it are marked as having left.
func (v *memberView) update(members map[string]string) (joined, gone []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, addr := range v.addrs {
		if _, ok := members[id]; !ok && id != v.self {
			gone = append(gone, id)
			v.left[id] = true
			delete(v.leaving, id)
			if ch, ok := v.departed[addr]; ok {
				close(ch)
				delete(v.departed, addr)
			}
		}
	}
	for id := range members {
		if _, ok := v.addrs[id]; !ok {
			joined = append(joined, id)
		}
		delete(v.left, id)
	}
	v.addrs = make(map[string]string, len(members)+1)
	for id, addr := range members {
		v.addrs[id] = addr
	}
	if _, ok := v.addrs[v.self]; !ok {
		v.addrs[v.self] = members[v.self]
	}
	_, v.joined = members[v.self]
	v.ids = v.ids[:0]
	for id := range v.addrs {
		v.ids = append(v.ids, id)
	}
	slices.Sort(v.ids)
	return joined, gone
}

// addr is a member's address; false when it is not a member.
func (v *memberView) addr(id string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	a, ok := v.addrs[id]
	return a, ok
}

// hasLeft reports whether id was seen leaving the membership (and has not come back).
func (v *memberView) hasLeft(id string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.left[id]
}

// markLeaving records that a member hands its servers over and takes no new ones.
func (v *memberView) markLeaving(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.addrs[id]; ok {
		v.leaving[id] = true
	}
}

// isLeaving reports whether the member is handing its servers over.
func (v *memberView) isLeaving(id string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.leaving[id]
}

// count is the number of members.
func (v *memberView) count() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.addrs)
}

// choose is the member a server without an owner is placed on: the highest rendezvous hash of (member, server)
// over the members that are not leaving, so that every node makes the same choice and servers spread evenly.
func (v *memberView) choose(serverID string) (id, addr string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var best uint64
	for _, m := range v.ids {
		if v.leaving[m] {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(m))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(serverID))
		if s := h.Sum64(); id == "" || s > best {
			best, id = s, m
		}
	}
	return id, v.addrs[id]
}

// departure returns a channel closed when the member at addr leaves the membership (nil for this node).
func (v *memberView) departure(addr string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if addr == v.addrs[v.self] {
		return nil
	}
	ch, ok := v.departed[addr]
	if !ok {
		ch = make(chan struct{})
		v.departed[addr] = ch
	}
	return ch
}

// hostedPID is the actor of a server that this node hosts now.
func (s *System) hostedPID(id string) (*actor.PID, bool) {
	v, ok := s.hosted.Load(id)
	if !ok {
		return nil, false
	}
	return v.(*actor.PID), true
}

// serverPID addresses a server actor without a lookup: the cached one in a cluster, else the one this node hosts,
// else nil.
func (s *System) serverPID(id string) *actor.PID {
	if s.cluster != nil {
		if pid, ok := s.cluster.PidCache.Get(id, ServerKind); ok {
			return pid
		}
	}
	pid, _ := s.hostedPID(id)
	return pid
}

// activateLocal has this node's placement host the server's actor (dead: a departed member whose lease the actor may
// take over) and returns the actor.
func (s *System) activateLocal(ctx context.Context, id, dead string) (*actor.PID, error) {
	return s.askPlacement(ctx, s.placement, id, dead)
}

// askPlacement asks a node's placement actor to host a server; asking another node gives up when it leaves or a
// connection with it breaks (errDeparted, errLinkBroken: the request or its answer may be lost).
func (s *System) askPlacement(ctx context.Context, placement *actor.PID, id, dead string) (*actor.PID, error) {
	res, err := s.askWatching(ctx, placement, &pb.Activate{ServerId: id, DeadOwner: dead}, 0, s.watchRemote(placement))
	if err != nil {
		return nil, err
	}
	a, ok := res.(*pb.Activated)
	switch {
	case !ok:
		return nil, fmt.Errorf("unexpected reply %T to activate", res)
	case a.Pid != nil:
		return actor.NewPID(a.Pid.Address, a.Pid.Id), nil
	case a.Leaving:
		return nil, errLeaving
	case a.Error == errNotMember.Error():
		return nil, errNotMember
	}
	return nil, errors.New(a.Error)
}

// errLeaving: the asked node hands its servers over and hosts nothing new.
var errLeaving = errors.New("node is leaving the cluster")

// locate finds (activating if need be) the actor of a server in the cluster and caches it. A node out of the
// membership places nothing (it has given its servers up until it rejoins): the caller gets a 503 with
// Retry-After, as when no member can take the server now.
func (s *System) locate(ctx context.Context, id string) (*actor.PID, error) {
	if s.cluster == nil {
		return s.activateLocal(ctx, id, "")
	}
	if _, joined := s.members.status(); !joined {
		return nil, s.unplaceable(id, "this cluster node is not a member of the cluster now (it is rejoining)")
	}
	if pid, ok := s.cluster.PidCache.Get(id, ServerKind); ok {
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
		target, dead, err := s.placeOf(ctx, id)
		if err != nil {
			return nil, err
		}
		if target == "" {
			last = errNoMember
			continue
		}
		pid, err := s.askPlacement(ctx, actor.NewPID(target, placementName), id, dead)
		switch {
		case err == nil:
			s.cluster.PidCache.Set(id, ServerKind, pid)
			return pid, nil
		case errors.Is(err, errLeaving):
			s.members.markLeaving(s.members.idAt(target))
			last = err
		case errors.Is(err, ErrAskTimeout):
			// The chosen node did not answer within the ask deadline: asking it again would only wait as long again.
			return nil, s.unplaceable(id, "the cluster node chosen to serve it did not answer in time")
		default:
			last = err
		}
	}
	if errors.Is(last, errNoMember) || errors.Is(last, errLeaving) || errors.Is(last, errNotMember) ||
		errors.Is(last, errDeparted) || errors.Is(last, errLinkBroken) {
		return nil, s.unplaceable(id, last.Error())
	}
	return nil, fmt.Errorf("locate server %s: %w", id, last)
}

var (
	// errNoMember: no member may host the server now.
	errNoMember = errors.New("no member to place the server on")
	// errNotMember: the asked node is out of the membership now.
	errNotMember = errors.New("node is not a member of the cluster now")
)

// unplaceable is the answer to a request for a server that no node can host now: 503, retry shortly.
func (s *System) unplaceable(id, why string) error {
	srv, _ := s.Routes().Server(id)
	if srv.ID == "" {
		srv.ID = id
	}
	name := srv.Name
	if name == "" {
		name = id
	}
	return &routing.UnavailableError{Server: srv, RetryAfter: time.Second,
		Detail: fmt.Sprintf("Server unavailable: %s cannot be placed now: %s; retry", name, why)}
}

// placeOf decides which member should host a server now, from its lease (memberView.holder): its holder when that
// is a member not leaving; otherwise the rendezvous choice, with the holder named as dead when it was seen leaving
// the cluster (its lease is taken over at once rather than after it lapses). A holder handing its servers over is
// waited for.
func (s *System) placeOf(ctx context.Context, id string) (target, dead string, err error) {
	l, now, err := s.deps.Store.GetLease(ctx, id)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		// Never owned: exists? The actor activated for it says (errcode.ServerNotFound) when it does not.
	case err != nil:
		return "", "", err
	default:
		holder, from, wait := s.members.holder(l, now)
		switch {
		case wait:
			return "", "", nil // it releases the lease once its calls drained; ask again shortly
		case holder != "":
			addr, _ := s.members.addr(holder)
			return addr, "", nil
		}
		dead = from
		// A live lease of a process outside the cluster (`aggregator stdio`, a daemon without cluster settings) or
		// of a member not seen yet: the chosen member's actor stands by until the lease is free.
	}
	_, addr := s.members.choose(id)
	return addr, dead, nil
}

// holder reads a server's lease against the membership: holder is the member that serves the server, whether its
// lease is live or lapsed (a member that could not reach the store keeps its servers, and renews their leases when
// the store is back: nobody else takes them while it is a member); dead is a departed member whose live lease may
// be taken over; wait says that the holder is handing the server over. A released lease, a lapsed one of a process
// that is not a member, and a live one of a process outside the cluster have no holder.
func (v *memberView) holder(l persistence.Lease, now time.Time) (holder, dead string, wait bool) {
	if l.Owner == "" {
		return "", "", false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	live := l.ExpiresAt.After(now)
	_, member := v.addrs[l.Owner]
	switch {
	case member && v.leaving[l.Owner]:
		return "", "", live
	case member && (l.Owner != v.self || v.joined):
		return l.Owner, "", false
	case live && v.left[l.Owner]:
		return "", l.Owner, false
	}
	return "", "", false
}

// idAt is the id of the member at addr ("" if none).
func (v *memberView) idAt(addr string) string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for id, a := range v.addrs {
		if a == addr {
			return id
		}
	}
	return ""
}

// status is this node's view: how many members, and whether it is one of them (it has joined).
func (v *memberView) status() (members int, joined bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.addrs), v.joined
}

// forget drops a cached PID that turned out dead or moved.
func (s *System) forget(id string) {
	if s.cluster != nil {
		s.cluster.PidCache.Remove(id, ServerKind)
	}
}
