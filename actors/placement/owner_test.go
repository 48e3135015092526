package placement

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestDecide: the verdict on a server actor's activation, on a single node and on node-b of a cluster of a and b
// (node-c left it).
func TestDecide(t *testing.T) {
	cluster := NewMembers("node-b", "b:1")
	cluster.Update(map[string]string{"node-a": "a:1", "node-b": "b:1"})
	held := func(owner string) persistence.Lease { return persistence.Lease{ServerID: "s", Owner: owner, Epoch: 3} }
	heldErr := fmt.Errorf("lease: %w", persistence.ErrLeaseHeld)
	storeErr := errors.New("connection refused")
	notFound := fmt.Errorf("server s: %w", persistence.ErrNotFound)
	for _, tc := range []struct {
		name              string
		m                 *Members
		lease             persistence.Lease
		loadErr, leaseErr error
		want              Verdict
	}{
		{"granted", nil, held("node-b"), nil, nil, Own},
		{"granted in a cluster", cluster, held("node-b"), nil, nil, Own},
		{"registration gone", nil, persistence.Lease{}, notFound, nil, Gone},
		{"lease of a deleted server", cluster, persistence.Lease{}, nil, notFound, Gone},
		{"not found wins over a store error", nil, persistence.Lease{}, storeErr, notFound, Gone},
		{"registration unreadable", cluster, persistence.Lease{}, storeErr, nil, RetryLoad},
		{"another member holds it", cluster, held("node-a"), nil, heldErr, Moved},
		{"this node's own name held elsewhere", cluster, held("node-b"), nil, heldErr, StandBy},
		{"a departed member holds it", cluster, held("node-c"), nil, heldErr, StandBy},
		{"a process outside the cluster holds it", cluster, held("stdio-1"), nil, heldErr, StandBy},
		{"held, single node", nil, held("node-a"), nil, heldErr, StandBy},
		{"store down for the lease", nil, persistence.Lease{}, nil, storeErr, RetryLease},
		{"store down for the lease, cluster", cluster, persistence.Lease{}, nil, storeErr, RetryLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.m, "node-b", tc.lease, tc.loadErr, tc.leaseErr); got != tc.want {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAfterLoss: an owner that lost its lease retires in a cluster and stands by outside one.
func TestAfterLoss(t *testing.T) {
	if v := AfterLoss(NewMembers("node-a", "a:1")); v != Moved {
		t.Errorf("in a cluster: %v, want %v", v, Moved)
	}
	if v := AfterLoss(nil); v != Lost {
		t.Errorf("outside a cluster: %v, want %v", v, Lost)
	}
}

// TestAskAgain: when an actor that does not own its server asks for the lease again (TTL 9 s).
func TestAskAgain(t *testing.T) {
	const ttl = 9 * time.Second
	leases := NewLeases(nil, "node-a", ttl)
	jitter := ttl/10 + 50*time.Millisecond
	for _, tc := range []struct {
		name    string
		v       Verdict
		expires time.Duration // from now; 0: no lease
		lo, hi  time.Duration
	}{
		{"registration unreadable", RetryLoad, 0, ttl / 3, ttl / 3},
		{"store down for the lease", RetryLease, 0, ttl / 3, ttl / 3},
		{"lost its own", Lost, 0, ttl / 2, ttl / 2},
		{"stand by: just after the holder's lease would lapse", StandBy, 4 * time.Second, 3900 * time.Millisecond, 4*time.Second + jitter},
		{"stand by: a lapsed lease, a TTL", StandBy, -time.Second, ttl, ttl + jitter},
		{"stand by: at least every TTL", StandBy, time.Hour, ttl, ttl + jitter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := persistence.Lease{ServerID: "s", Owner: "stdio-1"}
			if tc.expires != 0 {
				held.ExpiresAt = time.Now().Add(tc.expires)
			}
			if got := leases.AskAgain(tc.v, held); got < tc.lo || got > tc.hi {
				t.Errorf("AskAgain = %v, want within [%v, %v]", got, tc.lo, tc.hi)
			}
		})
	}
}
