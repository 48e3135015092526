package placement

import (
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Members is this node's picture of the cluster: the members and their addresses, the ones seen leaving the
// membership (whose leases may be taken over before they lapse) and the ones handing their servers over.
type Members struct {
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

// NewMembers is the view of node self, at selfAddr, before it has joined.
func NewMembers(self, selfAddr string) *Members {
	v := &Members{self: self, addrs: map[string]string{self: selfAddr}, left: map[string]bool{},
		departed: map[string]chan struct{}{}, leaving: map[string]bool{}}
	v.ids = []string{self}
	return v
}

// Update installs a new membership (ids -> addresses): members absent from it are marked as having left.
func (v *Members) Update(members map[string]string) (joined, gone []string) {
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

// Addr is a member's address; false when it is not a member.
func (v *Members) Addr(id string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	a, ok := v.addrs[id]
	return a, ok
}

// HasLeft reports whether id was seen leaving the membership (and has not come back).
func (v *Members) HasLeft(id string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.left[id]
}

// MarkLeaving records that a member hands its servers over and takes no new ones.
func (v *Members) MarkLeaving(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.addrs[id]; ok {
		v.leaving[id] = true
	}
}

// IsLeaving reports whether the member is handing its servers over.
func (v *Members) IsLeaving(id string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.leaving[id]
}

// Count is the number of members.
func (v *Members) Count() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.addrs)
}

// Choose is the member a server without an owner is placed on: the highest rendezvous hash of (member, server)
// over the members that are not leaving, so that every node makes the same choice and servers spread evenly.
func (v *Members) Choose(serverID string) (id, addr string) {
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

// Departure returns a channel closed when the member at addr leaves the membership (nil for this node).
func (v *Members) Departure(addr string) <-chan struct{} {
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

// Holder reads a server's lease against the membership: holder is the member that serves the server, whether its
// lease is live or lapsed (a member that could not reach the store keeps its servers, and renews their leases when
// the store is back: nobody else takes them while it is a member); dead is a departed member whose live lease may
// be taken over; wait says that the holder is handing the server over. A released lease, a lapsed one of a process
// that is not a member, and a live one of a process outside the cluster have no holder.
func (v *Members) Holder(l persistence.Lease, now time.Time) (holder, dead string, wait bool) {
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

// IDAt is the id of the member at addr ("" if none).
func (v *Members) IDAt(addr string) string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for id, a := range v.addrs {
		if a == addr {
			return id
		}
	}
	return ""
}

// Others are the addresses of the members other than this node, sorted.
func (v *Members) Others() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	others := make([]string, 0, len(v.addrs))
	for id, a := range v.addrs {
		if id != v.self && a != "" {
			others = append(others, a)
		}
	}
	slices.Sort(others)
	return others
}

// Status is this node's view: how many members, and whether it is one of them (it has joined).
func (v *Members) Status() (members int, joined bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.addrs), v.joined
}

// MemberNode is the node id of a member id: the etcd provider names members <incarnation>@<actor system id>
// (membership.Etcd), the automanaged one by the actor system id, which is the node id.
func MemberNode(id string) string {
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[i+1:]
	}
	return id
}
