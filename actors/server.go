package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/metrics"
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

// callObject answers a CallTool with want_object from a caller on the same node: the result as the go-sdk object.
type callObject struct {
	reply  *pb.CallToolReply
	result *mcp.CallToolResult
}

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
		att *connectAttempt
		err error
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

// connectAttempt hands a session from the connecting goroutine to the actor. Whoever loses the race closes it, so
// no session (and no child process) is left behind when the actor gives up on an attempt or stops meanwhile.
type connectAttempt struct {
	gen       uint64
	b         *built
	cancel    context.CancelFunc
	timer     *time.Timer
	mu        sync.Mutex
	abandoned bool
	sess      *mcp.ClientSession
}

// handOver runs connect and hands the session to the attempt's owner. When the owner abandoned the attempt
// meanwhile, the session is closed and ok is false. A failure after ctx ended is reported as a timeout.
func (c *connectAttempt) handOver(ctx context.Context, timeout time.Duration, connect func() (*mcp.ClientSession, error)) (ok bool, err error) {
	sess, err := connect()
	c.timer.Stop()
	c.mu.Lock()
	if c.abandoned {
		c.mu.Unlock()
		if sess != nil {
			_ = sess.Close()
		}
		return false, nil
	}
	c.sess = sess
	c.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("connection timed out after %s: %w", timeout, err)
	}
	return true, err
}

// abandon makes the attempt's session, now or later, be closed instead of used.
func (c *connectAttempt) abandon() {
	c.mu.Lock()
	c.abandoned = true
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	c.timer.Stop()
	if s != nil {
		_ = s.Close()
	}
	c.cancel()
	c.b.kill()
	c.b.closeIdle()
}

// liveSession is the connected session and what has to be released with it.
type liveSession struct {
	gen     uint64
	session *mcp.ClientSession
	b       *built
	cancel  context.CancelFunc
	closing atomic.Bool
}

// close ends the session, the stdio child's whole process group and pooled HTTP connections.
func (l *liveSession) close() {
	l.closing.Store(true)
	_ = l.session.Close()
	l.cancel()
	l.b.kill()
	l.b.closeIdle()
}

// serverActor owns one external server: its session, state machine, failure counter, health timer, retry schedule
// and calls in flight. It never blocks its mailbox on the network: connects, calls and health checks run in
// goroutines that report back by message, so a slow call never delays another one.
type serverActor struct {
	d    *Deps
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
		return &serverActor{d: d, id: id, pending: map[uint64]context.CancelCauseFunc{}, byReq: map[string]uint64{}, progress: &sync.Map{}}
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
			a.d.Metrics.Reconnect(a.rec.Name)
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
	l.a.d.Logger.Info(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}
func (l *slogger) Warn(msg string, args ...any) {
	l.a.d.Logger.Warn(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}
func (l *slogger) Error(msg string, args ...any) {
	l.a.d.Logger.Error(msg, append([]any{"server_id", l.a.id, "server", l.a.rec.Name}, args...)...)
}

func (a *serverActor) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// started loads the server from the store (so that the actor can be activated anywhere from its id alone), resets a
// stale status left by a previous process, and connects when the admin wants the server connected.
func (a *serverActor) started(ctx actor.Context) {
	a.sys, a.self = ctx.ActorSystem(), ctx.Self()
	sctx, cancel := a.storeCtx()
	rec, err := a.d.Store.GetServer(sctx, a.id)
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
	a.secrets = newSecrets(rec, a.d.Env)
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
	a.d.Metrics.Transition(to)
	now := time.Now().UTC()
	// The store writes from, reason and error_message into the row's details itself: Details is only for extra
	// fields (setting it to from+reason nested a copy of the row in itself).
	sctx, cancel := a.storeCtx()
	err := a.d.Store.RecordTransition(sctx, persistence.Transition{
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
	if err := a.d.Store.SetAutoConnect(sctx, a.id, on); err != nil {
		a.log().Error("persist auto_connect", "error", err)
	}
}

func (a *serverActor) connect(reason string) *pb.ConnectReply {
	r := &pb.ConnectReply{ServerId: a.id}
	switch a.status {
	case persistence.StatusConnected, persistence.StatusDegraded:
		r.Status, r.Message = a.status, "Server already connected"
		return r
	case persistence.StatusConnecting:
		r.Status, r.Message = a.status, "Connection already in progress"
		return r
	case persistence.StatusDisconnecting:
		a.cancelPending()
		a.finishDisconnect("reconnect requested")
	}
	a.setAutoConnect(true)
	a.stopTimer(&a.retryTimer)
	a.retryN = 0
	if reason == "" {
		reason = "connect()"
	}
	a.startConnect(reason)
	r.Status, r.Message = a.status, "Connection initiated"
	return r
}

// startConnect enters CONNECTING and connects in a goroutine, bounded by the connection timeout.
func (a *serverActor) startConnect(reason string) {
	if !a.transition(persistence.StatusConnecting, reason, nil) {
		return
	}
	a.gen++
	b, err := buildTransport(a.rec, a.d, a.d.newGuard())
	if err != nil {
		a.connectFailed(err, "")
		return
	}
	// The session's context lives as long as the session (an SSE stream is bound to it); the timeout only
	// bounds the connect itself.
	sctx, cancel := context.WithCancel(context.Background())
	att := &connectAttempt{gen: a.gen, b: b, cancel: cancel}
	att.timer = time.AfterFunc(a.d.Config.ConnectionTimeout, cancel)
	a.attempt = att

	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			a.sys.Root.Send(a.self, &toolsChanged{gen: att.gen})
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if to, ok := a.progress.Load(req.Params.ProgressToken); ok {
				a.sys.Root.Send(to.(*actor.PID), &pb.Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
			}
		},
	}
	if a.rec.TransportType != persistence.TransportSTDIO {
		opts.KeepAlive = a.d.Config.KeepAlive
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-aggregator", Version: Version}, opts)
	sys, self := a.sys, a.self
	go func() {
		ok, err := att.handOver(sctx, a.d.Config.ConnectionTimeout, func() (*mcp.ClientSession, error) {
			return client.Connect(sctx, b.transport, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
		})
		if !ok {
			return
		}
		if err != nil && b.proc != nil {
			// A child that broke the connection is usually exiting: give it a moment so its exit status explains.
			select {
			case <-b.proc.exited:
			case <-time.After(200 * time.Millisecond):
			}
		}
		sys.Root.Send(self, &connectDone{att: att, err: err})
	}()
}

func (a *serverActor) onConnectDone(m *connectDone) {
	att := m.att
	att.mu.Lock()
	sess := att.sess
	att.sess = nil
	att.mu.Unlock()
	if att != a.attempt || a.status != persistence.StatusConnecting {
		// Superseded (disconnected or reconnected meanwhile): never use it.
		if sess != nil {
			_ = sess.Close()
		}
		att.cancel()
		att.b.kill()
		att.b.closeIdle()
		return
	}
	a.attempt = nil
	if m.err != nil {
		err := m.err
		if exit := att.b.exitReason(); exit != "" {
			err = fmt.Errorf("%s: %w", exit, err)
		}
		att.cancel()
		att.b.kill()
		att.b.closeIdle()
		tail := ""
		if att.b.stderr != nil {
			tail = att.b.stderr.String()
		}
		a.connectFailed(err, tail)
		return
	}
	if err := a.d.outbound.LoopInInitialize(sess.InitializeResult()); err != nil {
		_ = sess.Close()
		att.cancel()
		att.b.kill()
		att.b.closeIdle()
		a.connectFailed(err, "")
		return
	}
	live := &liveSession{gen: att.gen, session: sess, b: att.b, cancel: att.cancel}
	a.sess = live
	// retryN is kept: it is reset only once the session has proved stable (see resetBackoffIfStable).
	a.failures, a.lastError = 0, ""
	a.connectedAt = time.Now()
	a.lastOK.Store(time.Now().UnixNano())
	go func() {
		err := sess.Wait()
		a.sys.Root.Send(a.self, &sessionLost{gen: live.gen, err: err})
	}()
	a.transition(persistence.StatusConnected, "connection success", nil)
	a.scheduleHealth()
}

func (a *serverActor) connectFailed(err error, stderrTail string) {
	msg := err.Error()
	if t := strings.TrimSpace(stderrTail); t != "" {
		msg += "; stderr: " + stderrSummary(t)
	}
	msg = a.secrets.scrub(msg)
	a.lastError = msg
	a.log().Warn("connection failed", "error", msg, "attempt", a.retryN+1)
	a.transition(persistence.StatusError, "connection failure", &msg)
	a.scheduleRetry()
}

// scheduleRetry arms the next reconnect of the retry schedule (1 s, 2 s, 4 s, 8 s, 16 s, then every minute).
func (a *serverActor) scheduleRetry() {
	a.retryN++
	delay, ok := a.d.Config.Retry.Next(a.retryN, nil)
	if !ok {
		return
	}
	gen := a.gen
	a.stopTimer(&a.retryTimer)
	a.retryTimer = time.AfterFunc(delay, func() { a.sys.Root.Send(a.self, &retryTick{gen: gen}) })
}

func (a *serverActor) onSessionLost(m *sessionLost) {
	if a.sess == nil || a.sess.gen != m.gen || a.sess.closing.Load() {
		return // we closed it ourselves, or it is an old session
	}
	reason := "session lost"
	cause := metrics.CauseClosed
	if exit := a.sess.b.exitReason(); exit != "" {
		reason += ": " + exit
		cause = metrics.CauseProcessExit
	} else if m.err != nil {
		reason += ": " + m.err.Error()
	} else {
		reason += ": connection closed by the server"
	}
	if a.sess.b.stderr != nil {
		if t := strings.TrimSpace(a.sess.b.stderr.String()); t != "" {
			reason += "; stderr: " + stderrSummary(t)
		}
	}
	reason = a.secrets.scrub(reason)
	a.closeSession(false)
	if a.status == persistence.StatusDisconnecting {
		a.cancelPending()
		a.transition(persistence.StatusDisconnected, "session lost while draining", nil)
		return
	}
	a.lastError = reason
	a.d.Metrics.SessionLost(a.rec.Name, cause)
	a.log().Warn("session lost", "error", reason)
	a.transition(persistence.StatusError, "session lost", &reason)
	a.resetBackoffIfStable()
	a.scheduleRetry()
}

// resetBackoffIfStable starts the reconnect schedule again from its first delay when the lost session had lasted
// StableAfter; a session that failed sooner counts as one more failed attempt, so the delays keep growing.
func (a *serverActor) resetBackoffIfStable() {
	if !a.connectedAt.IsZero() && time.Since(a.connectedAt) >= a.d.Config.StableAfter {
		a.retryN = 0
	}
}

// onToolsListFailed treats a tools/list that did not get an answer from a freshly connected session (the backend
// exited, the answer broke the transport, it timed out) as a failed connection, with that error as its cause. Later
// in a session's life, or when the backend answered a JSON-RPC error, discovery only logs: the session works.
func (a *serverActor) onToolsListFailed(m *toolsListFailed) {
	if a.sess == nil || a.sess.gen != m.gen || a.sess.closing.Load() || !callable(a.status) ||
		time.Since(a.connectedAt) >= a.d.Config.StableAfter {
		return
	}
	if connectionBroken(m.err) {
		// The session itself ended (a stdio child that exited, a stream that closed): its loss is reported by
		// onSessionLost, with the exit status and stderr that explain it, and counts towards backoff there too.
		return
	}
	reason := "tool discovery failed right after connecting: " + m.err.Error()
	if exit := a.sess.b.exitReason(); exit != "" {
		reason += " (" + exit + ")"
	}
	if a.sess.b.stderr != nil {
		if t := strings.TrimSpace(a.sess.b.stderr.String()); t != "" {
			reason += "; stderr: " + stderrSummary(t)
		}
	}
	reason = a.secrets.scrub(reason)
	a.lastError = reason
	a.cancelPending()
	a.closeSession(false)
	a.d.Metrics.SessionLost(a.rec.Name, metrics.CauseClosed)
	a.log().Warn("tool discovery failed right after connecting", "error", reason)
	a.transition(persistence.StatusError, "tool discovery failure", &reason)
	a.scheduleRetry()
}

// closeSession ends the live session; sync waits for the stdio child to exit (shutdown, delete).
func (a *serverActor) closeSession(sync bool) {
	a.stopTimer(&a.healthTimer)
	a.healthBusy = false
	s := a.sess
	a.sess = nil
	if s == nil {
		return
	}
	s.closing.Store(true)
	if sync {
		s.close()
	} else {
		go s.close()
	}
}

func (a *serverActor) disconnect(force bool, reason string) *pb.DisconnectReply {
	if reason == "" {
		reason = "disconnect()"
	}
	a.setAutoConnect(false)
	r := &pb.DisconnectReply{ServerId: a.id}
	switch a.status {
	case persistence.StatusDisconnected:
		r.Status, r.Message = a.status, "Server already disconnected"
		return r
	case persistence.StatusConnecting:
		if a.attempt != nil {
			a.attempt.abandon()
			a.attempt = nil
		}
		a.transition(persistence.StatusDisconnected, reason, nil)
	case persistence.StatusError:
		a.stopTimer(&a.retryTimer)
		a.transition(persistence.StatusDisconnected, reason, nil)
	case persistence.StatusDisconnecting:
		if force {
			r.PendingRequests = int32(len(a.pending))
			a.cancelPending()
			a.finishDisconnect(reason + " (force)")
		}
	case persistence.StatusConnected, persistence.StatusDegraded:
		n := len(a.pending)
		r.PendingRequests = int32(n)
		if n == 0 || force {
			a.cancelPending()
			a.closeSession(false)
			a.transition(persistence.StatusDisconnected, reason, nil)
		} else {
			a.transition(persistence.StatusDisconnecting, reason, nil)
			gen := a.gen
			a.stopTimer(&a.drainTimer)
			a.drainTimer = time.AfterFunc(a.d.Config.DrainTimeout, func() { a.sys.Root.Send(a.self, &drainTimeout{gen: gen}) })
		}
	}
	r.Status = a.status
	switch {
	case a.status == persistence.StatusDisconnecting:
		r.Message = fmt.Sprintf("Waiting for %d pending requests to complete", len(a.pending))
	case force && r.PendingRequests > 0:
		r.Message = fmt.Sprintf("Server disconnected; %d pending requests cancelled", r.PendingRequests)
	default:
		r.Message = "Server disconnected successfully"
	}
	return r
}

func (a *serverActor) finishDisconnect(reason string) {
	a.stopTimer(&a.drainTimer)
	a.closeSession(false)
	if a.status != persistence.StatusDisconnected {
		a.transition(persistence.StatusDisconnected, reason, nil)
	}
}

func (a *serverActor) cancelPending() {
	for _, cancel := range a.pending {
		cancel(nil)
	}
}

// reload picks up a changed registration; a server with a session reconnects with the new configuration.
func (a *serverActor) reload() *pb.Ack {
	sctx, cancel := a.storeCtx()
	rec, err := a.d.Store.GetServer(sctx, a.id)
	cancel()
	if err != nil {
		return &pb.Ack{Error: err.Error()}
	}
	old := a.rec
	rec.Status = a.status
	a.rec = rec
	a.secrets = newSecrets(rec, a.d.Env)
	// Only the connection config matters to the session; a rename or a new description keeps it.
	changed := string(old.ConnectionConfig) != string(rec.ConnectionConfig)
	if !changed {
		if a.sess != nil && ptrStr(old.HealthCheckURL) != ptrStr(rec.HealthCheckURL) {
			a.scheduleHealth()
		}
		return &pb.Ack{}
	}
	switch a.status {
	case persistence.StatusConnected, persistence.StatusDegraded, persistence.StatusDisconnecting:
		a.cancelPending()
		a.finishDisconnect("configuration changed")
		a.startConnect("configuration changed")
	case persistence.StatusConnecting:
		a.attempt.abandon()
		a.attempt = nil
		a.transition(persistence.StatusDisconnected, "configuration changed", nil)
		a.startConnect("configuration changed")
	case persistence.StatusError:
		a.stopTimer(&a.retryTimer)
		a.retryN = 0
		a.startConnect("configuration changed")
	}
	return &pb.Ack{}
}

func (a *serverActor) statusReply() *pb.StatusReply {
	return &pb.StatusReply{
		ServerId: a.id, Name: a.rec.Name, Status: a.status, PendingRequests: int32(len(a.pending)),
		ConsecutiveFailures: int32(a.failures), LastError: a.lastError,
	}
}

func (a *serverActor) unavailable(detail string) *pb.ErrorInfo {
	return &pb.ErrorInfo{Code: CodeServerUnavailable, Message: detail, ServerStatus: a.status, ServerName: a.rec.Name}
}

// callTool starts the call on the session in a goroutine and answers the asker from there: the mailbox is free for
// the next call at once, and the session multiplexes them.
func (a *serverActor) callTool(ctx actor.Context, m *pb.CallTool) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&pb.CallToolReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	if a.shuttingDown {
		ctx.Respond(&pb.CallToolReply{Error: a.unavailable(fmt.Sprintf("The aggregator is shutting down and takes no new calls (%s on %s)", m.Tool, a.rec.Name))})
		return
	}
	if max := a.d.Config.MaxCallsPerServer; max > 0 && len(a.pending) >= max {
		a.d.Metrics.Call(a.rec.Name, metrics.OutcomeUnavailable, 0)
		ctx.Respond(&pb.CallToolReply{Error: &pb.ErrorInfo{Code: CodeServerBusy, ServerName: a.rec.Name, ServerStatus: a.status,
			Message: fmt.Sprintf("Server %s is busy: %d calls in flight, the limit (MCP_AGGREGATOR_MAX_CALLS_PER_SERVER); retry shortly", a.rec.Name, max)}})
		return
	}
	deadline := time.Now().Add(a.d.Config.RequestTimeout)
	if m.DeadlineUnixMs > 0 {
		deadline = time.UnixMilli(m.DeadlineUnixMs)
	}
	dctx, cancelDeadline := context.WithDeadline(context.Background(), deadline)
	cctx, cancelCause := context.WithCancelCause(dctx)
	cancel := func() { cancelCause(nil); cancelDeadline() }
	a.nextCall++
	id := a.nextCall
	a.pending[id] = cancelCause
	if m.CallId != "" {
		a.byReq[m.CallId] = id
	}
	if m.RequestId != "" {
		// The request id follows the call to the backend: in the call's _meta, and (through the HTTP client's
		// transport, which reads the context) as X-Request-ID.
		cctx = requestid.With(cctx, m.RequestId)
	}
	sess, sender, sys, self := a.sess.session, ctx.Sender(), a.sys, a.self
	// A caller on this node that asked for it gets the result object itself: no JSON round trip.
	local := m.WantObject && sender != nil && sender.Address == a.sys.Address()
	name, status := a.rec.Name, a.status
	args := json.RawMessage(m.ArgumentsJson)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	params := &mcp.CallToolParams{Name: m.Tool, Arguments: args}
	if m.RequestId != "" {
		params.Meta = mcp.Meta{RequestIDMetaKey: m.RequestId}
	}
	var token string
	if m.ProgressTo != nil {
		token = fmt.Sprintf("%s/%d/%d", a.id, a.gen, id)
		params.SetProgressToken(token)
		a.progress.Store(token, actor.NewPID(m.ProgressTo.Address, m.ProgressTo.Id))
	}
	progress, mx, sec := a.progress, a.d.Metrics, a.secrets
	mx.InFlight(name, 1)
	go func() {
		defer mx.InFlight(name, -1)
		defer cancel()
		if token != "" {
			defer progress.Delete(token)
		}
		start := time.Now()
		res, err := sess.CallTool(cctx, params)
		took := time.Since(start)
		reply := &pb.CallToolReply{ExecutionMs: float64(took.Microseconds()) / 1000}
		if err == nil {
			a.lastOK.Store(time.Now().UnixNano())
			if !local {
				reply.ResultJson, err = json.Marshal(res)
			}
		}
		if err != nil {
			reply.Error = classifyCallError(cctx, err, name, status, m.Tool)
			reply.Error.Message = sec.scrub(reply.Error.Message)
			a.d.Logger.Warn("tool call failed", "server", name, "tool", m.Tool, "request_id", m.RequestId,
				"code", reply.Error.Code, "error", reply.Error.Message)
		}
		mx.Call(name, callOutcome(res, reply.Error, cctx), took)
		// Count the call done before answering, so that whatever the asker does next sees it finished.
		sys.Root.Send(self, &callDone{id: id, requestID: m.CallId})
		switch {
		case sender == nil:
		case local:
			sys.Root.Send(sender, &callObject{reply: reply, result: res})
		default:
			sys.Root.Send(sender, reply)
		}
	}()
}

// classifyCallError maps what went wrong with a call to the contract's codes.
func classifyCallError(ctx context.Context, err error, server, status, tool string) *pb.ErrorInfo {
	info := &pb.ErrorInfo{ServerName: server, ServerStatus: status}
	var rpcErr *jsonrpc.Error
	switch {
	case errors.Is(context.Cause(ctx), ErrShuttingDown):
		info.Code, info.Message = CodeServerUnavailable,
			fmt.Sprintf("The aggregator is shutting down: the call to %s on %s did not finish within the drain time", tool, server)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		info.Code, info.Message = CodeRequestTimeout, fmt.Sprintf("Tool call %s on %s timed out", tool, server)
	case errors.Is(ctx.Err(), context.Canceled):
		info.Code, info.Message = CodeServerUnavailable,
			fmt.Sprintf("Server %s was disconnected while %s was in progress", server, tool)
	case errors.As(err, &rpcErr) && msglimit.TooLarge(rpcErr.Code, rpcErr.Message):
		info.Code, info.Message = CodeResponseTooLarge, fmt.Sprintf("Answer of %s to %s refused: %s", server, tool, rpcErr.Message)
	case localTransportError(err):
		info.Code, info.Message = CodeServerUnavailable,
			fmt.Sprintf("Server %s (status %s) is unavailable: the call to %s did not reach it: %v", server, status, tool, err)
	case errors.As(err, &rpcErr):
		info.Code, info.Message = CodeExecutionFailed, fmt.Sprintf("Server %s returned an error: %s", server, rpcErr.Message)
	default:
		info.Code, info.Message = CodeServerUnavailable,
			fmt.Sprintf("Connection to %s was lost while %s was in progress: %v", server, tool, err)
	}
	return info
}

// connectionBroken reports an error that means the session's connection is gone, not that one exchange failed.
func connectionBroken(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, mcp.ErrConnectionClosed)
}

// localTransportError reports whether err carries one of the JSON-RPC codes the go-sdk gives errors it makes itself
// (-32003 client closing, -32004 server closing, -32005 rejected by the transport: connection refused, a 4xx/5xx
// HTTP answer, a closed stream). They are *jsonrpc.Error values like a backend's answer, but say the backend was not
// reached: SERVER_UNAVAILABLE. A backend's JSON-RPC body inside a rejected HTTP answer still counts as rejected.
func localTransportError(err error) bool {
	return errors.Is(err, &jsonrpc.Error{Code: -32003}) || errors.Is(err, &jsonrpc.Error{Code: -32004}) ||
		errors.Is(err, &jsonrpc.Error{Code: -32005})
}

// listTools pages through tools/list to the end in a goroutine (a large server must not hold the mailbox).
func (a *serverActor) listTools(ctx actor.Context) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&pb.ListToolsReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	sess, sender, sys, timeout, sec := a.sess.session, ctx.Sender(), a.sys, a.d.Config.RequestTimeout, a.secrets
	gen, self := a.sess.gen, a.self
	go func() {
		lctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reply := &pb.ListToolsReply{}
		for tool, err := range sess.Tools(lctx, nil) {
			if err != nil {
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || localTransportError(err) {
					sys.Root.Send(self, &toolsListFailed{gen: gen, err: err})
				}
				reply.ToolsJson = nil
				reply.Error = &pb.ErrorInfo{Code: CodeExecutionFailed, Message: sec.scrub(err.Error())}
				if rpcErr := (*jsonrpc.Error)(nil); errors.As(err, &rpcErr) && msglimit.TooLarge(rpcErr.Code, rpcErr.Message) {
					reply.Error.Code = CodeResponseTooLarge
				}
				break
			}
			b, err := json.Marshal(tool)
			if err != nil {
				reply.Error = &pb.ErrorInfo{Code: CodeExecutionFailed, Message: err.Error()}
				break
			}
			reply.ToolsJson = append(reply.ToolsJson, b)
		}
		if sender != nil {
			sys.Root.Send(sender, reply)
		}
	}()
}

func (a *serverActor) scheduleHealth() {
	if a.d.Config.HealthInterval <= 0 || a.sess == nil {
		return
	}
	gen := a.sess.gen
	a.stopTimer(&a.healthTimer)
	a.healthTimer = time.AfterFunc(a.d.Config.HealthInterval, func() { a.sys.Root.Send(a.self, &healthTick{gen: gen}) })
}

// onHealthTick runs one health check (BR-006 as READING.md decides): GET health_check_url when configured;
// otherwise healthy without I/O when a message succeeded within the interval, else an MCP ping.
func (a *serverActor) onHealthTick(m *healthTick) {
	if a.sess == nil || a.sess.gen != m.gen || !callable(a.status) || a.healthBusy {
		return
	}
	url := ptrStr(a.rec.HealthCheckURL)
	if url == "" && time.Since(time.Unix(0, a.lastOK.Load())) < a.d.Config.HealthInterval {
		a.onHealthResult(&healthResult{gen: m.gen, ok: true, counted: true})
		return
	}
	if url != "" {
		if problem := connconfig.PlainHTTPProblem(url, connconfig.AllowsInsecureHTTP(a.rec.ConnectionConfig)); problem != "" {
			a.onHealthResult(&healthResult{gen: m.gen, err: "health_check_url refused: " + problem})
			return
		}
	}
	a.healthBusy = true
	sess, timeout, sys, self := a.sess.session, a.d.Config.HealthTimeout, a.sys, a.self
	client := healthClientFor(a.d.HealthClient, connconfig.AllowsInsecureHTTP(a.rec.ConnectionConfig))
	sec := a.secrets
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		r := &healthResult{gen: m.gen, counted: true}
		if url != "" {
			r.ok, r.counted, r.err = httpHealth(ctx, client, url)
		} else if err := sess.Ping(ctx, nil); err != nil {
			r.err = "ping failed: " + err.Error()
		} else {
			r.ok = true
		}
		r.err = sec.scrub(r.err)
		ms := float64(time.Since(start).Microseconds()) / 1000
		r.responseMs = &ms
		sys.Root.Send(self, r)
	}()
}

// httpHealth GETs a health URL: 2xx is healthy; 5xx, timeouts and connection errors are failures; 4xx is a
// configuration problem that is reported but not counted.
func httpHealth(ctx context.Context, client *http.Client, url string) (ok, counted bool, errText string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, false, "invalid health_check_url: " + err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, true, "health check request failed: " + err.Error()
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, true, ""
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return false, false, fmt.Sprintf("health_check_url answered %d (not counted as a failure)", resp.StatusCode)
	default:
		return false, true, fmt.Sprintf("health_check_url answered %d", resp.StatusCode)
	}
}

func (a *serverActor) onHealthResult(r *healthResult) {
	if a.sess == nil || a.sess.gen != r.gen {
		return
	}
	a.healthBusy = false
	var took time.Duration
	if r.responseMs != nil {
		took = time.Duration(*r.responseMs * float64(time.Millisecond))
	}
	a.d.Metrics.HealthCheck(a.rec.Name, took, !r.ok && r.counted)
	switch {
	case r.ok:
		a.failures = 0
		if a.status == persistence.StatusDegraded {
			a.transition(persistence.StatusConnected, "health check success", nil)
		}
	case !r.counted:
		a.log().Warn("health check answered 4xx; check health_check_url", "error", r.err)
	default:
		a.failures++
		a.lastError = r.err
		a.log().Warn("health check failed", "error", r.err, "consecutive_failures", a.failures)
	}
	var lastErr *string
	if r.err != "" {
		e := r.err
		lastErr = &e
	}
	sctx, cancel := a.storeCtx()
	if err := a.d.Store.RecordHealth(sctx, persistence.HealthRecord{
		ServerID: a.id, CheckedAt: time.Now().UTC(), ResponseMs: r.responseMs, ConsecutiveFailures: a.failures, LastError: lastErr,
	}); err != nil && !errors.Is(err, persistence.ErrNotFound) {
		a.log().Error("persist health check", "error", err)
	}
	cancel()
	switch {
	case r.ok || !r.counted:
	case a.failures >= 3:
		msg := fmt.Sprintf("%d consecutive health check failures: %s", a.failures, r.err)
		a.lastError = msg
		a.cancelPending()
		a.closeSession(false)
		a.d.Metrics.SessionLost(a.rec.Name, metrics.CauseHealthChecks)
		a.transition(persistence.StatusError, "3 health failures", &msg)
		a.resetBackoffIfStable()
		a.scheduleRetry()
		return
	case a.failures == 2 && a.status == persistence.StatusConnected:
		a.transition(persistence.StatusDegraded, "2 health failures", nil)
	}
	a.scheduleHealth()
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

// stderrSummaryMax bounds the stderr part of an error message.
const stderrSummaryMax = 1000

// stderrSummary keeps what a failing command's stderr says went wrong: the first line that reads as an error (node
// prints "Error: Cannot find module ..." before a long stack; Python's last line is its exception, a Go panic's
// first) and the last 3 non-empty lines, joined by " | ", within stderrSummaryMax bytes.
func stderrSummary(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	tail := 3
	first := -1
	for i, l := range lines {
		if decisiveLine(l) {
			first = i
			break
		}
	}
	var out []string
	start := max(len(lines)-tail, 0)
	if first >= 0 && first < start {
		out = append(out, lines[first])
		if first+1 < start {
			out = append(out, "...")
		}
	}
	out = append(out, lines[start:]...)
	msg := strings.Join(out, " | ")
	if len(msg) > stderrSummaryMax {
		msg = msg[:stderrSummaryMax] + "..."
	}
	return msg
}

// decisiveLine reports whether a stderr line says what failed (rather than being a stack frame or a banner).
func decisiveLine(l string) bool {
	if strings.HasPrefix(l, "at ") || strings.HasPrefix(l, "File \"") {
		return false // JavaScript and Python stack frames
	}
	low := strings.ToLower(l)
	for _, w := range []string{"error", "cannot", "can't", "not found", "no such", "fatal", "failed", "denied", "panic", "exception", "invalid", "refused", "missing"} {
		if strings.Contains(low, w) {
			return true
		}
	}
	return false
}

// callOutcome names how a call ended, for the tool call counter.
func callOutcome(res *mcp.CallToolResult, e *pb.ErrorInfo, ctx context.Context) string {
	switch {
	case e == nil && res != nil && res.IsError:
		return metrics.OutcomeToolError
	case e == nil:
		return metrics.OutcomeOK
	case e.Code == CodeExecutionFailed:
		return metrics.OutcomeFailed
	case e.Code == CodeRequestTimeout:
		return metrics.OutcomeTimeout
	case errors.Is(ctx.Err(), context.Canceled):
		return metrics.OutcomeCancelled
	}
	return metrics.OutcomeUnavailable
}
