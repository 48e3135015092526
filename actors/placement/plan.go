package placement

import (
	"context"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Activation is a server that a reconciliation pass activates on this node; Dead names a departed member whose
// live lease its actor may take over.
type Activation struct {
	ServerID, Dead string
}

// Plan decides one reconciliation pass: which servers this node activates (those that should be served: auto
// connect, or not left DISCONNECTED by the admin), and which servers no member holds now (unowned: the scrape-time
// gauges count them on the member the rendezvous hash picks). m is this node's view of the membership, nil on a
// single node, which activates every server that should be served (an activation of a hosted server is a no-op).
// In a cluster (leases read at now from the store), a server goes to the member that holds its lease; one nobody
// holds, or whose holder was seen leaving, to the rendezvous choice; one being handed over is left alone; a server
// whose lease names this node while it hosts no actor of it (hosted says) is taken back. A node out of the
// membership activates nothing.
func Plan(m *Members, servers []persistence.Server, leases map[string]persistence.Lease, now time.Time, hosted func(id string) bool) (activate []Activation, unowned map[string]bool) {
	unowned = map[string]bool{}
	served := func(srv persistence.Server) bool {
		return srv.AutoConnect || srv.Status != persistence.StatusDisconnected
	}
	if m == nil {
		for _, srv := range servers {
			if served(srv) {
				activate = append(activate, Activation{ServerID: srv.ID})
			}
		}
		return activate, unowned
	}
	if _, joined := m.Status(); !joined {
		return nil, unowned // out of the membership: it hosts nothing until it rejoins
	}
	for _, srv := range servers {
		holder, from, wait := "", "", false
		if l, ok := leases[srv.ID]; ok {
			holder, from, wait = m.Holder(l, now)
		}
		if holder == "" && !wait {
			unowned[srv.ID] = true
		}
		if !served(srv) {
			continue
		}
		dead := ""
		switch {
		case holder == m.self:
			if hosted(srv.ID) {
				continue // served
			}
			// Its lease names this node, yet no actor here has it (it lapsed while the store was away, and the
			// actor gave it up): take it back.
		case holder != "" || wait:
			continue // served by another member, or being handed over
		default:
			if id, _ := m.Choose(srv.ID); id != m.self {
				continue // another member's to activate
			}
			dead = from
		}
		activate = append(activate, Activation{ServerID: srv.ID, Dead: dead})
	}
	return activate, unowned
}

// PassStore is what a reconciliation pass reads: the servers, and in a cluster the leases.
type PassStore interface {
	ListServers(ctx context.Context, f persistence.ListServersFilter) ([]persistence.Server, int, error)
	ListLeases(ctx context.Context) (leases []persistence.Lease, now time.Time, err error)
}

// Pass is one reconciliation pass decided: what to activate (Plan), which servers no member holds, and the
// servers' names (for the log).
type Pass struct {
	Activate []Activation
	Unowned  map[string]bool
	Names    map[string]string
}

// PlanPass reads the servers (and, in a cluster, the leases) from store and plans one reconciliation pass (Plan).
// It returns nil with no error on a member out of the membership: it hosts nothing until it rejoins.
func PlanPass(ctx context.Context, store PassStore, m *Members, hosted func(id string) bool) (*Pass, error) {
	servers, _, err := store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return nil, err
	}
	var leases map[string]persistence.Lease
	var now time.Time
	if m != nil {
		if _, joined := m.Status(); !joined {
			return nil, nil
		}
		ls, at, err := store.ListLeases(ctx)
		if err != nil {
			return nil, err
		}
		leases, now = make(map[string]persistence.Lease, len(ls)), at
		for _, l := range ls {
			leases[l.ServerID] = l
		}
	}
	p := &Pass{Names: make(map[string]string, len(servers))}
	p.Activate, p.Unowned = Plan(m, servers, leases, now, hosted)
	for _, srv := range servers {
		p.Names[srv.ID] = srv.Name
	}
	return p, nil
}
