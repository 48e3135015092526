package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v5"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/gopool"
	"github.com/mcpgw/aggregator/internal/retry"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// ProtocolVersion is pinned so a connect costs one round trip against servers that predate server/discover, and so
// that keep-alive pings work (the go-sdk only sends them below 2026-07-28).
const ProtocolVersion = "2025-11-25"

// Version is reported to backends in initialize.
const Version = "0.1.0"

// RequestIDMetaKey is the _meta key under which a call's request id reaches the backend.
const RequestIDMetaKey = "io.mcpgw.aggregator/request_id"

// ReasonNoSessionAfterStart is the reason of the transition that resets a status a previous process (or actor
// incarnation) left behind; it says nothing about the server's current connection, so waiting code ignores it.
const ReasonNoSessionAfterStart = "no session after (re)start"

// Local messages a server actor sends itself from its goroutines; each carries the session generation it belongs
// to so that news about an old session is ignored.
type (
	connectDone struct {
		attempt *connectAttempt
		err     error
	}
	sessionLost struct {
		gen uint64
		err error
	}
	retryTick    struct{ gen uint64 }
	healthTick   struct{ gen uint64 }
	drainTimeout struct{ gen uint64 }
	// callDone: a backend request ended while the actor waits for its requests to end (pendingRequests.watch).
	callDone     struct{}
	toolsChanged struct {
		gen   uint64
		latch *floodguard.Latch
	}
	// firstDiscovered: the first discovery of session gen is stored (or failed, err).
	firstDiscovered struct {
		gen uint64
		err error
	}
	// toolsListFailed: a tools/list of the session failed without a JSON-RPC answer from the backend.
	toolsListFailed struct {
		gen uint64
		err error
	}
	healthResult struct {
		gen        uint64
		ok         bool
		counted    bool // a 4xx answer is a configuration problem: logged, not counted
		responseMs *float64
		err        string
	}
)

// serverActor owns one external server: its session, state machine, failure counter, health timer, retry schedule
// and calls in flight. It never blocks its mailbox on the network: connects, calls and health checks run in
// goroutines that report back by message, so a slow call never delays another one.
type serverActor struct {
	deps *Deps
	id   string
	sys  *actor.ActorSystem
	self *actor.PID

	rec     persistence.Server
	status  string
	gen     uint64
	sess    *liveSession
	attempt *connectAttempt
	retryN  int
	// connectedAt is when the current session connected; a loss before StableAfter keeps the backoff growing.
	connectedAt time.Time
	failures    int
	lastError   string
	// secrets are the resolved secret values of the current config, scrubbed from every error text.
	secrets *backend.Secrets

	retryTimer  *time.Timer
	healthTimer *time.Timer
	drainTimer  *time.Timer
	healthBusy  bool

	pending *pendingRequests
	// shuttingDown: the daemon's drain time is over; calls are refused and those in flight were cancelled.
	shuttingDown bool
	nextCall     uint64
	lastOK       atomic.Int64 // unix nanos of the last successful exchange, written by call goroutines
	// progress maps the progress token of a call in flight to the PID that wants its progress notifications;
	// the session's notification handler reads it from the transport's goroutine.
	progress *sync.Map
	// relay: the calls in flight, for relaying the backend's requests to their clients (server_relay.go).
	relay relayState

	// writes persists transitions, health checks and auto_connect in order, off the mailbox.
	writes *storeWriter
	// Ownership (server_lease.go). lease: this process owns the server (nil: no session may be opened). activating:
	// the registration and the lease are being read, and commands are stashed meanwhile. holder: the process that
	// owns the server instead, when known. leaseTimer: the next request for the lease of a standby.
	lease       *persistence.Lease
	activating  bool
	activations uint64
	stashed     []stashed
	holder      string
	leaseTimer  *time.Timer
	// deadOwner is a departed cluster member whose lease the first activation may take over.
	deadOwner string
	// awaitConnect: calls wait (stashed) for the first connect after activation instead of failing.
	awaitConnect bool
	// leaving is the code commands are refused with once the actor is on its way out (SERVER_MOVED: deactivated
	// or in the wrong place; SERVER_NOT_FOUND). retired: it gave the server up (server_lease.go retire);
	// retiringChildren counts its proxy sessions still stopping; deactivators wait for all of that.
	leaving          string
	retired          bool
	retiringChildren int
	deactivators     []*actor.PID
	// reloads numbers the reloads asked for: only the newest one read is applied.
	reloads uint64
	// users are the callers' own sessions of a per_user server (proxy_user.go).
	users userSessions
	// userProxies are the per-server endpoint's sessions on callers' own credentials, by actor id (proxy_user.go).
	userProxies map[string]userProxy
	// workers run the calls (callTool): the last of a mailbox run on the run's goroutine after it, the others on
	// goroutines that keep their grown stacks from one call to the next.
	workers *callWork
}

// Props is how a placement actor spawns a server actor; the id is all it needs (and, for a takeover, the
// cluster member that left holding the server's lease), so that any node can activate it.
func Props(d *Deps, id, deadOwner string) *actor.Props {
	calls := newCallWork()
	return actor.PropsFromProducer(func() actor.Actor {
		return &serverActor{deps: d, id: id, deadOwner: deadOwner, pending: newPendingRequests(),
			progress: &sync.Map{}, writes: &storeWriter{log: d.Logger}, workers: calls}
	}, actor.WithDispatcher(dispatcher{p: gopool.NewThen(calls.runLeft)}))
}

// Receive implements actor.Actor.
func (a *serverActor) Receive(ctx actor.Context) {
	if _, call := ctx.Message().(*pb.CallTool); !call {
		a.workers.flush() // a call kept for after the run waits for no other work (callWork)
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.started(ctx)
	case *actor.Stopping:
		a.cleanup(true)
	case *actor.Restarting:
		a.cleanup(false)
	case *actor.Terminated:
		a.users.terminated(m.Who)
		delete(a.userProxies, m.Who.Id)
		if a.retired && a.retiringChildren > 0 {
			a.retiringChildren--
			a.ackIfRetired(ctx)
		}
	case *msg.PanicForTest:
		panic("injected failure in the server actor")
	case *activated:
		a.onActivated(ctx, m)
	case *leaseRetry:
		a.leaseTimer = nil
		if a.lease == nil && !a.activating {
			a.activate()
		}
	case *LeaseLost:
		a.onLeaseLost(ctx, m)
	case *pb.Deactivate:
		a.deactivate(ctx, m)
	case *pb.GetStatus:
		switch {
		case a.leaving != "":
			a.refuse(ctx, a.leaving, "")
		case a.activating && a.stash(ctx):
		default:
			// After the writes made so far: a status read right after activation finds the reset row.
			a.respondAfterWrites(ctx, a.statusReply())
		}
	case *pb.CancelCall:
		if !a.pending.cancel(m.CallId) {
			a.unstashCancelled(m.CallId)
		}
	case *pb.EndUserSession:
		a.endUserSession(ctx, m.Subject)
		if ctx.Sender() != nil {
			ctx.Respond(&pb.Ack{}) // the sessions were told to end before anything sent after this answer
		}
	case *msg.CancelCallsForShutdown:
		a.shuttingDown = true
		a.pending.cancelAll(ErrShuttingDown)
	case *pb.Connect, *pb.Disconnect, *pb.Reload, *pb.CallTool, *pb.ListTools, *openProxy, *pb.ListFeatures, *pb.FeatureRequest:
		if a.serving(ctx) {
			a.command(ctx)
		}

	case *connectDone:
		a.onConnectDone(m)
	case *sessionLost:
		a.onSessionLost(m)
	case *retryTick:
		if m.gen == a.gen && a.status == persistence.StatusError {
			a.deps.Metrics.Reconnect(a.rec.Name)
			a.startConnect("retry")
		}
	case *healthTick:
		a.onHealthTick(m)
	case *healthResult:
		a.onHealthResult(m)
	case *callDone:
		// Sent by a request's worker while the actor waits for its requests to end (pendingRequests.watch).
		n := a.pending.len()
		if a.status == persistence.StatusDisconnecting && n == 0 {
			a.finishDisconnect("calls drained")
		}
		if n == 0 {
			a.deactivationDrained(ctx)
		}
	case *drainTimeout:
		if m.gen == a.gen && a.leaving != "" {
			a.deactivationDrained(ctx)
		} else if m.gen == a.gen && a.status == persistence.StatusDisconnecting {
			a.cancelPending()
			a.finishDisconnect("drain timeout")
		}
	case *toolsListFailed:
		a.onToolsListFailed(m)
	case *firstDiscovered:
		a.onFirstDiscovered(m)
	case *reloaded:
		a.onReloaded(m)
	case *featuresListChanged, *resourceUpdated:
		a.onFeatureNotice(m)
	case *toolsChanged:
		m.latch.Clear() // before acting: a later list_changed is passed on again
		if a.sess != nil && m.gen == a.sess.gen {
			a.sys.EventStream.Publish(&pb.ToolsListChanged{ServerId: a.id, ServerName: a.rec.Name})
		}
	}
}

// command runs a command of the admin or a caller on the server this actor owns.
func (a *serverActor) command(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.Connect:
		a.respondAfterWrites(ctx, a.connect(m.Reason))
	case *pb.Disconnect:
		a.respondAfterWrites(ctx, a.disconnect(m.Force, m.Reason))
	case *pb.Reload:
		a.reload(ctx.Sender())
	case *pb.CallTool:
		a.callTool(ctx, m)
	case *pb.ListTools:
		a.listTools(ctx)
	case *openProxy:
		a.openProxy(ctx, m)
	case *pb.ListFeatures:
		a.listFeatures(ctx)
	case *pb.FeatureRequest:
		a.featureRequest(ctx, m)
	}
}

// respondAfterWrites answers the current message once the store writes it caused are made, so that an admin who
// reads the server after a connect or disconnect sees the status the answer named (the writes run off the
// mailbox, in order; see storeWriter).
func (a *serverActor) respondAfterWrites(ctx actor.Context, reply any) {
	sender := ctx.Sender()
	if sender == nil {
		return
	}
	sys := a.sys
	a.writes.enqueue(func() { sys.Root.Send(sender, reply) })
}

func (a *serverActor) log() *slogger { return &slogger{a} }

// slogger prefixes every log line of a server actor with its id and name.
type slogger struct{ a *serverActor }

func (l *slogger) Info(msg string, args ...any) {
	l.a.deps.Logger.Info(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}
func (l *slogger) Warn(msg string, args ...any) {
	l.a.deps.Logger.Warn(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}
func (l *slogger) Error(msg string, args ...any) {
	l.a.deps.Logger.Error(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}

func (a *serverActor) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// started activates the actor: from its id alone it reads the registration and asks for the server's lease, off
// the mailbox (server_lease.go), so that it can be activated on any node and a slow store delays no other actor.
func (a *serverActor) started(ctx actor.Context) {
	a.sys, a.self = ctx.ActorSystem(), ctx.Self()
	a.status = persistence.StatusDisconnected
	a.activate()
}

// transition moves the state machine, refusing transitions the table does not allow.
func (a *serverActor) transition(to, reason string, errMsg *string) bool {
	if err := checkTransition(a.status, to); err != nil {
		a.log().Error("refused state transition", "error", err, "reason", reason)
		return false
	}
	a.setStatus(to, reason, errMsg)
	if to != persistence.StatusDisconnecting && a.leaving == "" {
		a.pending.unwatch() // a disconnect's wait is over (a hand-over's lasts until the actor retires)
	}
	return true
}

// transitionTries bounds the attempts to persist a state change (setStatus), 0.5 s, 1 s and 2 s apart.
const transitionTries = 4

// setStatus moves the actor to the new state at once, and persists the change with its history row (fenced by the
// lease) and then publishes it on the event stream, in order, off the mailbox. Without the lease this process is
// not the owner: the change is only published, for this process's routing table; the owner's row is left alone.
func (a *serverActor) setStatus(to, reason string, errMsg *string) {
	from := a.status
	a.status = to
	if a.awaitConnect && from == persistence.StatusConnecting {
		// The first connect after activation is over: the calls that waited for it run (or are refused) now.
		a.awaitConnect = false
		a.replayStash()
	}
	a.deps.Metrics.Transition(to)
	now := time.Now().UTC()
	a.log().Info("server state changed", "from", from, "to", to, "reason", reason)
	evt := &pb.ServerStatusChanged{ServerId: a.id, ServerName: a.rec.Name, From: from, To: to, Reason: reason, AtUnixMs: now.UnixMilli()}
	fence, store, sys, check := a.lease, a.deps.Store, a.sys, a.writeCheck()
	if fence != nil {
		evt.Epoch, evt.Seq = fence.Epoch, a.deps.Owners.NextSeq()
	}
	router, wait, log := actor.NewPID(sys.Address(), msg.RouterName), a.deps.Config.AskTimeout, a.deps.Logger
	a.writes.enqueue(func() {
		// Read-your-writes: this node's routing table has the change before the row, the history, the event stream
		// (console, other nodes) show it. A router that does not answer in time delays it no further.
		if _, err := sys.Root.RequestFuture(router, &msg.ApplyStatus{Evt: evt}, wait).Result(); err != nil && !errors.Is(err, actor.ErrDeadLetter) {
			log.Warn("router slow to apply a status change", "server_id", evt.ServerId, "to", to, "error", err)
		}
		if fence != nil {
			// The store writes from, reason and error_message into the row's details itself: Details is only for
			// extra fields (setting it to from+reason nested a copy of the row in itself). A write that fails for
			// another reason than the lease is tried again a few times (the writes after it wait, in order): a
			// store busy for longer than one write's deadline must not leave the row in the state before.
			_, err := retry.Do(context.Background(), retry.Backoff{Initial: 500 * time.Millisecond, Multiplier: 2, Jitter: 0.2}.Schedule(), retry.Options{MaxTries: transitionTries}, func() (struct{}, error) {
				sctx, cancel := a.storeCtx()
				defer cancel()
				err := store.RecordTransition(sctx, persistence.Transition{
					ServerID: a.id, From: from, To: to, Reason: reason, ErrorMessage: errMsg, At: now, Fence: fence,
				})
				if errors.Is(err, persistence.ErrLeaseLost) || errors.Is(err, persistence.ErrNotFound) {
					return struct{}{}, backoff.Permanent(err)
				}
				return struct{}{}, err
			})
			check(err, fence, "persist state transition", "from", from, "to", to)
		}
		sys.EventStream.Publish(evt)
	})
}

// writeCheck returns what a write run by a.writes calls with its outcome: it logs a failure and, when the write
// failed because the lease is gone, tells the actor. It holds copies of what it needs, not the actor.
func (a *serverActor) writeCheck() func(err error, fence *persistence.Lease, what string, args ...any) {
	log := a.deps.Logger.With("server_id", a.id, "server", a.rec.Name)
	sys, self := a.sys, a.self
	return func(err error, fence *persistence.Lease, what string, args ...any) {
		switch {
		case err == nil, errors.Is(err, persistence.ErrNotFound):
		case errors.Is(err, persistence.ErrLeaseLost) && fence != nil:
			sys.Root.Send(self, &LeaseLost{Epoch: fence.Epoch, Why: what + ": " + err.Error()})
		default:
			log.Error(what, append([]any{"error", err}, args...)...)
		}
	}
}

// setAutoConnect records the admin's intent (a registration field, written whoever owns the session).
func (a *serverActor) setAutoConnect(on bool) {
	if a.rec.AutoConnect == on {
		return
	}
	a.rec.AutoConnect = on
	store, check := a.deps.Store, a.writeCheck()
	a.writes.enqueueKeyed("auto_connect", func() {
		sctx, cancel := a.storeCtx()
		defer cancel()
		check(store.SetAutoConnect(sctx, a.id, on), nil, "persist auto_connect")
	})
}

func (a *serverActor) statusReply() *pb.StatusReply {
	return &pb.StatusReply{
		ServerId: a.id, Name: a.rec.Name, Status: a.status, PendingRequests: int32(a.pending.len()),
		ConsecutiveFailures: int32(a.failures), LastError: a.lastError,
	}
}

// cleanup releases everything on stop or before a restart. On stop (the node stops, or a retired actor's grace
// ended) the server is given up: DISCONNECTED persisted (the admin's auto_connect intent is kept, so a restarted
// daemon reconnects) and the lease released, so that another process may take the server over at once. A restart
// keeps the lease: the new incarnation activates again and, being the same owner, gets it back with the same epoch.
func (a *serverActor) cleanup(stopping bool) {
	if !stopping {
		a.stopTimer(&a.retryTimer)
		a.stopTimer(&a.drainTimer)
		a.stopTimer(&a.leaseTimer)
		if a.attempt != nil {
			a.attempt.abandon()
			a.attempt = nil
		}
		a.cancelPending()
		a.closeSession(true)
		ctx, cancel := a.storeCtx()
		defer cancel()
		a.writes.flush(ctx)
		return
	}
	code := a.leaving
	if code == "" {
		code = errcode.ServerMoved // the node stops: in a cluster the server is activated elsewhere
	}
	a.dropStash(code, "")
	if !a.retired {
		a.giveUp("actor stopped")
	}
	for _, pid := range a.deactivators {
		a.sys.Root.Send(pid, &pb.Ack{})
	}
	a.deactivators = nil
}

func (a *serverActor) stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

func ptrStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
