package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The server actor's session lifecycle: connect in a goroutine and hand the session over, retry on the backoff
// schedule, notice a lost session, disconnect (draining calls in flight) and reconnect on a configuration change.

// connectAttempt hands a session from the connecting goroutine to the actor. Whoever loses the race closes it, so
// no session (and no child process) is left behind when the actor gives up on an attempt or stops meanwhile.
type connectAttempt struct {
	gen       uint64
	b         *backend.Conn
	cancel    context.CancelFunc
	timer     *time.Timer
	mu        sync.Mutex
	abandoned bool
	sess      *mcp.ClientSession
	tasks     *taskWire // set by taskWire
	hop       *fastHop  // nil: not a streamable HTTP session (fasthop.go)
}

// take returns the session handOver left for the owner (nil when connect failed), once.
func (c *connectAttempt) take() *mcp.ClientSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	sess := c.sess
	c.sess = nil
	return sess
}

// discard ends an attempt whose outcome the owner will not use: its session, if any, its context, its child
// process and its idle connections.
func (c *connectAttempt) discard(sess *mcp.ClientSession) {
	if sess != nil {
		_ = sess.Close()
	}
	c.release()
}

// release cancels the attempt and frees its transport (kills a stdio child, closes idle HTTP connections).
func (c *connectAttempt) release() {
	c.cancel()
	c.b.Release()
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
	c.b.Release()
}

// liveSession is the connected session and what has to be released with it.
type liveSession struct {
	gen     uint64
	session *mcp.ClientSession
	b       *backend.Conn
	cancel  context.CancelFunc
	closing atomic.Bool
	tasks   *taskWire // nil: the transport has no task wire (SSE)
	hop     *fastHop  // nil: not a streamable HTTP session (fasthop.go)
}

// close ends the session, the stdio child's whole process group and pooled HTTP connections.
func (l *liveSession) close() {
	l.closing.Store(true)
	_ = l.session.Close()
	l.cancel()
	l.b.Release()
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

// startConnect enters CONNECTING and connects in a goroutine, bounded by the connection timeout. Only the owner
// (the lease holder) gets here: the receive table refuses commands otherwise.
func (a *serverActor) startConnect(reason string) {
	if !a.transition(persistence.StatusConnecting, reason, nil) {
		return
	}
	a.gen++
	b, err := backend.Dial(a.rec, a.deps.Backend())
	if err != nil {
		a.connectFailed(err, "")
		return
	}
	// The session's context lives as long as the session (an SSE stream is bound to it); the timeout only
	// bounds the connect itself.
	sctx, cancel := context.WithCancel(context.Background())
	attempt := &connectAttempt{gen: a.gen, b: b, cancel: cancel}
	attempt.timer = time.AfterFunc(a.deps.Config.ConnectionTimeout, cancel)
	a.attempt = attempt

	// A flooding backend costs the others little (floodguard): its list_changed notifications are merged while one
	// is on its way to this actor, and its relayed log and progress notifications are rate-limited.
	name, mx := a.rec.Name, a.deps.Metrics
	dropped := func(kind string) { mx.NotificationDropped(name, kind) }
	limit := floodguard.NewLimiter(a.deps.Config.NotifyRate, dropped)
	toolsLatch := &floodguard.Latch{}
	opts := &mcp.ClientOptions{
		// roots: a backend may ask for the roots of the client whose call is in flight (relayMiddleware relays
		// it). No listChanged: the aggregator's clients come and go; their root lists are asked for per call.
		Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{}},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			if !toolsLatch.Set() {
				dropped(floodguard.KindListChanged)
				return
			}
			a.sys.Root.Send(a.self, &toolsChanged{gen: attempt.gen, latch: toolsLatch})
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if to, ok := a.progress.Load(req.Params.ProgressToken); ok && limit.Allow(floodguard.KindProgress) {
				a.sys.Root.Send(to.(*actor.PID), &pb.Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
			}
		},
	}
	a.featureHandlers(opts, attempt.gen, dropped)
	a.relay.timeout = a.deps.Config.RequestTimeout
	relayHandlers(opts, &a.relay, a.sys, limit)
	if a.rec.TransportType != persistence.TransportSTDIO {
		opts.KeepAlive, opts.KeepAliveFailureThreshold = a.deps.Config.KeepAlive, keepAliveMisses
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-aggregator", Version: Version}, opts)
	client.AddReceivingMiddleware(relayMiddleware(&a.relay, a.sys))
	client.AddSendingMiddleware(telemetry.ClientMiddleware(a.rec.Name, a.id))
	sys, self := a.sys, a.self
	transport := attempt.taskWire(b) // tasks_backend.go: the backend's own tasks (issue 30)
	if attempt.hop = newFastHop(b); attempt.hop != nil && !a.deps.Config.NoFastHop {
		client.AddReceivingMiddleware(attempt.hop.capture) // last: the outermost, the whole chain (fasthop.go)
	} else {
		attempt.hop = nil
	}
	go func() {
		ok, err := attempt.handOver(sctx, a.deps.Config.ConnectionTimeout, func() (*mcp.ClientSession, error) {
			return client.Connect(sctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
		})
		if !ok {
			return
		}
		if err != nil {
			// A child that broke the connection is usually exiting: give it a moment so its exit status explains.
			b.WaitExit(200 * time.Millisecond)
		}
		sys.Root.Send(self, &connectDone{attempt: attempt, err: err})
	}()
}

func (a *serverActor) onConnectDone(m *connectDone) {
	attempt := m.attempt
	sess := attempt.take()
	if attempt != a.attempt || a.status != persistence.StatusConnecting {
		attempt.discard(sess) // superseded (disconnected or reconnected meanwhile): never use it
		return
	}
	a.attempt = nil
	if m.err != nil {
		err := m.err
		if exit := attempt.b.ExitReason(); exit != "" {
			err = fmt.Errorf("%s: %w", exit, err)
		}
		attempt.release()
		a.connectFailed(err, attempt.b.Stderr())
		return
	}
	if err := a.deps.Outbound.LoopInInitialize(sess.InitializeResult()); err != nil {
		attempt.discard(sess)
		a.connectFailed(err, "")
		return
	}
	live := &liveSession{gen: attempt.gen, session: sess, b: attempt.b, cancel: attempt.cancel, tasks: attempt.tasks, hop: attempt.hop}
	if live.hop != nil {
		live.hop.sess.Store(sess)
	}
	a.sess = live
	a.deps.Metrics.BackendSession(a.rec.Name, true)
	// retryN is kept: it is reset only once the session has proved stable (see resetBackoffIfStable).
	a.failures, a.lastError = 0, ""
	a.connectedAt = time.Now()
	a.lastOK.Store(time.Now().UnixNano())
	go func() {
		err := sess.Wait()
		a.sys.Root.Send(a.self, &sessionLost{gen: live.gen, err: err})
	}()
	a.awaitFirstDiscovery(live.gen, a.backendLogging(sess))
}

// awaitFirstDiscovery has the new session's tools discovered before the server enters CONNECTED: the actor stays
// CONNECTING (with the session, which answers tools/list but takes no calls yet) until the discovery actor says the
// tools are stored. The router (package actors) holds them until the CONNECTED that follows, and the status reaches
// the router before anyone else (setStatus), so that whoever reads CONNECTED can call them at once. The backend's
// logging level, asked for at the same time (logged), is set by then too: a call made at once has its log messages.
func (a *serverActor) awaitFirstDiscovery(gen uint64, logged <-chan struct{}) {
	sys, self, id := a.sys, a.self, a.id
	discovery := actor.NewPID(sys.Address(), msg.DiscoveryName)
	// A discovery of the server already running finishes first; each lists once within RequestTimeout and writes
	// the store within its store timeout.
	timeout := 2*a.deps.Config.RequestTimeout + 2*msg.StoreTimeout
	go func() {
		res, err := sys.Root.RequestFuture(discovery, &msg.FirstDiscovery{ID: id}, timeout).Result()
		if r, ok := res.(*msg.Reply); ok && err == nil {
			err = r.Err
		}
		select { // a backend slow to answer logging/setLevel delays CONNECTED by loggingWait at most
		case <-logged:
		case <-time.After(loggingWait):
		}
		sys.Root.Send(self, &firstDiscovered{gen: gen, err: err})
	}()
}

// loggingWait bounds how long a new session's CONNECTED waits for the backend's answer to logging/setLevel.
const loggingWait = 5 * time.Second

// onFirstDiscovered enters CONNECTED once the session's first discovery is applied. A discovery that failed without
// breaking the session (the backend answered tools/list with an error, the store was slow) does not keep the server
// out of CONNECTED: the session works, and its tools come with the next discovery. A failure that broke the session
// was handled before this message arrived (onToolsListFailed, onSessionLost).
func (a *serverActor) onFirstDiscovered(m *firstDiscovered) {
	if a.sess == nil || a.sess.gen != m.gen || a.status != persistence.StatusConnecting {
		return
	}
	if m.err != nil && a.sess.b.ExitReason() != "" {
		return // the stdio child exited: its session ends, and onSessionLost reports that as the failed connection
	}
	if m.err != nil {
		a.log().Warn("the first tool discovery of the session failed; connected without its tools", "error", a.secrets.Scrub(m.err.Error()))
	}
	a.transition(persistence.StatusConnected, "connection success", nil)
	a.scheduleHealth()
}

func (a *serverActor) connectFailed(err error, stderrTail string) {
	msg := err.Error()
	if t := strings.TrimSpace(stderrTail); t != "" {
		msg += "; stderr: " + stderrSummary(t)
	}
	msg = a.secrets.Scrub(msg)
	a.lastError = msg
	a.log().Warn("connection failed", "error", msg, "attempt", a.retryN+1)
	a.transition(persistence.StatusError, "connection failure", &msg)
	a.scheduleRetry()
}

// scheduleRetry arms the next reconnect of the retry schedule (1 s, 2 s, 4 s, 8 s, 16 s, then every minute).
func (a *serverActor) scheduleRetry() {
	a.retryN++
	delay, ok := a.deps.Config.Retry.Next(a.retryN, nil)
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
	if exit := a.sess.b.ExitReason(); exit != "" {
		reason += ": " + exit
		cause = metrics.CauseProcessExit
	} else if m.err != nil {
		reason += ": " + m.err.Error()
	} else {
		reason += ": connection closed by the server"
	}
	if t := strings.TrimSpace(a.sess.b.Stderr()); t != "" {
		reason += "; stderr: " + stderrSummary(t)
	}
	reason = a.secrets.Scrub(reason)
	a.closeSession(false)
	if a.status == persistence.StatusDisconnecting {
		a.cancelPending()
		a.transition(persistence.StatusDisconnected, "session lost while draining", nil)
		return
	}
	a.lastError = reason
	a.deps.Metrics.SessionLost(a.rec.Name, cause)
	a.log().Warn("session lost", "error", reason)
	a.transition(persistence.StatusError, "session lost", &reason)
	a.resetBackoffIfStable()
	a.scheduleRetry()
}

// resetBackoffIfStable starts the reconnect schedule again from its first delay when the lost session had lasted
// StableAfter; a session that failed sooner counts as one more failed attempt, so the delays keep growing.
func (a *serverActor) resetBackoffIfStable() {
	if !a.connectedAt.IsZero() && time.Since(a.connectedAt) >= a.deps.Config.StableAfter {
		a.retryN = 0
	}
}

// onToolsListFailed treats a tools/list that did not get an answer from a freshly connected session (the backend
// exited, the answer broke the transport, it timed out) as a failed connection, with that error as its cause. Later
// in a session's life, or when the backend answered a JSON-RPC error, discovery only logs: the session works.
func (a *serverActor) onToolsListFailed(m *toolsListFailed) {
	if a.sess == nil || a.sess.gen != m.gen || a.sess.closing.Load() || !callable(a.status) && a.status != persistence.StatusConnecting ||
		time.Since(a.connectedAt) >= a.deps.Config.StableAfter {
		return
	}
	if connectionBroken(m.err) {
		// The session itself ended (a stdio child that exited, a stream that closed): its loss is reported by
		// onSessionLost, with the exit status and stderr that explain it, and counts towards backoff there too.
		return
	}
	reason := "tool discovery failed right after connecting: " + m.err.Error()
	if exit := a.sess.b.ExitReason(); exit != "" {
		reason += " (" + exit + ")"
	}
	if t := strings.TrimSpace(a.sess.b.Stderr()); t != "" {
		reason += "; stderr: " + stderrSummary(t)
	}
	reason = a.secrets.Scrub(reason)
	a.lastError = reason
	a.cancelPending()
	a.closeSession(false)
	a.deps.Metrics.SessionLost(a.rec.Name, metrics.CauseClosed)
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
	a.deps.Metrics.BackendSession(a.rec.Name, false)
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
		a.closeSession(false) // connected, its first discovery running
		a.transition(persistence.StatusDisconnected, reason, nil)
	case persistence.StatusError:
		a.stopTimer(&a.retryTimer)
		a.transition(persistence.StatusDisconnected, reason, nil)
	case persistence.StatusDisconnecting:
		if force {
			r.PendingRequests = int32(a.pending.len())
			a.cancelPending()
			a.finishDisconnect(reason + " (force)")
		}
	case persistence.StatusConnected, persistence.StatusDegraded:
		n := a.pending.watch() // from here, each request's end tells the actor (callDone)
		r.PendingRequests = int32(n)
		if n == 0 || force {
			a.cancelPending()
			a.closeSession(false)
			a.transition(persistence.StatusDisconnected, reason, nil)
		} else {
			a.transition(persistence.StatusDisconnecting, reason, nil)
			gen := a.gen
			a.stopTimer(&a.drainTimer)
			a.drainTimer = time.AfterFunc(a.deps.Config.DrainTimeout, func() { a.sys.Root.Send(a.self, &drainTimeout{gen: gen}) })
		}
	}
	r.Status = a.status
	switch {
	case a.status == persistence.StatusDisconnecting:
		r.Message = fmt.Sprintf("Waiting for %d pending requests to complete", a.pending.len())
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
	a.pending.cancelAll(nil)
}

// reloaded is the registration a reload read, for the actor to apply.
type reloaded struct {
	rec    persistence.Server
	err    error
	asker  *actor.PID // nil: nobody waits for the answer
	serial uint64
}

// reload picks up a changed registration: it reads it off the mailbox and applies it when it arrives (onReloaded).
// The registry sends Reload without waiting for an answer (an update must not wait on a busy actor); a caller that
// does wait gets the Ack.
func (a *serverActor) reload(asker *actor.PID) {
	a.reloads++
	store, id, sys, self, serial := a.deps.Store, a.id, a.sys, a.self, a.reloads
	go func() {
		sctx, cancel := a.storeCtx()
		defer cancel()
		rec, err := store.GetServer(sctx, id)
		sys.Root.Send(self, &reloaded{rec: rec, err: err, asker: asker, serial: serial})
	}()
}

func (a *serverActor) onReloaded(m *reloaded) {
	var ack *pb.Ack
	switch {
	case m.err != nil:
		ack = &pb.Ack{Error: m.err.Error()}
	case m.serial != a.reloads:
		ack = &pb.Ack{} // a later reload, already on its way, applies the newer row
	default:
		ack = a.apply(m.rec)
	}
	if m.asker != nil {
		a.sys.Root.Send(m.asker, ack)
	} else if ack.Error != "" {
		a.log().Error("reload after update failed", "error", ack.Error)
	}
}

// apply makes rec the actor's registration; a server with a session reconnects with the new configuration.
func (a *serverActor) apply(rec persistence.Server) *pb.Ack {
	old := a.rec
	rec.Status = a.status
	a.rec = rec
	if a.sess != nil && old.Name != rec.Name {
		a.deps.Metrics.BackendSession(old.Name, false)
		a.deps.Metrics.BackendSession(rec.Name, true)
	}
	a.secrets = backend.NewSecrets(rec, a.deps.Env)
	if credentialChanged(old, rec) {
		// shared <-> per_user, or another user_credential: every caller's session ends (proxy_user.go); the next
		// call opens the kind the new settings say. The server's own session is the registration's: it stays.
		a.endCallerSessions("credential settings changed")
	}
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
		if a.attempt != nil {
			a.attempt.abandon()
			a.attempt = nil
		}
		a.closeSession(false) // connected, its first discovery running
		a.transition(persistence.StatusDisconnected, "configuration changed", nil)
		a.startConnect("configuration changed")
	case persistence.StatusError:
		a.stopTimer(&a.retryTimer)
		a.retryN = 0
		a.startConnect("configuration changed")
	}
	return &pb.Ack{}
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
