package actors

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/server"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/supervision"
)

// placementActor hosts this node's server actors. Where a server lives is decided by the lookup (placement.Lookup):
// on one node that is always here; in a cluster, with the server's lease. The placement only activates what it is asked
// to (idempotently: a server already here answers with its actor), supervises the actors with the daemon's backoff
// strategy (a protoactor grain spawned by the library would lose it), and stops them with the node. A node that is
// handing its servers over (leaving) activates nothing new, so that lookups pick another node.
//
// Each activation of a server gets a name of its own (server-<id>-<n>): an actor that retires (server/server_lease.go)
// leaves this table at once and lingers a while answering with its reason, so that a caller that still addresses
// it gets an answer (protoactor drops, without a dead letter, the messages that wait in the mailbox of an actor
// that stops), while a new activation of the same server does not have to wait for its name.
type placementActor struct {
	deps *Deps
	// hosted mirrors children for readers outside the actor (the call path): server id -> *actor.PID.
	hosted   *sync.Map
	children map[string]*actor.PID // server id -> actor
	ids      map[string]string     // actor id -> server id
	seq      uint64
	leaving  bool
}

// Local messages of the placement actor.
type (
	// placementLeaving makes the placement refuse new activations (the node hands its servers over); it answers
	// with the ids of the servers it hosts.
	placementLeaving struct{}
)

// newPlacementProps: the placement supervises its server actors with our strategy, and guardian (a guardian with
// the same strategy: the placement is spawned from the root) supervises the placement itself, so that a crash of
// the parent of every server actor is restarted after our backoff, without limit, instead of protoactor's default
// (10 restarts in 10 s, then stopped for good: no server could be activated on this node any more). A restart
// stops its server actors first (protoactor restarts a parent with its children); they tell it they are gone, so
// hosted forgets them, and the next call or reconciliation activates them again.
func newPlacementProps(d *Deps, hosted *sync.Map, guardian actor.PropsOption) *actor.Props {
	strategy := supervision.NewStrategy(d.Config.Restart, d.Logger, restartHook(d))
	return actor.PropsFromProducer(func() actor.Actor {
		return &placementActor{deps: d, hosted: hosted, children: map[string]*actor.PID{}, ids: map[string]string{}}
	}, actor.WithSupervisor(strategy), guardian)
}

// Receive implements actor.Actor.
func (p *placementActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *pb.Activate:
		ctx.Respond(p.activate(ctx, m))
	case *msg.ServerRetired:
		p.forget(m.ID, m.PID)
	case *actor.Terminated:
		if id, ok := p.ids[m.Who.Id]; ok {
			delete(p.ids, m.Who.Id)
			p.forget(id, m.Who)
		}
	case *placementLeaving:
		p.leaving = true
		ctx.Respond(p.hostedIDs())
	case *cancelCallsForShutdown:
		for _, pid := range p.children {
			ctx.Send(pid, m)
		}
	case *panicForTest:
		panic("placement: crash for a test")
	}
}

// forget drops the server's entry when it is that actor.
func (p *placementActor) forget(id string, pid *actor.PID) {
	if cur := p.children[id]; cur != nil && cur.Id == pid.Id {
		delete(p.children, id)
		p.hosted.Delete(id)
	}
}

func (p *placementActor) activate(ctx actor.Context, m *pb.Activate) *pb.Activated {
	if pid, ok := p.children[m.ServerId]; ok {
		return placement.HostReply(pid, nil)
	}
	if err := placement.MayHost(p.deps.members, p.leaving); err != nil {
		return placement.HostReply(nil, err) // leaving, or out of the membership: it hosts nothing new
	}
	p.seq++
	pid, err := ctx.SpawnNamed(server.Props(p.deps.server, m.ServerId, m.DeadOwner), "server-"+m.ServerId+"-"+strconv.FormatUint(p.seq, 10))
	if err != nil {
		return placement.HostReply(nil, fmt.Errorf("activate server %s: %w", m.ServerId, err))
	}
	p.children[m.ServerId] = pid
	p.ids[pid.Id] = m.ServerId
	p.hosted.Store(m.ServerId, pid)
	return placement.HostReply(pid, nil)
}

func (p *placementActor) hostedIDs() []string {
	out := make([]string, 0, len(p.children))
	for id := range p.children {
		out = append(out, id)
	}
	return out
}
