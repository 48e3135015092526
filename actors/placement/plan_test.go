package placement

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestPlan: what one reconciliation pass activates, on one node and on a member of three (node-b of a, b, c; c
// seen leaving in the "left" cases).
func TestPlan(t *testing.T) {
	now := time.Now()
	live := func(id, owner string) persistence.Lease {
		return persistence.Lease{ServerID: id, Owner: owner, Epoch: 1, ExpiresAt: now.Add(10 * time.Second)}
	}
	lapsed := func(id, owner string) persistence.Lease {
		return persistence.Lease{ServerID: id, Owner: owner, Epoch: 1, ExpiresAt: now.Add(-time.Second)}
	}
	auto := func(id string) persistence.Server {
		return persistence.Server{ID: id, AutoConnect: true, Status: persistence.StatusDisconnected}
	}
	all := map[string]string{"node-a": "a:1", "node-b": "b:1", "node-c": "c:1"}
	// The servers the rendezvous hash gives node-b, and one it gives another member, among the three.
	view := NewMembers("node-b", "b:1")
	view.Update(all)
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		id := "srv-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if who, _ := view.Choose(id); who == "node-b" && mine == "" {
			mine = id
		} else if who != "node-b" && theirs == "" {
			theirs = id
		}
	}
	for _, tc := range []struct {
		name      string
		members   map[string]string // nil: a single node
		left      bool              // node-c seen leaving (members without it, after all three)
		servers   []persistence.Server
		leases    []persistence.Lease
		hosted    []string
		want      []Activation
		wantOwned []string // not unowned
	}{
		{name: "single node: every server that should be served", servers: []persistence.Server{auto("x"),
			{ID: "off", Status: persistence.StatusDisconnected}, {ID: "stale", Status: persistence.StatusConnected}},
			want: []Activation{{ServerID: "x"}, {ServerID: "stale"}}},
		{name: "nobody holds it: the rendezvous choice activates it", members: all, servers: []persistence.Server{auto(mine), auto(theirs)},
			want: []Activation{{ServerID: mine}}},
		{name: "a live member holds it: left to it", members: all, servers: []persistence.Server{auto(mine)},
			leases: []persistence.Lease{live(mine, "node-a")}, wantOwned: []string{mine}},
		{name: "a lapsed lease of a member stays with it", members: all, servers: []persistence.Server{auto(mine)},
			leases: []persistence.Lease{lapsed(mine, "node-c")}, wantOwned: []string{mine}},
		{name: "its lease names this node and it is hosted: nothing to do", members: all, servers: []persistence.Server{auto(theirs)},
			leases: []persistence.Lease{live(theirs, "node-b")}, hosted: []string{theirs}, wantOwned: []string{theirs}},
		{name: "its lease names this node but no actor has it: taken back", members: all, servers: []persistence.Server{auto(theirs)},
			leases: []persistence.Lease{live(theirs, "node-b")}, want: []Activation{{ServerID: theirs}}, wantOwned: []string{theirs}},
		{name: "its holder left: the rendezvous choice takes the live lease over", members: all, left: true,
			servers: []persistence.Server{auto(mine)}, leases: []persistence.Lease{live(mine, "node-c")},
			want: []Activation{{ServerID: mine, Dead: "node-c"}}},
		{name: "left disconnected by the admin: not activated", members: all, servers: []persistence.Server{{ID: mine, Status: persistence.StatusDisconnected}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m *Members
			if tc.members != nil {
				m = NewMembers("node-b", "b:1")
				m.Update(tc.members)
				if tc.left {
					rest := map[string]string{"node-a": "a:1", "node-b": "b:1"}
					m.Update(rest)
				}
			}
			leases := map[string]persistence.Lease{}
			for _, l := range tc.leases {
				leases[l.ServerID] = l
			}
			got, unowned := Plan(m, tc.servers, leases, now, func(id string) bool { return slices.Contains(tc.hosted, id) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("activate %v, want %v", got, tc.want)
			}
			for _, id := range tc.wantOwned {
				if unowned[id] {
					t.Errorf("%s counted as unowned", id)
				}
			}
		})
	}
	// A node out of the membership activates nothing.
	out := NewMembers("node-b", "b:1")
	out.Update(map[string]string{"node-a": "a:1"})
	if got, _ := Plan(out, []persistence.Server{auto(mine)}, nil, now, func(string) bool { return false }); len(got) != 0 {
		t.Errorf("a node out of the membership activates %v", got)
	}
}

// passStore is a PassStore with fixed answers that counts the lease reads.
type passStore struct {
	servers             []persistence.Server
	leases              []persistence.Lease
	serversErr, leasErr error
	leaseReads          int
}

func (p *passStore) ListServers(context.Context, persistence.ListServersFilter) ([]persistence.Server, int, error) {
	return p.servers, len(p.servers), p.serversErr
}

func (p *passStore) ListLeases(context.Context) ([]persistence.Lease, time.Time, error) {
	p.leaseReads++
	return p.leases, time.Now(), p.leasErr
}

// TestPlanPass: what a reconciliation pass reads and decides, on one node, on a member, on a node out of the
// membership, and when the store fails.
func TestPlanPass(t *testing.T) {
	srv := func(id string) persistence.Server {
		return persistence.Server{ID: id, Name: "name-" + id, AutoConnect: true, Status: persistence.StatusDisconnected}
	}
	member := NewMembers("node-a", "a:1")
	member.Update(map[string]string{"node-a": "a:1"})
	outside := NewMembers("node-a", "a:1")
	outside.Update(map[string]string{"node-b": "b:1"})
	down := errors.New("store down")
	for _, tc := range []struct {
		name           string
		m              *Members
		store          *passStore
		wantActivate   []string
		wantLeaseReads int
		wantNil        bool
		wantErr        error
	}{
		{"single node reads no leases", nil, &passStore{servers: []persistence.Server{srv("s1"), srv("s2")}}, []string{"s1", "s2"}, 0, false, nil},
		{"member skips what it holds and hosts", member, &passStore{servers: []persistence.Server{srv("s1"), srv("s2")},
			leases: []persistence.Lease{{ServerID: "s2", Owner: "node-a", Epoch: 1, ExpiresAt: time.Now().Add(time.Minute)}}},
			[]string{"s1"}, 1, false, nil},
		{"out of the membership", outside, &passStore{servers: []persistence.Server{srv("s1")}}, nil, 0, true, nil},
		{"servers unreadable", nil, &passStore{serversErr: down}, nil, 0, true, down},
		{"leases unreadable", member, &passStore{servers: []persistence.Server{srv("s1")}, leasErr: down}, nil, 1, true, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanPass(context.Background(), tc.store, tc.m, func(id string) bool { return id == "s2" })
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.store.leaseReads != tc.wantLeaseReads {
				t.Errorf("lease reads = %d, want %d", tc.store.leaseReads, tc.wantLeaseReads)
			}
			if tc.wantNil {
				if p != nil {
					t.Fatalf("pass = %+v, want none", p)
				}
				return
			}
			var got []string
			for _, a := range p.Activate {
				got = append(got, a.ServerID)
				if p.Names[a.ServerID] != "name-"+a.ServerID {
					t.Errorf("name of %s = %q", a.ServerID, p.Names[a.ServerID])
				}
			}
			if !slices.Equal(got, tc.wantActivate) {
				t.Errorf("activate = %v, want %v", got, tc.wantActivate)
			}
		})
	}
}
