package placement

import (
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
