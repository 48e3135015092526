package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

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
	// askReply answers every ask made of the node's own actors (registry, router, discovery, indexer, proxy
	// actors): an acknowledgement, the server a registration or update produced, a spawned actor, or the error
	// (System.askActor returns it as the error).
	askReply struct {
		server   persistence.Server
		replayed bool // a keyed registration answered from the store
		pid      *actor.PID
		err      error
	}
)

// registryActor carries out the admin's registrations, updates and deletes on this node: it writes the store (the
// server limit is decided there, for every node), publishes what changed, has the server activated where the
// lookup places it (when it should connect), tells the server's actor about a changed registration wherever it
// lives, and deactivates it before a delete. Its store writes and the waits on other actors run on goroutines that
// report back by message, so a slow database or a busy server delays the admin request that waits for it and
// nothing else.
type registryActor struct {
	deps *Deps
	sys  *System
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
	return actor.PropsFromProducer(func() actor.Actor { return &registryActor{deps: d, sys: s} }, s.guardian)
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

// storeTimeout bounds one store operation of an actor.
const storeTimeout = 10 * time.Second

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// register writes the new server's row off the mailbox (under key when not nil); onCreated publishes it and has
// it activated.
func (r *registryActor) register(ctx actor.Context, req RegisterRequest, key *persistence.IdempotencyKey) {
	s := persistence.Server{
		Name: req.Name, Description: req.Description, TransportType: req.TransportType,
		ConnectionConfig: req.ConnectionConfig, HealthCheckURL: req.HealthCheckURL,
		AutoConnect: req.AutoConnect, Status: persistence.StatusDisconnected,
		Policy:         persistence.ToolPolicy{Pinning: req.Pinning == nil || *req.Pinning, PinNewTools: req.PinNewTools},
		CredentialMode: req.CredentialMode, UserCredential: req.UserCredential,
	}
	if s.Policy.PinNewTools == "" {
		s.Policy.PinNewTools = persistence.PinNewServe
	}
	if req.Filter != nil {
		s.Policy.Filter = *req.Filter
	}
	store, max, sys, self, asker := r.deps.Store, r.deps.Config.MaxServers, ctx.ActorSystem(), ctx.Self(), ctx.Sender()
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		var replayed bool
		var err error
		if key != nil {
			replayed, err = store.CreateServerIdempotent(sctx, &s, max, *key)
		} else {
			err = store.CreateServer(sctx, &s, max)
		}
		if errors.Is(err, persistence.ErrLimitReached) {
			err = fmt.Errorf("%w: %w", ErrMaxServers, err)
		}
		sys.Root.Send(self, &created{server: s, replayed: replayed, err: err, asker: asker})
	}()
}

func (r *registryActor) onCreated(ctx actor.Context, m *created) {
	if m.err != nil {
		r.reply(ctx, m.asker, &askReply{err: m.err})
		return
	}
	s := m.server
	if m.replayed {
		// The first request registered it (and had it activated, or a restart does): nothing changes.
		r.deps.Logger.Info("server registration replayed", "server_id", s.ID, "server", s.Name)
		r.reply(ctx, m.asker, &askReply{server: s, replayed: true})
		return
	}
	ctx.ActorSystem().EventStream.Publish(&pb.ServerUpdated{ServerId: s.ID, NewName: s.Name})
	if s.AutoConnect {
		// The actor enters CONNECTING as its first act; say so now rather than race it.
		s.Status = persistence.StatusConnecting
		go r.sys.activateSoon(s.ID)
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

// update writes the patch off the mailbox; onUpdated publishes it and has the server's actor reload.
func (r *registryActor) update(ctx actor.Context, m *updateMsg) {
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
	go r.sys.tellActive(s.ID, &pb.Reload{})
	r.reply(ctx, m.asker, &askReply{server: s})
}

// remove deactivates the server's actor wherever it lives (closing its session and child process, releasing its
// lease) and then deletes the server with its tools and history, all off the mailbox.
func (r *registryActor) remove(ctx actor.Context, id string) {
	store, sys, self, asker, system := r.deps.Store, ctx.ActorSystem(), ctx.Self(), ctx.Sender(), r.sys
	go func() {
		d := &deleted{id: id, asker: asker}
		sctx, cancel := storeCtx()
		defer cancel()
		s, err := store.GetServer(sctx, id)
		if err != nil {
			d.err = err
			sys.Root.Send(self, d)
			return
		}
		d.name = s.Name
		if err := system.deactivate(sctx, id, 0, "server deleted"); err != nil {
			r.deps.Logger.Warn("server actor did not confirm its stop before the delete", "server_id", id, "error", err)
		}
		d.err = store.DeleteServer(sctx, id)
		sys.Root.Send(self, d)
	}()
}

func (r *registryActor) onDeleted(ctx actor.Context, m *deleted) {
	if m.err == nil || errors.Is(m.err, persistence.ErrNotFound) && m.name != "" {
		ctx.ActorSystem().EventStream.Publish(&pb.ServerRemoved{ServerId: m.id, ServerName: m.name})
		r.deps.Logger.Info("server removed", "server_id", m.id, "server", m.name)
	}
	r.reply(ctx, m.asker, &askReply{err: m.err})
}
