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

// The server actor's side of single ownership (see ownership.go). An actor is activated from its server id alone:
// it reads the registration and asks for the server's lease off its mailbox, stashing the commands that arrive
// meanwhile. With the lease it is the owner for as long as it lives: it resets a status an earlier owner left
// behind, connects when the admin wants the server connected, fences every write with the lease, and releases the
// lease when it stops. Without it (another live process holds the lease) it is a standby: it opens no session,
// answers commands with SERVER_UNAVAILABLE naming the owner, and asks again when that lease would lapse. Losing the
// lease closes the session at once (two sessions, two stdio children, must never run together).

// maxStash bounds the commands an actor keeps while it activates; beyond it they are answered unavailable.
const maxStash = 1024

// activated is what the activating goroutine reports: the registration, and the lease or why there is none.
type activated struct {
	rec   persistence.Server
	lease persistence.Lease
	// loadErr: the registration could not be read; leaseErr: the lease was not granted (ErrLeaseHeld with the
	// holder's lease in lease, or a store error).
	loadErr, leaseErr error
	attempt           uint64
}

// stashed is a command that arrived before the actor knew whether it owns its server.
type stashed struct {
	msg    any
	sender *actor.PID
}

// activate reads the registration and asks for the lease in a goroutine; the outcome comes back as activated.
func (a *serverActor) activate() {
	a.activating = true
	a.activations++
	owners, store, id, sys, self, n := a.deps.owners, a.deps.Store, a.id, a.sys, a.self, a.activations
	timeout := a.deps.Config.AskTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		m := &activated{attempt: n}
		if m.rec, m.loadErr = store.GetServer(ctx, id); m.loadErr == nil {
			m.lease, m.leaseErr = owners.acquire(ctx, id)
		}
		sys.Root.Send(self, m)
	}()
}

func (a *serverActor) onActivated(ctx actor.Context, m *activated) {
	if m.attempt != a.activations {
		return
	}
	a.activating = false
	switch {
	case errors.Is(m.loadErr, persistence.ErrNotFound), errors.Is(m.leaseErr, persistence.ErrNotFound):
		a.dropStash("server " + a.id + " was removed")
		ctx.Stop(a.self) // deleted meanwhile
		return
	case m.loadErr != nil:
		a.log().Warn("cannot load the server's registration; retrying", "error", m.loadErr)
		a.dropStash("the store is unavailable: " + m.loadErr.Error())
		a.scheduleActivation(a.deps.owners.ttl / 3)
		return
	}
	a.rec = m.rec
	a.secrets = newSecrets(m.rec, a.deps.Env)
	switch {
	case m.leaseErr == nil:
		a.becomeOwner(m.lease)
	case errors.Is(m.leaseErr, persistence.ErrLeaseHeld):
		if a.holder != m.lease.Owner {
			a.log().Info("server is served by another aggregator process on the same store; this one stands by",
				"owner", m.lease.Owner)
		}
		a.holder = m.lease.Owner
		a.status = m.rec.Status // the owner's, as stored
		a.scheduleActivation(a.deps.owners.retryDelay(m.lease.ExpiresAt))
	default:
		a.log().Warn("cannot ask the store for the server's lease; retrying", "error", m.leaseErr)
		a.status = persistence.StatusDisconnected
		a.scheduleActivation(a.deps.owners.ttl / 3)
	}
	a.replayStash(ctx)
}

// becomeOwner starts serving the server: the status an earlier owner (or this process before a restart) left
// behind is reset, and the server connects when the admin wants it connected.
func (a *serverActor) becomeOwner(l persistence.Lease) {
	a.lease, a.holder = &l, ""
	a.status = a.rec.Status
	if a.status == "" {
		a.status = persistence.StatusDisconnected
	}
	if a.status != persistence.StatusDisconnected {
		// This process has no session yet: whatever the row says was true of an earlier session.
		a.setStatus(persistence.StatusDisconnected, ReasonNoSessionAfterStart, nil)
	}
	if a.rec.AutoConnect {
		a.startConnect("auto_connect")
	}
}

// scheduleActivation asks for the lease again after d.
func (a *serverActor) scheduleActivation(d time.Duration) {
	a.stopTimer(&a.leaseTimer)
	sys, self := a.sys, a.self
	a.leaseTimer = time.AfterFunc(d, func() { sys.Root.Send(self, &leaseRetry{}) })
}

// stash keeps a command until the actor knows whether it owns its server; false when the stash is full.
func (a *serverActor) stash(ctx actor.Context) bool {
	if len(a.stashed) >= maxStash {
		return false
	}
	a.stashed = append(a.stashed, stashed{msg: ctx.Message(), sender: ctx.Sender()})
	return true
}

// replayStash sends the stashed commands to the actor again, in order, with their original senders.
func (a *serverActor) replayStash(ctx actor.Context) {
	for _, s := range a.stashed {
		ctx.RequestWithCustomSender(a.self, s.msg, s.sender)
	}
	a.stashed = nil
}

// dropStash answers every stashed command that expects an answer with SERVER_UNAVAILABLE.
func (a *serverActor) dropStash(why string) {
	for _, s := range a.stashed {
		if s.sender != nil {
			a.sys.Root.Send(s.sender, a.notServing(s.msg, why))
		}
	}
	a.stashed = nil
}

// unstashCancelled forgets a stashed call whose caller has left; true when there was one.
func (a *serverActor) unstashCancelled(callID string) bool {
	for i, s := range a.stashed {
		if c, ok := s.msg.(*pb.CallTool); ok && c.CallId == callID {
			a.stashed = append(a.stashed[:i], a.stashed[i+1:]...)
			return true
		}
	}
	return false
}

// serving reports whether the actor may act on a command now: it owns the server. While it activates the command
// is stashed; a standby answers it at once with SERVER_UNAVAILABLE naming the owner. In both cases it returns false.
func (a *serverActor) serving(ctx actor.Context) bool {
	if a.lease != nil {
		return true
	}
	if a.activating {
		if !a.stash(ctx) && ctx.Sender() != nil {
			ctx.Respond(a.notServing(ctx.Message(), "too many requests while the server's actor activates"))
		}
		return false
	}
	if ctx.Sender() != nil {
		ctx.Respond(a.notServing(ctx.Message(), ""))
	}
	return false
}

// notServing is the answer to msg from an actor that does not own its server.
func (a *serverActor) notServing(msg any, why string) any {
	if why == "" {
		why = "this aggregator process does not hold the server's lease"
		if a.holder != "" {
			why = fmt.Sprintf("served by another aggregator process (%s) on the same store", a.holder)
		}
	}
	info := &pb.ErrorInfo{Code: CodeServerUnavailable, ServerName: a.rec.Name, ServerStatus: a.status,
		Message: fmt.Sprintf("Server unavailable: %s is %s", a.name(), why)}
	switch msg.(type) {
	case *pb.CallTool:
		return &pb.CallToolReply{Error: info}
	case *pb.ListTools:
		return &pb.ListToolsReply{Error: info}
	case *pb.Reload:
		return &pb.Ack{Error: info.Message}
	}
	return &askReply{err: &UnavailableError{Server: ServerEntry{ID: a.id, Name: a.rec.Name, Status: a.status}, Detail: info.Message}}
}

// name is the server's name, or its id before the registration is read.
func (a *serverActor) name() string {
	if a.rec.Name != "" {
		return a.rec.Name
	}
	return a.id
}

// onLeaseLost gives the session up: another process may own the server now, and two sessions (two stdio children)
// must never run at once. Calls in flight are cancelled; the actor stands by and asks for the lease again.
func (a *serverActor) onLeaseLost(m *leaseLost) {
	if a.lease == nil || a.lease.Epoch != m.epoch {
		return
	}
	a.deps.owners.drop(a.id, m.epoch)
	a.lease = nil
	a.log().Warn("lost the server's lease: closing its session", "reason", m.why)
	if a.attempt != nil {
		a.attempt.abandon()
		a.attempt = nil
	}
	a.stopTimer(&a.retryTimer)
	a.stopTimer(&a.drainTimer)
	a.cancelPending()
	a.closeSession(false)
	if a.status != persistence.StatusDisconnected {
		// Not persisted (no lease: the next owner writes its own state); published for this process's routes.
		a.setStatus(persistence.StatusDisconnected, "lease lost: "+m.why, nil)
	}
	a.scheduleActivation(a.deps.owners.ttl / 2)
}
