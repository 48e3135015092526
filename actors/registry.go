package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/supervision"
)

// Registry messages stay on one node (each node has its own registry), so they are plain Go structs.
type (
	registerMsg struct{ req RegisterRequest }
	updateMsg   struct {
		id    string
		patch persistence.ServerPatch
	}
	removeMsg struct{ id string }
	// toServer carries a message for one server actor; the registry passes it on with the asker as sender, so
	// the server actor answers the asker directly.
	toServer struct {
		id  string
		msg any
	}
	pidOf    struct{ id string }
	readyMsg struct{}
	// askReply answers every ask made of the node's own actors (registry, router, discovery, indexer, proxy
	// actors): an acknowledgement, the server a registration or update produced, a spawned actor, or the error
	// (System.askActor returns it as the error).
	askReply struct {
		server persistence.Server
		pid    *actor.PID
		err    error
	}
)

// registryActor owns the set of registered servers on this node: it persists registrations, spawns one supervised
// server actor per server, stops them, and routes admin messages to them. Its store writes run on goroutines that
// report back by message, so a slow database delays the admin request that waits for it and nothing else.
type registryActor struct {
	deps     *Deps
	children map[string]*actor.PID
	removing map[string]bool
	// creating counts registrations whose row is being written, so that MaxServers holds while they are.
	creating int
}

// Outcomes of the registry's store writes, reported by their goroutines.
type (
	created struct {
		server persistence.Server
		err    error
		asker  *actor.PID
	}
	updated struct {
		old, server persistence.Server
		err         error
		asker       *actor.PID
	}
	deleted struct {
		id, name string
		err      error
		asker    *actor.PID
	}
)

func newRegistryProps(d *Deps) *actor.Props {
	strategy := supervision.NewStrategy(d.Config.Restart, d.Logger, restartHook(d))
	return actor.PropsFromProducer(func() actor.Actor {
		return &registryActor{deps: d, children: map[string]*actor.PID{}, removing: map[string]bool{}}
	}, actor.WithSupervisor(strategy))
}

// Receive implements actor.Actor.
func (r *registryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.loadAll(ctx)
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *registerMsg:
		r.register(ctx, m.req)
	case *created:
		r.onCreated(ctx, m)
	case *updateMsg:
		r.update(ctx, m)
	case *updated:
		r.onUpdated(ctx, m)
	case *deleted:
		r.onDeleted(ctx, m)
	case *toServer:
		pid, err := r.child(m.id)
		if err != nil {
			ctx.Respond(&askReply{err: err})
			return
		}
		ctx.RequestWithCustomSender(pid, m.msg, ctx.Sender())
	case *pidOf:
		pid, err := r.child(m.id)
		ctx.Respond(&askReply{pid: pid, err: err})
	case *removeMsg:
		r.remove(ctx, m.id)
	case *cancelCallsForShutdown:
		for _, pid := range r.children {
			ctx.Send(pid, m)
		}
	}
}

func (r *registryActor) child(id string) (*actor.PID, error) {
	if r.removing[id] {
		return nil, fmt.Errorf("server %s is being removed: %w", id, persistence.ErrNotFound)
	}
	pid, ok := r.children[id]
	if !ok {
		return nil, fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
	}
	return pid, nil
}

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// loadAll spawns an actor for every stored server; those the admin left connected reconnect by themselves.
func (r *registryActor) loadAll(ctx actor.Context) {
	sctx, cancel := storeCtx()
	defer cancel()
	servers, _, err := r.deps.Store.ListServers(sctx, persistence.ListServersFilter{})
	if err != nil {
		panic(fmt.Errorf("load registered servers: %w", err))
	}
	for _, s := range servers {
		r.spawn(ctx, s.ID)
	}
	r.deps.Logger.Info("registry loaded servers", "count", len(servers))
}

func (r *registryActor) spawn(ctx actor.Context, id string) {
	pid, err := ctx.SpawnNamed(newServerProps(r.deps, id), "server-"+id)
	if err != nil {
		r.deps.Logger.Error("spawn server actor", "server_id", id, "error", err)
		return
	}
	r.children[id] = pid
}

// register writes the new server's row off the mailbox; onCreated spawns its actor and answers.
func (r *registryActor) register(ctx actor.Context, req RegisterRequest) {
	// The registry holds an actor for every stored server, so its own count needs no database round trip.
	if max := r.deps.Config.MaxServers; max > 0 && len(r.children)+r.creating >= max {
		ctx.Respond(&askReply{err: fmt.Errorf("%d servers registered: %w", len(r.children)+r.creating, ErrMaxServers)})
		return
	}
	r.creating++
	s := persistence.Server{
		Name: req.Name, Description: req.Description, TransportType: req.TransportType,
		ConnectionConfig: req.ConnectionConfig, HealthCheckURL: req.HealthCheckURL,
		AutoConnect: req.AutoConnect, Status: persistence.StatusDisconnected,
	}
	store, sys, self, asker := r.deps.Store, ctx.ActorSystem(), ctx.Self(), ctx.Sender()
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		err := store.CreateServer(sctx, &s, 0)
		sys.Root.Send(self, &created{server: s, err: err, asker: asker})
	}()
}

func (r *registryActor) onCreated(ctx actor.Context, m *created) {
	r.creating--
	if m.err != nil {
		r.reply(ctx, m.asker, &askReply{err: m.err})
		return
	}
	s := m.server
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, NewName: s.Name})
	r.spawn(ctx, s.ID)
	if s.AutoConnect {
		// The actor enters CONNECTING as its first act; say so now rather than race it.
		s.Status = persistence.StatusConnecting
	}
	r.deps.Logger.Info("server registered", "server_id", s.ID, "server", s.Name, "transport", s.TransportType)
	r.reply(ctx, m.asker, &askReply{server: s})
}

// reply answers an asker whose request was finished by a later message.
func (r *registryActor) reply(ctx actor.Context, asker *actor.PID, msg any) {
	if asker != nil {
		ctx.Send(asker, msg)
	}
}

// update writes the patch off the mailbox; onUpdated publishes it and has the server actor reload.
func (r *registryActor) update(ctx actor.Context, m *updateMsg) {
	if _, err := r.child(m.id); err != nil {
		ctx.Respond(&askReply{err: err})
		return
	}
	store, sys, self, asker := r.deps.Store, ctx.ActorSystem(), ctx.Self(), ctx.Sender()
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		u := &updated{asker: asker}
		if u.old, u.err = store.GetServer(sctx, m.id); u.err == nil {
			u.server, u.err = store.UpdateServer(sctx, m.id, m.patch)
		}
		sys.Root.Send(self, u)
	}()
}

func (r *registryActor) onUpdated(ctx actor.Context, m *updated) {
	if m.err != nil {
		r.reply(ctx, m.asker, &askReply{err: m.err})
		return
	}
	s := m.server
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, OldName: m.old.Name, NewName: s.Name})
	if pid, ok := r.children[s.ID]; ok {
		ctx.Send(pid, &pb.Reload{})
	}
	r.reply(ctx, m.asker, &askReply{server: s})
}

// remove stops the server actor (which closes its session and child process) and then deletes the server with its
// tools and history, off the mailbox. The registry keeps serving other messages meanwhile.
func (r *registryActor) remove(ctx actor.Context, id string) {
	pid, err := r.child(id)
	if err != nil {
		ctx.Respond(&askReply{err: err})
		return
	}
	r.removing[id] = true
	asker, store, sys, self := ctx.Sender(), r.deps.Store, ctx.ActorSystem(), ctx.Self()
	ctx.ReenterAfter(ctx.StopFuture(pid), func(_ any, stopErr error) {
		if stopErr != nil {
			r.deps.Logger.Warn("server actor did not confirm stop", "server_id", id, "error", stopErr)
		}
		go func() {
			sctx, cancel := storeCtx()
			defer cancel()
			d := &deleted{id: id, asker: asker}
			if s, err := store.GetServer(sctx, id); err == nil {
				d.name = s.Name
			}
			d.err = store.DeleteServer(sctx, id)
			sys.Root.Send(self, d)
		}()
	})
}

func (r *registryActor) onDeleted(ctx actor.Context, m *deleted) {
	delete(r.children, m.id)
	delete(r.removing, m.id)
	if m.err == nil || errors.Is(m.err, persistence.ErrNotFound) {
		ctx.ActorSystem().EventStream.Publish(&pb.ServerRemoved{ServerId: m.id, ServerName: m.name})
		r.deps.Logger.Info("server removed", "server_id", m.id, "server", m.name)
	}
	r.reply(ctx, m.asker, &askReply{err: m.err})
}
