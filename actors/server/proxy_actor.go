package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/notifyorder"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// proxyUpstream is what a request runs against: the session and its client (which sends roots/list_changed).
type proxyUpstream struct {
	client *mcp.Client
	sess   *mcp.ClientSession
	tasks  *taskWire // nil: the session's transport has no task wire (SSE)
}

// Local messages of the proxy machinery.
type (
	// openProxy asks a server actor for a new proxy session; the proxy actor answers the asker once connected.
	openProxy struct {
		opts  ProxyOptions
		claim *proxyClaim
	}
	proxyOpened struct {
		pid    *actor.PID
		init   *mcp.InitializeResult
		shared *proxyShared
	}
	proxyConnected struct {
		attempt *connectAttempt
		client  *mcp.Client
		err     error
	}
	proxyRequest struct {
		ctx      context.Context
		deadline time.Time
		do       func(context.Context, proxyUpstream) (any, error)
		// taken is claimed by whichever comes first: the actor receiving the request (it then answers, running it
		// or refusing it), or the asker giving it up once the actor has stopped without receiving it
		// (ProxySession.ask); a request still in the mailbox when the actor ends is otherwise dropped unanswered.
		taken atomic.Bool
	}
	proxyReply struct {
		res any
		err error
		// scrub removes the session's own secrets (a caller's credential) from error texts; nil: nothing to remove.
		scrub func(string) string
	}
	proxyRequestDone struct{ id uint64 }
	proxyLost        struct{ err error }
	// proxyServerGone ends the session; err, when set, is why (else reason).
	proxyServerGone struct {
		reason string
		err    error
	}
)

// proxyClaim lets an asker that gave up (timeout, cancelled) stop the proxy actor it asked for, whether the server
// actor has spawned it yet or not: no abandoned upstream session (or child process) is left behind.
type proxyClaim struct {
	mu        sync.Mutex
	abandoned bool
	pid       *actor.PID
}

// spawned records the proxy actor; it reports false (and the caller stops the actor) when the asker gave up.
func (c *proxyClaim) spawned(pid *actor.PID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid = pid
	return !c.abandoned
}

// abandon marks the claim abandoned and returns the actor to stop, if already spawned.
func (c *proxyClaim) abandon() *actor.PID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = true
	return c.pid
}

// proxyShared is what a proxy actor's incarnations share: a restarted actor has lost its session, so it stops
// instead of serving; and the event stream subscription the server actor made for it.
type proxyShared struct {
	mu      sync.Mutex
	started bool
	stopped bool
	replied bool
	sub     *eventstream.Subscription
	es      *eventstream.EventStream
	// ended, set by the server actor when the caller's credential changed, answers every request sent after it
	// without sending it to the actor (which is about to stop and would drop it).
	ended error
	// done is closed when the actor stops (stop): no request it has not received by then will it ever receive.
	done     chan struct{}
	doneOnce sync.Once
}

// stoppedCh is closed once the actor has stopped (or is stopping).
func (s *proxyShared) stoppedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

func (s *proxyShared) firstStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := !s.started
	s.started = true
	return first
}

// setSub keeps the subscription, or drops it at once when the actor already stopped.
func (s *proxyShared) setSub(es *eventstream.EventStream, sub *eventstream.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		es.Unsubscribe(sub)
		return
	}
	s.es, s.sub = es, sub
}

func (s *proxyShared) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.done == nil {
		s.done = make(chan struct{})
	}
	s.doneOnce.Do(func() { close(s.done) })
	if s.sub != nil {
		s.es.Unsubscribe(s.sub)
		s.sub = nil
	}
}

// end makes every request from now on answered err at once (ProxySession.do).
func (s *proxyShared) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = err
}

// endedWith is the error end set, nil while the session takes requests.
func (s *proxyShared) endedWith() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// isStopped reports whether the actor has stopped (or is stopping).
func (s *proxyShared) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// reply reports whether the asker still waits for the open answer (only the first caller gets true).
func (s *proxyShared) reply() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := !s.replied
	s.replied = true
	return first
}

// openProxy spawns a proxy actor for a CONNECTED or DEGRADED server, within the server's cap, and watches the
// server's state for it. The server actor handles one message at a time, so no state change can slip between the
// check and the subscription.
func (a *serverActor) openProxy(ctx actor.Context, m *openProxy) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&msg.Reply{Err: &routing.UnavailableError{Server: routing.ServerEntry{ID: a.id, Name: a.rec.Name, Status: a.status}}})
		return
	}
	// A per_user server's proxy session runs on its caller's own credential, never on the registration's.
	subject, prefix := "", proxyPrefix
	if perUser(a.rec) {
		if subject = m.opts.Subject; subject == "" {
			ctx.Respond(&msg.Reply{Err: credentialRequiredError(a.rec)})
			return
		}
		prefix = proxyUserPrefix(subject)
	}
	max := m.opts.MaxSessions
	if max <= 0 {
		max = DefaultMaxProxySessions
	}
	n := 0
	for _, c := range ctx.Children() {
		if strings.Contains(c.Id, "/"+proxyPrefix) {
			n++
		}
	}
	if n >= max {
		ctx.Respond(&msg.Reply{Err: fmt.Errorf("server %s has %d proxy sessions: %w", a.rec.Name, n, ErrProxyLimit)})
		return
	}
	shared := &proxyShared{}
	p := &proxyActor{deps: a.deps, rec: a.rec, opts: m.opts, replyTo: ctx.Sender(), shared: shared, subject: subject}
	pid := ctx.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
		c := *p
		c.pending = map[uint64]context.CancelFunc{}
		return &c
	}), prefix)
	a.watchForProxy(pid, shared)
	if subject != "" {
		if a.userProxies == nil {
			a.userProxies = map[string]userProxy{}
		}
		a.userProxies[pid.Id] = userProxy{subject: subject, shared: shared}
	}
	if !m.claim.spawned(pid) {
		ctx.Stop(pid)
	}
	a.log().Info("proxy session opening", "proxy", pid.Id, "proxy_sessions", n+1)
}

// watchForProxy stops the proxy actor pid when its server leaves CONNECTED/DEGRADED or is removed.
func (a *serverActor) watchForProxy(pid *actor.PID, shared *proxyShared) {
	id, sys := a.id, a.sys
	sub := sys.EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *pb.ServerStatusChanged:
			if e.ServerId == id && !callable(e.To) {
				sys.Root.Send(pid, &proxyServerGone{reason: fmt.Sprintf("server %s is %s", e.ServerName, e.To)})
			}
		case *pb.ServerRemoved:
			if e.ServerId == id {
				sys.Root.Send(pid, &proxyServerGone{reason: "server " + e.ServerName + " was removed"})
			}
		}
	})
	shared.setSub(sys.EventStream, sub)
}

// proxyActor owns one upstream session of the per-server proxy: it connects it, runs the front end's requests on
// it (each in a goroutine), and closes it, with the stdio child's process group, when it stops.
type proxyActor struct {
	deps    *Deps
	rec     persistence.Server
	opts    ProxyOptions
	replyTo *actor.PID
	shared  *proxyShared

	sys     *actor.ActorSystem
	self    *actor.PID
	attempt *connectAttempt
	live    *liveSession
	client  *mcp.Client
	pending map[uint64]context.CancelFunc
	next    uint64
	why     error
	// stopping ends, when the actor stops, what the backend's requests are waiting for: the go-sdk closes a
	// session only once its incoming requests have returned.
	stopping context.Context
	stop     context.CancelFunc

	// A caller's own session of a per_user server (proxy_user.go): subject names the caller, whose stored secret
	// is injected into the connection; idle closes it after that long without a request; queued are the requests
	// that came while it connected; secrets scrubs the caller's secret from error texts.
	subject string
	idle    time.Duration
	queued  []queuedRequest
	secrets scrubber
	// relay, on a caller's session (per_user, or a client's own), passes the backend's requests and log messages to
	// the client of the call in flight, as the server's own session does (server_relay.go); nil: ProxyOptions'
	// handlers answer them (the per-server endpoint).
	relay *relayState
}

// queuedRequest is a request that came before the session connected, with whom to answer.
type queuedRequest struct {
	m      *proxyRequest
	sender *actor.PID
}

// Receive implements actor.Actor.
func (p *proxyActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.sys, p.self = ctx.ActorSystem(), ctx.Self()
		if !p.shared.firstStart() {
			// A restarted proxy actor has lost its session: the front end has to open a new one.
			p.why = errors.New("proxy actor restarted")
			ctx.Stop(p.self)
			return
		}
		if p.subject != "" {
			p.startUser(ctx)
			return
		}
		if p.idle > 0 {
			ctx.SetReceiveTimeout(p.idle) // a client's own session of a shared server (proxy_user.go)
		}
		p.connect(ctx, p.rec, p.deps.Backend())
	case *userSecretLoaded:
		p.onUserSecret(ctx, m)
	case *actor.ReceiveTimeout:
		p.onIdle(ctx)
	case *actor.Stopping:
		p.cleanup()
	case *actor.Restarting:
		p.cleanup()
	case *actor.Stopped:
		if h := p.opts.Handlers.Closed; h != nil {
			why := p.why
			go h(why)
		}
	case *proxyConnected:
		p.onConnected(ctx, m)
	case *proxyRequest:
		if !m.taken.CompareAndSwap(false, true) {
			return // the asker gave it up when the actor stopped (ProxySession.ask): it must not run
		}
		p.request(ctx, m, ctx.Sender())
	case *proxyRequestDone:
		delete(p.pending, m.id)
	case *proxyLost:
		if p.live != nil && !p.live.closing.Load() {
			switch {
			case m.err != nil && p.secrets != nil:
				p.why = fmt.Errorf("upstream session ended: %s", p.scrub(m.err.Error()))
			case m.err != nil:
				p.why = fmt.Errorf("upstream session ended: %w", m.err)
			default:
				p.why = errors.New("upstream session closed by the server")
			}
			ctx.Stop(p.self)
		}
	case *proxyServerGone:
		p.why = m.err
		if p.why == nil {
			p.why = errors.New(m.reason)
		}
		ctx.Stop(p.self)
	}
}

// logger prefixes the proxy actor's log lines with its server and its own id.
func (p *proxyActor) logger() *slog.Logger {
	id := ""
	if p.self != nil {
		id = p.self.Id
	}
	return p.deps.Logger.With("server_id", p.rec.ID, "server", p.rec.Name, "proxy", id)
}

// connect builds the backend's transport (resolving ${VAR} now) and connects in a goroutine, bounded by the
// connection timeout, as the server actor's own connect does.
func (p *proxyActor) connect(ctx actor.Context, rec persistence.Server, o backend.Options) {
	b, err := backend.Dial(rec, o)
	if err != nil {
		p.fail(ctx, err)
		return
	}
	sctx, cancel := context.WithCancel(context.Background())
	attempt := &connectAttempt{b: b, cancel: cancel}
	attempt.timer = time.AfterFunc(p.deps.Config.ConnectionTimeout, cancel)
	p.attempt = attempt
	p.stopping, p.stop = context.WithCancel(context.Background())
	impl := p.opts.ClientInfo
	if impl == nil {
		impl = &mcp.Implementation{Name: "mcp-aggregator", Version: Version}
	}
	// The backend's notifications reach the handlers before the response they precede (notifyorder).
	gate := notifyorder.New(p.stopping)
	sys, self := p.sys, p.self
	transport := b.Gate(gate)
	// A task wire, as on the server's own session (tasks_backend.go): a task's call on a caller's session follows
	// the backend's task there (its requests go to that caller).
	w := newTaskWire()
	switch {
	case b.Stdio():
		transport, attempt.tasks = w.transport(transport), w
	case b.WrapStreamable(w.roundTripper):
		attempt.tasks = w
	}
	client := mcp.NewClient(impl, p.clientOptions())
	if p.relay != nil {
		client.AddReceivingMiddleware(relayMiddleware(p.relay, sys))
	} else {
		client.AddReceivingMiddleware(p.requestMiddleware)
	}
	client.AddReceivingMiddleware(gate.Middleware) // outermost: counts a notification once fully handled
	version := proxyProtocolVersion(p.opts.ProtocolVersion)
	timeout := p.deps.Config.ConnectionTimeout
	go func() {
		ok, err := attempt.handOver(sctx, timeout, func() (*mcp.ClientSession, error) {
			return client.Connect(sctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
		})
		if !ok {
			return
		}
		sys.Root.Send(self, &proxyConnected{attempt: attempt, client: client, err: err})
	}()
}

func (p *proxyActor) onConnected(ctx actor.Context, m *proxyConnected) {
	attempt := m.attempt
	sess := attempt.take()
	if attempt != p.attempt {
		attempt.discard(sess)
		return
	}
	p.attempt = nil
	if m.err != nil {
		attempt.release()
		err := m.err
		if exit := attempt.b.ExitReason(); exit != "" {
			err = fmt.Errorf("%s: %w", exit, err)
		}
		if t := strings.TrimSpace(attempt.b.Stderr()); t != "" {
			err = fmt.Errorf("%w; stderr: %s", err, stderrSummary(t))
		}
		p.fail(ctx, err)
		return
	}
	live := &liveSession{session: sess, b: attempt.b, cancel: attempt.cancel, tasks: attempt.tasks}
	p.live, p.client = live, m.client
	sys, self := p.sys, p.self
	go func() {
		err := sess.Wait()
		sys.Root.Send(self, &proxyLost{err: err})
	}()
	if p.shared.reply() && p.replyTo != nil {
		ctx.Send(p.replyTo, &proxyOpened{pid: p.self, init: sess.InitializeResult(), shared: p.shared})
	}
	p.logger().Info("proxy session connected", "protocol_version", sess.InitializeResult().ProtocolVersion)
	if p.relay != nil {
		backendLogging(sess, p.deps.Config.RequestTimeout, p.logger())
	}
	queued := p.queued
	p.queued = nil
	for _, q := range queued {
		p.request(ctx, q.m, q.sender)
	}
}

// fail answers the asker with the connect error and stops. The error's text never holds the caller's secret.
func (p *proxyActor) fail(ctx actor.Context, err error) {
	switch {
	case errors.Is(err, ErrCredentialRequired), errors.Is(err, backendauth.ErrReauthorize):
		// No credential, or an OAuth grant that cannot give a token (its refresh refused, an exchanged token
		// expired): the caller is asked as one without a credential.
		err = credentialRequiredError(p.rec)
	case p.secrets != nil:
		err = fmt.Errorf("%w: %s", ErrProxyConnect, p.scrub(err.Error()))
	default:
		err = fmt.Errorf("%w: %w", ErrProxyConnect, err)
	}
	p.why = err
	if p.shared.reply() && p.replyTo != nil {
		ctx.Send(p.replyTo, &msg.Reply{Err: p.why})
	}
	if errors.Is(err, ErrCredentialRequired) {
		p.logger().Info("caller's session not opened: no credential of their own")
	} else {
		p.logger().Warn("proxy session connect failed", "error", p.scrub(err.Error()))
	}
	ctx.Stop(p.self)
}

// scrubFunc is scrub for a reply, nil when the session has no secret of its own.
func (p *proxyActor) scrubFunc() func(string) string {
	if p.secrets == nil {
		return nil
	}
	return p.secrets.Scrub
}

// scrub removes the session's own secrets from a text (nothing for a session without a caller's credential).
func (p *proxyActor) scrub(text string) string {
	if p.secrets == nil {
		return text
	}
	return p.secrets.Scrub(text)
}

// request runs one front-end request on the session in a goroutine and answers the asker from there.
func (p *proxyActor) request(ctx actor.Context, m *proxyRequest, sender *actor.PID) {
	if p.live == nil {
		if p.idle > 0 && p.why == nil {
			// A caller's session still connecting: the request runs once it is up (or fails with it).
			p.queued = append(p.queued, queuedRequest{m: m, sender: sender})
			return
		}
		if sender != nil {
			err := ErrProxyClosed
			if p.why != nil {
				err = p.why
			}
			ctx.Send(sender, &proxyReply{err: err, scrub: p.scrubFunc()})
		}
		return
	}
	// A fresh context: the request's deadline and cancellation, but none of the front end's values (the
	// downstream transport's request ids must not leak into the upstream session).
	rctx, cancel := context.WithDeadline(context.Background(), m.deadline)
	stop := context.AfterFunc(m.ctx, cancel)
	p.next++
	id := p.next
	p.pending[id] = cancel
	up := proxyUpstream{client: p.client, sess: p.live.session, tasks: p.live.tasks}
	sys, self, rec := p.sys, p.self, p.rec
	scrub := p.scrubFunc()
	go func() {
		defer cancel()
		defer stop()
		res, err := m.do(rctx, up)
		if errors.Is(err, backendauth.ErrReauthorize) && rejectedByTransport(err) {
			// The caller's OAuth grant could not give a token the backend takes, and renewing it failed: the
			// request was not run (never sent, or refused with 401), so it is the caller's CREDENTIAL_REQUIRED, as
			// for a session that could not open, not the transport's rejection.
			err = credentialRequiredError(rec)
		}
		sys.Root.Send(self, &proxyRequestDone{id: id})
		if sender != nil {
			sys.Root.Send(sender, &proxyReply{res: res, err: err, scrub: scrub})
		}
	}()
}

// cleanup cancels requests in flight and closes the session and its child process synchronously, so that a server
// actor (and a Remove or Shutdown waiting on it) stops only after its proxy sessions are gone.
func (p *proxyActor) cleanup() {
	p.shared.stop()
	if p.stop != nil {
		p.stop()
	}
	if p.attempt != nil {
		p.attempt.abandon()
		p.attempt = nil
	}
	for _, cancel := range p.pending {
		cancel()
	}
	if p.live != nil {
		p.live.close()
		p.live = nil
	}
	if p.why == nil {
		p.why = ErrProxyClosed
	}
	for _, q := range p.queued {
		if q.sender != nil && p.sys != nil {
			p.sys.Root.Send(q.sender, &proxyReply{err: p.why, scrub: p.scrubFunc()})
		}
	}
	p.queued = nil
	if p.replyTo != nil && p.shared.reply() && p.sys != nil {
		p.sys.Root.Send(p.replyTo, &msg.Reply{Err: fmt.Errorf("%w: %w", ErrProxyConnect, p.why)})
	}
}
