package server

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The server actor's side of single ownership (see placement.Leases) and placement (placement.Lookup). An actor is activated
// from its server id alone: it reads the registration and asks for the server's lease off its mailbox, stashing the
// commands that arrive meanwhile. With the lease it is the owner for as long as it lives: it resets a status an
// earlier owner left behind, connects when the admin wants the server connected, fences every write with the
// lease, and releases the lease when it stops. Without it:
//   - in a cluster, when another member holds the lease, the actor is in the wrong place: it answers SERVER_MOVED
//     (the caller looks the server up again) and stops;
//   - otherwise (a process outside the cluster holds it: `aggregator stdio`, or a daemon on the same store without
//     cluster settings) it stands by: it opens no session, answers with SERVER_UNAVAILABLE naming the owner, and
//     asks again when that lease would lapse.
// Losing the lease closes the session at once (two sessions, two stdio children, must never run together).
// Deactivate (a delete, or a node handing its servers over) stops the actor after its calls in flight drained.

// LeaseLost tells a server actor that the lease of that epoch is no longer its own.
type LeaseLost struct {
	Epoch int64
	Why   string
}

// leaseRetry makes a server actor that does not own its server ask for the lease again.
type leaseRetry struct{}

// activated is what the activating goroutine reports: the registration, and the lease or why there is none.
type activated struct {
	rec   persistence.Server
	lease persistence.Lease
	// loadErr: the registration could not be read; leaseErr: the lease was not granted (ErrLeaseHeld with the
	// holder's lease in lease, or a store error).
	loadErr, leaseErr error
	attempt           uint64
}

// stashed is a command kept for later (placement.Stashed).
type stashed = placement.Stashed

// activate reads the registration and asks for the lease in a goroutine; the outcome comes back as activated.
func (a *serverActor) activate() {
	a.activating = true
	a.activations++
	owners, store, id, sys, self, n, from := a.deps.Owners, a.deps.Store, a.id, a.sys, a.self, a.activations, a.deadOwner
	a.deadOwner = "" // a takeover is for the first attempt only
	timeout := a.deps.Config.AskTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		m := &activated{attempt: n}
		if m.rec, m.loadErr = store.GetServer(ctx, id); m.loadErr == nil {
			m.lease, m.leaseErr = owners.Acquire(ctx, id, from)
		}
		sys.Root.Send(self, m)
	}()
}

func (a *serverActor) onActivated(ctx actor.Context, m *activated) {
	if m.attempt != a.activations {
		return
	}
	a.activating = false
	if a.retired {
		// Retired while it asked (its node dropped out of the membership, a hand-over): the lease it got goes back.
		if m.loadErr == nil && m.leaseErr == nil {
			ctx, cancel := a.storeCtx()
			defer cancel()
			if err := a.deps.Owners.Release(ctx, m.lease); err != nil {
				a.log().Warn("release lease", "error", err)
			}
		}
		return
	}
	verdict := placement.Decide(a.deps.Members, a.deps.NodeID, m.lease, m.loadErr, m.leaseErr)
	switch verdict {
	case placement.Gone:
		a.retire(ctx, errcode.ServerNotFound, "server "+a.id+" does not exist")
		return
	case placement.RetryLoad:
		a.log().Warn("cannot load the server's registration; retrying", "error", m.loadErr)
		a.dropStash(errcode.ServerUnavailable, "the store is unavailable: "+m.loadErr.Error())
		a.scheduleActivation(a.deps.Owners.AskAgain(verdict, m.lease))
		return
	}
	a.rec = m.rec
	a.secrets = backend.NewSecrets(m.rec, a.deps.Env)
	switch verdict {
	case placement.Own:
		a.becomeOwner(m.lease)
	case placement.Moved:
		a.retire(ctx, errcode.ServerMoved, "served by cluster member "+m.lease.Owner)
		return
	case placement.StandBy:
		if a.holder != m.lease.Owner {
			a.log().Info("server is served by another aggregator process on the same store; this one stands by",
				"owner", m.lease.Owner)
		}
		a.holder = m.lease.Owner
		a.status = m.rec.Status // the owner's, as stored
		a.scheduleActivation(a.deps.Owners.AskAgain(verdict, m.lease))
	default:
		a.log().Warn("cannot ask the store for the server's lease; retrying", "error", m.leaseErr)
		a.status = persistence.StatusDisconnected
		a.scheduleActivation(a.deps.Owners.AskAgain(verdict, m.lease))
	}
	a.replayStash()
}

// retire takes the actor out of service for good: it answers every stashed and future command with code, gives
// the server up (calls in flight cancelled, session and child closed, DISCONNECTED persisted while it still holds
// the lease, lease released), leaves the placement's table (a new activation of the server gets a fresh actor),
// stops its proxy sessions, and then tells whoever waits for it (Deactivate). It lingers for retireGrace answering
// with code, so that callers that still address it hear why and look the server up again, and then stops.
func (a *serverActor) retire(ctx actor.Context, code, why string) {
	a.leaving = code
	a.dropStash(code, why)
	if a.retired {
		a.ackIfRetired(ctx)
		return
	}
	a.retired = true
	a.giveUp("actor retired: " + code)
	ctx.Send(ctx.Parent(), &msg.ServerRetired{ID: a.id, PID: a.self})
	for _, child := range ctx.Children() {
		a.retiringChildren++
		ctx.Stop(child)
	}
	a.ackIfRetired(ctx)
	sys, self := a.sys, a.self
	time.AfterFunc(retireGrace(a.deps), func() { sys.Root.Poison(self) })
}

// retireGrace is how long a retired actor keeps answering before it stops: longer than any ask waits.
func retireGrace(d *Deps) time.Duration { return 2 * d.Config.AskTimeout }

// giveUp releases what the actor holds of the server: its attempt, calls, session (and child process), and, as the
// owner, its status (persisted DISCONNECTED) and lease. It blocks the mailbox while a stdio child exits.
func (a *serverActor) giveUp(reason string) {
	a.stopTimer(&a.retryTimer)
	a.stopTimer(&a.drainTimer)
	a.stopTimer(&a.leaseTimer)
	a.stopTimer(&a.healthTimer)
	if a.attempt != nil {
		a.attempt.abandon()
		a.attempt = nil
	}
	a.cancelPending()
	a.closeSession(true)
	if a.lease != nil && a.status != "" && a.status != persistence.StatusDisconnected {
		a.setStatus(persistence.StatusDisconnected, reason, nil)
	}
	// What this actor wrote is persisted before the next owner writes.
	ctx, cancel := a.storeCtx()
	defer cancel()
	a.writes.flush(ctx)
	if a.lease != nil {
		if err := a.deps.Owners.Release(ctx, *a.lease); err != nil {
			a.log().Warn("release lease", "error", err)
		}
		a.lease = nil
	}
}

// ackIfRetired tells the askers of Deactivate that the actor is out of service, once its proxy sessions stopped.
func (a *serverActor) ackIfRetired(ctx actor.Context) {
	if !a.retired || a.retiringChildren > 0 {
		return
	}
	for _, pid := range a.deactivators {
		ctx.Send(pid, &pb.Ack{})
	}
	a.deactivators = nil
}

// becomeOwner starts serving the server: the status an earlier owner (or this process before a restart) left
// behind is reset, and the server connects when the admin wants it connected. Calls that arrive while that first
// connect runs wait for it (within their deadline) rather than fail: after a restart, a failover or a hand-over,
// the server is about to be back.
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
	if a.deps.Members != nil && a.deps.Classifies {
		// In a cluster the owner classifies what an earlier owner left unclassified (the classifier actor in package actors).
		a.sys.Root.Send(actor.NewPID(a.sys.Address(), msg.ClassifierName), &msg.ScanServer{ID: a.id})
	}
	if a.rec.AutoConnect {
		a.startConnect("auto_connect")
		a.awaitConnect = a.status == persistence.StatusConnecting
	}
}

// scheduleActivation asks for the lease again after d.
func (a *serverActor) scheduleActivation(d time.Duration) {
	a.stopTimer(&a.leaseTimer)
	sys, self := a.sys, a.self
	a.leaseTimer = time.AfterFunc(d, func() { sys.Root.Send(self, &leaseRetry{}) })
}

// stash keeps a command for later; false when the stash is full.
func (a *serverActor) stash(ctx actor.Context) bool {
	if len(a.stashed) >= placement.MaxStash {
		return false
	}
	a.stashed = append(a.stashed, stashed{Msg: ctx.Message(), Sender: ctx.Sender()})
	return true
}

// replayStash sends the stashed commands still awaited (placement.Live) to the actor again, in order, with their
// original senders.
func (a *serverActor) replayStash() {
	for _, s := range placement.Live(a.stashed, time.Now()) {
		a.sys.Root.RequestWithCustomSender(a.self, s.Msg, s.Sender)
	}
	a.stashed = nil
}

// dropStash answers every stashed command that expects an answer with an error of that code.
func (a *serverActor) dropStash(code, why string) {
	for _, s := range a.stashed {
		if s.Sender != nil {
			a.sys.Root.Send(s.Sender, a.refusal(s.Msg, code, why))
		}
	}
	a.stashed = nil
}

// unstashCancelled forgets a stashed call whose caller has left; true when there was one.
func (a *serverActor) unstashCancelled(callID string) (found bool) {
	a.stashed, found = placement.Unstash(a.stashed, callID)
	return found
}

// serving reports whether the actor may act on a command now: it owns the server and is not leaving it. While it
// activates, or while a call waits for the first connect after activation, the command is stashed; otherwise the
// actor answers it at once (SERVER_MOVED while leaving, SERVER_UNAVAILABLE naming the owner while standing by).
func (a *serverActor) serving(ctx actor.Context) bool {
	adm := placement.Admission{Leaving: a.leaving, Owner: a.lease != nil, Activating: a.activating, Session: a.sess != nil,
		AwaitConnect: a.awaitConnect, Connecting: a.status == persistence.StatusConnecting}
	verdict, code, full := adm.Admit(ctx.Message())
	switch verdict {
	case placement.Serve:
		return true
	case placement.Keep:
		if !a.stash(ctx) {
			a.refuse(ctx, code, full)
		}
		return false
	}
	a.refuse(ctx, code, "")
	return false
}

// refuse answers the current command, when someone waits for the answer.
func (a *serverActor) refuse(ctx actor.Context, code, why string) {
	if ctx.Sender() != nil {
		ctx.Respond(a.refusal(ctx.Message(), code, why))
	}
}

// refusal is the answer to in that the actor did not run (placement.Refusal); a command that expects no reply of
// its own gets the error in a msg.Reply.
func (a *serverActor) refusal(in any, code, why string) any {
	reply, info := placement.Refusal(in, code, why, placement.Refused{ID: a.id, Name: a.rec.Name, Status: a.status, Holder: a.holder})
	if reply == nil {
		return &msg.Reply{Err: InfoError(a.id, info)}
	}
	return reply
}

// InfoError turns a refusal into the error Control returns: ErrNotFound, or an UnavailableError.
func InfoError(id string, info *pb.ErrorInfo) error {
	if info.Code == errcode.ServerNotFound {
		return fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
	}
	return &routing.UnavailableError{Server: routing.ServerEntry{ID: id, Name: info.ServerName, Status: info.ServerStatus}, Detail: info.Message}
}

// onLeaseLost gives the session up: another process may own the server now, and two sessions (two stdio children)
// must never run at once. Calls in flight are cancelled. In a cluster the actor retires (the lookup finds the new
// owner); otherwise it stands by and asks for the lease again.
func (a *serverActor) onLeaseLost(ctx actor.Context, m *LeaseLost) {
	if a.lease == nil || a.lease.Epoch != m.Epoch {
		return
	}
	a.deps.Owners.Drop(a.id, m.Epoch)
	a.lease = nil
	a.log().Warn("lost the server's lease: closing its session", "reason", m.Why)
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
		a.setStatus(persistence.StatusDisconnected, "lease lost: "+m.Why, nil)
	}
	if v := placement.AfterLoss(a.deps.Members); v == placement.Moved {
		a.retire(ctx, errcode.ServerMoved, "")
	} else {
		a.scheduleActivation(a.deps.Owners.AskAgain(v, persistence.Lease{}))
	}
}

// deactivate retires the actor at an admin's or the node's request (a delete, a hand-over): new commands are
// answered SERVER_MOVED at once; calls in flight may finish for up to drain (0: they are cancelled); then it
// retires. The asker gets its Ack once the session is closed and the lease released.
func (a *serverActor) deactivate(ctx actor.Context, m *pb.Deactivate) {
	if ctx.Sender() != nil {
		a.deactivators = append(a.deactivators, ctx.Sender())
	}
	drain := time.Duration(m.DrainMs) * time.Millisecond
	if a.retired || a.pending.watch() == 0 || drain <= 0 { // watched: each request's end tells the actor (callDone)
		a.retire(ctx, errcode.ServerMoved, "")
		return
	}
	a.leaving = errcode.ServerMoved
	a.dropStash(errcode.ServerMoved, "")
	a.log().Info("handing the server over: waiting for calls in flight", "calls", a.pending.len(), "drain", drain.String())
	a.stopTimer(&a.drainTimer)
	gen := a.gen
	a.drainTimer = time.AfterFunc(drain, func() { a.sys.Root.Send(a.self, &drainTimeout{gen: gen}) })
}

// deactivationDrained retires an actor that was waiting for its calls in flight to end before leaving.
func (a *serverActor) deactivationDrained(ctx actor.Context) {
	if a.leaving != "" && !a.retired && a.deactivators != nil {
		a.retire(ctx, a.leaving, "")
	}
}
