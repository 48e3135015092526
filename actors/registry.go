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
// server actor per server, stops them, and routes admin messages to them.
type registryActor struct {
	deps     *Deps
	children map[string]*actor.PID
	removing map[string]bool
}

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
		ctx.Respond(r.register(ctx, m.req))
	case *updateMsg:
		ctx.Respond(r.update(ctx, m))
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

func (r *registryActor) register(ctx actor.Context, req RegisterRequest) *askReply {
	sctx, cancel := storeCtx()
	defer cancel()
	// The registry holds an actor for every stored server, so its own count needs no database round trip.
	if max := r.deps.Config.MaxServers; max > 0 && len(r.children) >= max {
		return &askReply{err: fmt.Errorf("%d servers registered: %w", len(r.children), ErrMaxServers)}
	}
	s := persistence.Server{
		Name: req.Name, Description: req.Description, TransportType: req.TransportType,
		ConnectionConfig: req.ConnectionConfig, HealthCheckURL: req.HealthCheckURL,
		AutoConnect: req.AutoConnect, Status: persistence.StatusDisconnected,
	}
	if err := r.deps.Store.CreateServer(sctx, &s); err != nil {
		return &askReply{err: err}
	}
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, NewName: s.Name})
	r.spawn(ctx, s.ID)
	if s.AutoConnect {
		// The actor enters CONNECTING as its first act; say so now rather than race it.
		s.Status = persistence.StatusConnecting
	}
	r.deps.Logger.Info("server registered", "server_id", s.ID, "server", s.Name, "transport", s.TransportType)
	return &askReply{server: s}
}

func (r *registryActor) update(ctx actor.Context, m *updateMsg) *askReply {
	pid, err := r.child(m.id)
	if err != nil {
		return &askReply{err: err}
	}
	sctx, cancel := storeCtx()
	defer cancel()
	old, err := r.deps.Store.GetServer(sctx, m.id)
	if err != nil {
		return &askReply{err: err}
	}
	s, err := r.deps.Store.UpdateServer(sctx, m.id, m.patch)
	if err != nil {
		return &askReply{err: err}
	}
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, OldName: old.Name, NewName: s.Name})
	ctx.Send(pid, &pb.Reload{})
	return &askReply{server: s}
}

// remove stops the server actor (which closes its session and child process) and then deletes the server with its
// tools and history. The registry keeps serving other messages while the actor stops.
func (r *registryActor) remove(ctx actor.Context, id string) {
	pid, err := r.child(id)
	if err != nil {
		ctx.Respond(&askReply{err: err})
		return
	}
	r.removing[id] = true
	sender := ctx.Sender()
	ctx.ReenterAfter(ctx.StopFuture(pid), func(_ any, stopErr error) {
		delete(r.children, id)
		delete(r.removing, id)
		if stopErr != nil {
			r.deps.Logger.Warn("server actor did not confirm stop", "server_id", id, "error", stopErr)
		}
		sctx, cancel := storeCtx()
		defer cancel()
		name := ""
		if s, err := r.deps.Store.GetServer(sctx, id); err == nil {
			name = s.Name
		}
		err := r.deps.Store.DeleteServer(sctx, id)
		if err == nil || errors.Is(err, persistence.ErrNotFound) {
			ctx.ActorSystem().EventStream.Publish(&pb.ServerRemoved{ServerId: id, ServerName: name})
			r.deps.Logger.Info("server removed", "server_id", id, "server", name)
		}
		if sender != nil {
			ctx.Send(sender, &askReply{err: err})
		}
	})
}
