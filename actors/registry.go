package actors

import (
	"context"
	"errors"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/registry"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Registry messages stay on one node (each node has its own registry), so they are plain Go structs.
type (
	registerMsg struct {
		req RegisterRequest
		key *persistence.IdempotencyKey // nil: an unkeyed registration
	}
	updateMsg struct {
		id    string
		patch persistence.ServerPatch
	}
	removeMsg struct{ id string }
	readyMsg  struct{}
)

// registryActor carries out the admin's registrations, updates and deletes on this node: it writes the store (the
// server limit is decided there, for every node), publishes what changed, has the server activated where the
// lookup places it (when it should connect), tells the server's actor about a changed registration wherever it
// lives, and deactivates it before a delete. Its store writes and the waits on other actors run on goroutines that
// report back by message, so a slow database or a busy server delays the admin request that waits for it and
// nothing else. What each write does to the store, in order, is registry.Writer's.
type registryActor struct {
	deps  *Deps
	sys   *System
	write *registry.Writer
}

// Outcomes of the registry's background work, reported by its goroutines.
type (
	created struct {
		server   persistence.Server
		replayed bool
		err      error
		asker    *actor.PID
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

func newRegistryProps(d *Deps, s *System) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &registryActor{deps: d, sys: s, write: &registry.Writer{Store: d.Store, MaxServers: d.Config.MaxServers}}
	}, s.guardian)
}

// Receive implements actor.Actor.
func (r *registryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *registerMsg:
		r.register(ctx, m.req, m.key)
	case *created:
		r.onCreated(ctx, m)
	case *updateMsg:
		r.update(ctx, m)
	case *updated:
		r.onUpdated(ctx, m)
	case *removeMsg:
		r.remove(ctx, m.id)
	case *deleted:
		r.onDeleted(ctx, m)
	}
}

// storeTimeout bounds one store operation of an actor (msg.StoreTimeout).
const storeTimeout = msg.StoreTimeout

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// register writes the new server's row off the mailbox (under key when not nil); onCreated publishes it and has
// it activated.
func (r *registryActor) register(ctx actor.Context, req RegisterRequest, key *persistence.IdempotencyKey) {
	w, sys, self, asker := r.write, ctx.ActorSystem(), ctx.Self(), ctx.Sender()
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		s, replayed, err := w.Create(sctx, req, key)
		sys.Root.Send(self, &created{server: s, replayed: replayed, err: err, asker: asker})
	}()
}

func (r *registryActor) onCreated(ctx actor.Context, m *created) {
	if m.err != nil {
		r.reply(ctx, m.asker, &askReply{Err: m.err})
		return
	}
	s := m.server
	if m.replayed {
		// The first request registered it (and had it activated, or a restart does): nothing changes.
		r.deps.Logger.Info("server registration replayed", "server_id", s.ID, "server", s.Name)
		r.reply(ctx, m.asker, &askReply{Server: s, Replayed: true})
		return
	}
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, NewName: s.Name})
	if s.AutoConnect {
		// The actor enters CONNECTING as its first act; say so now rather than race it.
		s.Status = persistence.StatusConnecting
		go r.sys.activateSoon(s.ID)
	}
	r.deps.Logger.Info("server registered", "server_id", s.ID, "server", s.Name, "transport", s.TransportType)
	r.reply(ctx, m.asker, &askReply{Server: s})
}

// reply answers an asker whose request was finished by a later message.
func (r *registryActor) reply(ctx actor.Context, asker *actor.PID, msg any) {
	if asker != nil {
		ctx.Send(asker, msg)
	}
}

// update writes the patch off the mailbox; onUpdated publishes it and has the server's actor reload.
func (r *registryActor) update(ctx actor.Context, m *updateMsg) {
	w, sys, self, asker := r.write, ctx.ActorSystem(), ctx.Self(), ctx.Sender()
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		u := &updated{asker: asker}
		u.old, u.server, u.err = w.Update(sctx, m.id, m.patch)
		sys.Root.Send(self, u)
	}()
}

func (r *registryActor) onUpdated(ctx actor.Context, m *updated) {
	if m.err != nil {
		r.reply(ctx, m.asker, &askReply{Err: m.err})
		return
	}
	s := m.server
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, OldName: m.old.Name, NewName: s.Name})
	go r.sys.tellActive(s.ID, &pb.Reload{})
	r.reply(ctx, m.asker, &askReply{Server: s})
}

// remove deactivates the server's actor wherever it lives (closing its session and child process, releasing its
// lease) and then deletes the server with its tools and history, all off the mailbox.
func (r *registryActor) remove(ctx actor.Context, id string) {
	w, sys, self, asker, system, log := r.write, ctx.ActorSystem(), ctx.Self(), ctx.Sender(), r.sys, r.deps.Logger
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		d := &deleted{id: id, asker: asker}
		d.name, d.err = w.Delete(sctx, id, func(ctx context.Context, id string) error {
			return system.deactivate(ctx, id, 0, "server deleted")
		}, func(err error) {
			log.Warn("server actor did not confirm its stop before the delete", "server_id", id, "error", err)
		})
		sys.Root.Send(self, d)
	}()
}

func (r *registryActor) onDeleted(ctx actor.Context, m *deleted) {
	if m.err == nil || errors.Is(m.err, persistence.ErrNotFound) && m.name != "" {
		ctx.ActorSystem().EventStream.Publish(&pb.ServerRemoved{ServerId: m.id, ServerName: m.name})
		r.deps.Logger.Info("server removed", "server_id", m.id, "server", m.name)
	}
	r.reply(ctx, m.asker, &askReply{Err: m.err})
}
