package actors

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/mcpgw/aggregator/actors/internal/procstate"
)

// The actor view of the console (issue 29): this node's supervision tree as protoactor's process registry holds it
// (an actor's id is its path: "placement/server-<id>-<n>/proxy-$7"), each actor with its kind, its state, its
// mailbox depth and how often its supervisor restarted it; beside it, every server with the node that owns it (its
// live lease), so that on a cluster the operator sees where each server actor runs.
//
// Reading it costs one pass over the registry (which holds every local process: actors, futures) and nothing on
// the actors' own paths: no message is sent and no actor is asked.

// ActorInfo is one actor of this node, with its children.
type ActorInfo struct {
	// ID is protoactor's id (the path from the root); Name its last part.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Kind: server, proxy, anonymous (protoactor's generated names, such as a call's short-lived helper "$n"), or
	// the actor's name for the node's singletons (router, discovery, indexer, classifier, registry, placement,
	// access-policy) and protoactor's own.
	Kind string `json:"kind"`
	// ServerID and ServerName: the server a server actor serves, and for its children the same.
	ServerID   string `json:"server_id,omitempty"`
	ServerName string `json:"server_name,omitempty"`
	// State: for a server actor the server's status (CONNECTED, ...), or "retired" for an activation that handed
	// over and lingers to answer its last callers; "stopping" for an actor being stopped; "running" otherwise.
	State string `json:"state"`
	// MailboxDepth is how many user messages wait in the actor's mailbox (nil when it cannot be read).
	MailboxDepth *int `json:"mailbox_depth"`
	// Restarts counts the restarts its supervisor made since this node started (while the actor exists).
	Restarts int         `json:"restarts"`
	Children []ActorInfo `json:"children"`
}

// ServerPlacement is where a server is served: its owner is the node holding its live lease ("" when none does).
type ServerPlacement struct {
	ServerID string `json:"server_id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	Owner    string `json:"owner"`
	// OwnerAddress is the owner's cluster address, when it is a member this node sees.
	OwnerAddress string `json:"owner_address,omitempty"`
	// Local is set when the owner is this node; Actor is then the id of its server actor here ("" if none).
	Local bool   `json:"local"`
	Actor string `json:"actor,omitempty"`
}

// ActorView is the answer of GET /api/v1/aggregator/actors.
type ActorView struct {
	Node    string `json:"node"`
	Address string `json:"address"`
	// Cluster is set on a cluster member; Members is how many members it sees.
	Cluster bool `json:"cluster"`
	Members int  `json:"members"`
	// Supervisor describes what supervises the top-level actors (protoactor's guardian with the daemon's backoff
	// strategy).
	Supervisor string            `json:"supervisor"`
	Actors     []ActorInfo       `json:"actors"`
	Servers    []ServerPlacement `json:"servers"`
	// At is when the view was taken.
	At time.Time `json:"at"`
}

// restartCounter counts restarts by actor id from the supervision events our strategy publishes.
type restartCounter struct {
	mu  sync.Mutex
	n   map[string]int
	sub *eventstream.Subscription
}

// maxRestartEntries bounds the counter: past it, the entries of actors no longer registered are dropped.
const maxRestartEntries = 1024

// newRestartCounter follows sys's supervision events (hooked in Start, so that restarts from the start count).
func newRestartCounter(sys *actor.ActorSystem) *restartCounter {
	c := &restartCounter{n: map[string]int{}}
	c.sub = sys.EventStream.Subscribe(func(evt any) {
		e, ok := evt.(*actor.SupervisorEvent)
		if !ok || e.Directive != actor.RestartDirective || e.Child == nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n[e.Child.Id]++
		if len(c.n) > maxRestartEntries {
			for id := range c.n {
				if _, ok := sys.ProcessRegistry.GetLocal(id); !ok {
					delete(c.n, id)
				}
			}
		}
	})
	return c
}

func (c *restartCounter) get(id string) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// Actors returns this node's actor tree and where every server is served. It reads the leases from the store
// (bounded by ctx).
func (s *System) Actors(ctx context.Context) (ActorView, error) {
	v := ActorView{Node: s.deps.NodeID, Address: s.sys.Address(), At: time.Now().UTC(),
		Supervisor: "protoactor guardian with the daemon's restart backoff (MCP_AGGREGATOR_RESTART_*), no restart limit"}
	if node, members, _, ok := s.ClusterStatus(); ok {
		v.Cluster, v.Members, v.Node = true, members, node
	}
	rt := s.Routes()
	current := map[string]string{} // actor id -> server id, for the current activations here
	s.hosted.Range(func(id, pid any) bool {
		if p, ok := pid.(*actor.PID); ok {
			current[p.Id] = id.(string)
		}
		return true
	})

	// Every local actor process, by id.
	nodes := map[string]*ActorInfo{}
	for _, bucket := range s.sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		bucket.IterCb(func(id string, p any) {
			proc, ok := p.(*actor.ActorProcess)
			if !ok {
				return // futures, the dead letter and event stream processes, guardians
			}
			name := id[strings.LastIndexByte(id, '/')+1:]
			a := &ActorInfo{ID: id, Name: name, Kind: actorKind(name), State: "running", Restarts: s.restarts.get(id), Children: []ActorInfo{}}
			if depth, ok := procstate.MailboxDepth(proc); ok {
				a.MailboxDepth = &depth
			}
			if procstate.Dead(proc) {
				a.State = "stopping"
			}
			if a.Kind == "server" {
				a.ServerID = serverIDOf(name)
				if srv, ok := rt.Server(a.ServerID); ok {
					a.ServerName = srv.Name
					if a.State == "running" {
						a.State = srv.Status
					}
				}
				if _, ok := current[id]; !ok && a.State != "stopping" {
					a.State = "retired"
				}
			}
			nodes[id] = a
		})
	}
	// Children take their server from the closest server actor above them; then the tree is linked bottom up.
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := nodes[id]
		if a.ServerID != "" {
			continue
		}
		for p := parentID(id); p != ""; p = parentID(p) {
			if up, ok := nodes[p]; ok && up.ServerID != "" {
				a.ServerID, a.ServerName = up.ServerID, up.ServerName
				break
			}
		}
	}
	// Deepest first, so that a child is complete before it is copied into its parent.
	sort.Slice(ids, func(i, j int) bool {
		di, dj := strings.Count(ids[i], "/"), strings.Count(ids[j], "/")
		if di != dj {
			return di > dj
		}
		return ids[i] > ids[j]
	})
	var roots []ActorInfo
	for _, id := range ids {
		a := nodes[id]
		sort.Slice(a.Children, func(i, j int) bool { return a.Children[i].ID < a.Children[j].ID })
		if parent, ok := nodes[closestAncestor(nodes, id)]; ok {
			parent.Children = append(parent.Children, *a)
		} else {
			roots = append(roots, *a)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].ID < roots[j].ID })
	v.Actors = roots
	if v.Actors == nil {
		v.Actors = []ActorInfo{}
	}

	owners := map[string]string{}
	leases, now, err := s.deps.Store.ListLeases(ctx)
	if err != nil {
		return ActorView{}, fmt.Errorf("list leases: %w", err)
	}
	for _, l := range leases {
		if l.ExpiresAt.After(now) {
			owners[l.ServerID] = l.Owner
		}
	}
	local := map[string]string{} // server id -> actor id
	for aid, sid := range current {
		local[sid] = aid
	}
	v.Servers = []ServerPlacement{}
	for _, srv := range rt.Servers() {
		p := ServerPlacement{ServerID: srv.ID, Name: srv.Name, Status: srv.Status, Owner: owners[srv.ID]}
		p.Local = p.Owner != "" && p.Owner == s.deps.NodeID
		p.Actor = local[srv.ID]
		if s.members != nil && p.Owner != "" {
			p.OwnerAddress, _ = s.members.Addr(p.Owner)
		}
		v.Servers = append(v.Servers, p)
	}
	return v, nil
}

// closestAncestor is the id of the nearest registered actor above id ("" when none: a top-level actor).
func closestAncestor(nodes map[string]*ActorInfo, id string) string {
	for p := parentID(id); p != ""; p = parentID(p) {
		if _, ok := nodes[p]; ok {
			return p
		}
	}
	return ""
}

func parentID(id string) string {
	if i := strings.LastIndexByte(id, '/'); i > 0 {
		return id[:i]
	}
	return ""
}

// actorKind is the kind of an actor from its name: "server" and "proxy" for the per-server and per-session actors
// ("server-<id>-<n>", "proxy-$3"), "anonymous" for protoactor's generated names ("$12"), else the name itself
// (the node's singletons: "router", "access-policy", ...).
func actorKind(name string) string {
	switch {
	case strings.HasPrefix(name, "$"):
		return "anonymous"
	case strings.HasPrefix(name, "server-"):
		return "server"
	case strings.HasPrefix(name, "proxy-"):
		return "proxy"
	}
	return name
}

// serverIDOf reads the server id from a server actor's name (server-<36-char id>-<n>).
func serverIDOf(name string) string {
	rest := strings.TrimPrefix(name, "server-")
	if len(rest) >= 36 {
		return rest[:36]
	}
	return ""
}
