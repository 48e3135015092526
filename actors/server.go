package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

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

// Error codes a server actor puts in ErrorInfo (system-contract.md plus REQUEST_TIMEOUT for 504).
const (
	CodeServerUnavailable = "SERVER_UNAVAILABLE"
	CodeExecutionFailed   = "EXECUTION_FAILED"
	CodeRequestTimeout    = "REQUEST_TIMEOUT"
	// CodeServerBusy: the server already has its maximum of calls in flight (MCP_AGGREGATOR_MAX_CALLS_PER_SERVER).
	CodeServerBusy = "SERVER_BUSY"
	// CodeResponseTooLarge: a backend message exceeded MCP_AGGREGATOR_MAX_MESSAGE_BYTES (or the budget of results in
	// flight); the call fails, the session is kept when it can be.
	CodeResponseTooLarge = "RESPONSE_TOO_LARGE"
	// CodeLoopDetected: the backend is this aggregator, or aggregates it (directly or through other aggregators).
	CodeLoopDetected = "LOOP_DETECTED"
)

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
	callDone     struct {
		id        uint64
		requestID string
	}
	toolsChanged struct{ gen uint64 }
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
	secrets *secrets

	retryTimer  *time.Timer
	healthTimer *time.Timer
	drainTimer  *time.Timer
	healthBusy  bool

	pending map[uint64]context.CancelCauseFunc
	// shuttingDown: the daemon's drain time is over; calls are refused and those in flight were cancelled.
	shuttingDown bool
	byReq        map[string]uint64 // call_id -> pending key, for CancelCall
	nextCall     uint64
	lastOK       atomic.Int64 // unix nanos of the last successful exchange, written by call goroutines
	// progress maps the progress token of a call in flight to the PID that wants its progress notifications;
	// the session's notification handler reads it from the transport's goroutine.
	progress *sync.Map
}

// newServerProps is how the registry spawns a server actor; the id is all it needs, so a cluster can activate it
// as a grain with the server id as identity.
func newServerProps(d *Deps, id string) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &serverActor{deps: d, id: id, pending: map[uint64]context.CancelCauseFunc{}, byReq: map[string]uint64{}, progress: &sync.Map{}}
	})
}

// Receive implements actor.Actor.
func (a *serverActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.started(ctx)
	case *actor.Stopping:
		a.cleanup(true)
	case *actor.Restarting:
		a.cleanup(false)

	case *pb.Connect:
		ctx.Respond(a.connect(m.Reason))
	case *pb.Disconnect:
		ctx.Respond(a.disconnect(m.Force, m.Reason))
	case *pb.Reload:
		// The registry sends Reload without waiting for an answer (an update must not wait on a busy actor): a
		// reply then would only reach dead letters, so the outcome is logged instead.
		ack := a.reload()
		if ctx.Sender() != nil {
			ctx.Respond(ack)
		} else if ack.Error != "" {
			a.log().Error("reload after update failed", "error", ack.Error)
		}
	case *pb.GetStatus:
		ctx.Respond(a.statusReply())
	case *pb.CallTool:
		a.callTool(ctx, m)
	case *pb.ListTools:
		a.listTools(ctx)
	case *openProxy:
		a.openProxy(ctx, m)
	case *pb.CancelCall:
		if id, ok := a.byReq[m.CallId]; ok {
			a.pending[id](nil)
		}
	case *cancelCallsForShutdown:
		a.shuttingDown = true
		for _, cancel := range a.pending {
			cancel(ErrShuttingDown)
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
		delete(a.pending, m.id)
		if m.requestID != "" {
			delete(a.byReq, m.requestID)
		}
		if a.status == persistence.StatusDisconnecting && len(a.pending) == 0 {
			a.finishDisconnect("calls drained")
		}
	case *drainTimeout:
		if m.gen == a.gen && a.status == persistence.StatusDisconnecting {
			a.cancelPending()
			a.finishDisconnect("drain timeout")
		}
	case *toolsListFailed:
		a.onToolsListFailed(m)
	case *toolsChanged:
		if a.sess != nil && m.gen == a.sess.gen {
			a.sys.EventStream.Publish(&pb.ToolsListChanged{ServerId: a.id, ServerName: a.rec.Name})
		}
	}
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

// started loads the server from the store (so that the actor can be activated anywhere from its id alone), resets a
// stale status left by a previous process, and connects when the admin wants the server connected.
func (a *serverActor) started(ctx actor.Context) {
	a.sys, a.self = ctx.ActorSystem(), ctx.Self()
	sctx, cancel := a.storeCtx()
	rec, err := a.deps.Store.GetServer(sctx, a.id)
	cancel()
	if errors.Is(err, persistence.ErrNotFound) {
		ctx.Stop(a.self)
		return
	}
	if err != nil {
		// Let the supervisor retry with backoff: the store may be briefly unavailable.
		panic(fmt.Errorf("load server %s: %w", a.id, err))
	}
	a.rec, a.status = rec, rec.Status
	a.secrets = newSecrets(rec, a.deps.Env)
	if a.status != persistence.StatusDisconnected {
		a.setStatus(persistence.StatusDisconnected, ReasonNoSessionAfterStart, nil)
	}
	if rec.AutoConnect {
		a.startConnect("auto_connect")
	}
}

// transition moves the state machine, refusing transitions the table does not allow.
func (a *serverActor) transition(to, reason string, errMsg *string) bool {
	if err := checkTransition(a.status, to); err != nil {
		a.log().Error("refused state transition", "error", err, "reason", reason)
		return false
	}
	a.setStatus(to, reason, errMsg)
	return true
}

// setStatus persists the change with its history row and publishes it on the event stream.
func (a *serverActor) setStatus(to, reason string, errMsg *string) {
	from := a.status
	a.status = to
	a.deps.Metrics.Transition(to)
	now := time.Now().UTC()
	// The store writes from, reason and error_message into the row's details itself: Details is only for extra
	// fields (setting it to from+reason nested a copy of the row in itself).
	sctx, cancel := a.storeCtx()
	err := a.deps.Store.RecordTransition(sctx, persistence.Transition{
		ServerID: a.id, From: from, To: to, Reason: reason, ErrorMessage: errMsg, At: now,
	})
	cancel()
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		a.log().Error("persist state transition", "error", err, "from", from, "to", to)
	}
	a.log().Info("server state changed", "from", from, "to", to, "reason", reason)
	a.sys.EventStream.Publish(&pb.ServerStatusChanged{
		ServerId: a.id, ServerName: a.rec.Name, From: from, To: to, Reason: reason, AtUnixMs: now.UnixMilli(),
	})
}

func (a *serverActor) setAutoConnect(on bool) {
	if a.rec.AutoConnect == on {
		return
	}
	a.rec.AutoConnect = on
	sctx, cancel := a.storeCtx()
	defer cancel()
	if err := a.deps.Store.SetAutoConnect(sctx, a.id, on); err != nil {
		a.log().Error("persist auto_connect", "error", err)
	}
}

func (a *serverActor) statusReply() *pb.StatusReply {
	return &pb.StatusReply{
		ServerId: a.id, Name: a.rec.Name, Status: a.status, PendingRequests: int32(len(a.pending)),
		ConsecutiveFailures: int32(a.failures), LastError: a.lastError,
	}
}

// cleanup releases everything on stop or before a restart; on stop the status is persisted as DISCONNECTED (the
// admin's auto_connect intent is kept, so a restarted daemon reconnects).
func (a *serverActor) cleanup(stopping bool) {
	a.stopTimer(&a.retryTimer)
	a.stopTimer(&a.drainTimer)
	if a.attempt != nil {
		a.attempt.abandon()
		a.attempt = nil
	}
	a.cancelPending()
	a.closeSession(true)
	if stopping && a.sys != nil && a.status != "" && a.status != persistence.StatusDisconnected {
		a.setStatus(persistence.StatusDisconnected, "actor stopped", nil)
	}
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
