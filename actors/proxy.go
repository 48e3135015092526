package actors

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Proxy sessions: the per-server transparent endpoint (/mcp/servers/{name}) gives every downstream MCP session its
// own upstream session to the backend, because MCP sessions are stateful (subscriptions, log level, roots, sampling
// and elicitation belong to one client). Each upstream session is owned by a proxy actor, a child of the server's
// actor: deleting the server or shutting the daemon down stops the server actor and with it every proxy session and
// its stdio child process, and a proxy actor stops itself when its server leaves CONNECTED/DEGRADED (disconnect,
// failure, configuration change).

// DefaultMaxProxySessions caps the proxy sessions of one server when ProxyOptions.MaxSessions is 0. Over stdio every
// proxy session runs its own child process, so the cap also bounds the processes one server can cost.
const DefaultMaxProxySessions = 32

var (
	// ErrProxyLimit means the server already has its maximum number of proxy sessions.
	ErrProxyLimit = errors.New("too many proxy sessions for this server")
	// ErrProxyConnect means the proxy session could not connect to (or initialize) the backend.
	ErrProxyConnect = errors.New("proxy session could not connect to the server")
	// ErrProxyClosed means the proxy session has ended (closed, server disconnected or removed, backend gone).
	ErrProxyClosed = errors.New("proxy session closed")
)

// ProxyHandlers receive what the backend sends on a proxy session. They are called on the go-sdk's goroutines, not
// on an actor's: the notification handlers run in the order the backend sent the notifications, before the answer
// of a request sent after them is delivered, so a progress or log notification reaches the front end before the
// result it precedes. They must not block for long. The request handlers (CreateMessage, Elicit, ListRoots) run
// each in its own goroutine and may block until the downstream client answers; a nil request handler answers
// "method not found". Any handler may be nil.
type ProxyHandlers struct {
	ToolListChanged     func(ctx context.Context)
	PromptListChanged   func(ctx context.Context)
	ResourceListChanged func(ctx context.Context)
	ResourceUpdated     func(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams)
	Log                 func(ctx context.Context, p *mcp.LoggingMessageParams)
	Progress            func(ctx context.Context, p *mcp.ProgressNotificationParams)
	ElicitationComplete func(ctx context.Context, p *mcp.ElicitationCompleteParams)

	CreateMessage func(ctx context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error)
	Elicit        func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	ListRoots     func(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error)

	// Closed is called once, on its own goroutine, when the proxy session has ended for whatever reason (Close
	// included); err says why (ErrProxyClosed after Close).
	Closed func(err error)
}

// ProxyOptions describe the downstream client a proxy session stands for, so that the backend sees that client's
// identity, capabilities and protocol version.
type ProxyOptions struct {
	// ClientInfo is sent to the backend in initialize; nil sends the aggregator's own.
	ClientInfo *mcp.Implementation
	// Capabilities are the downstream client's capabilities, advertised to the backend as they are (roots in
	// RootsV2). Nil advertises none.
	Capabilities *mcp.ClientCapabilities
	// ProtocolVersion is the version the downstream client asked for; the backend is offered it when the go-sdk
	// speaks it through the initialize handshake, else ProtocolVersion (the aggregator's pinned version).
	ProtocolVersion string
	// MaxSessions caps the proxy sessions of the server (DefaultMaxProxySessions when 0).
	MaxSessions int
	Handlers    ProxyHandlers
}

// ProxySession is one upstream session to a backend, owned by a proxy actor. Its methods ask that actor, which runs
// each request in its own goroutine: a slow request never holds another one. Every request is bounded by the
// request timeout (or ctx's earlier deadline) and cancelled at the backend when ctx ends.
type ProxySession struct {
	sys    *System
	pid    *actor.PID
	server ServerEntry
	init   *mcp.InitializeResult
	once   sync.Once
}

// proxyUpstream is what a request runs against: the session and its client (which sends roots/list_changed).
type proxyUpstream struct {
	client *mcp.Client
	sess   *mcp.ClientSession
}

// Local messages of the proxy machinery.
type (
	// openProxy asks a server actor for a new proxy session; the proxy actor answers the asker once connected.
	openProxy struct {
		opts  ProxyOptions
		claim *proxyClaim
	}
	proxyOpened struct {
		pid  *actor.PID
		init *mcp.InitializeResult
	}
	proxyConnected struct {
		att    *connectAttempt
		client *mcp.Client
		err    error
	}
	proxyRequest struct {
		ctx      context.Context
		deadline time.Time
		do       func(context.Context, proxyUpstream) (any, error)
	}
	proxyReply struct {
		res any
		err error
	}
	proxyRequestDone struct{ id uint64 }
	proxyLost        struct{ err error }
	proxyServerGone  struct{ reason string }
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
	if s.sub != nil {
		s.es.Unsubscribe(s.sub)
		s.sub = nil
	}
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
		ctx.Respond(&regResult{err: &UnavailableError{Server: ServerEntry{ID: a.id, Name: a.rec.Name, Status: a.status}}})
		return
	}
	max := m.opts.MaxSessions
	if max <= 0 {
		max = DefaultMaxProxySessions
	}
	n := 0
	for _, c := range ctx.Children() {
		if strings.Contains(c.Id, "/proxy-") {
			n++
		}
	}
	if n >= max {
		ctx.Respond(&regResult{err: fmt.Errorf("server %s has %d proxy sessions: %w", a.rec.Name, n, ErrProxyLimit)})
		return
	}
	shared := &proxyShared{}
	p := &proxyActor{d: a.d, rec: a.rec, opts: m.opts, replyTo: ctx.Sender(), shared: shared}
	pid := ctx.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
		c := *p
		c.pending = map[uint64]context.CancelFunc{}
		return &c
	}), "proxy-")
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
	if !m.claim.spawned(pid) {
		ctx.Stop(pid)
	}
	a.log().Info("proxy session opening", "proxy", pid.Id, "proxy_sessions", n+1)
}

// proxyActor owns one upstream session of the per-server proxy: it connects it, runs the front end's requests on
// it (each in a goroutine), and closes it, with the stdio child's process group, when it stops.
type proxyActor struct {
	d       *Deps
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
		p.connect(ctx)
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
		p.request(ctx, m)
	case *proxyRequestDone:
		delete(p.pending, m.id)
	case *proxyLost:
		if p.live != nil && !p.live.closing.Load() {
			if m.err != nil {
				p.why = fmt.Errorf("upstream session ended: %w", m.err)
			} else {
				p.why = errors.New("upstream session closed by the server")
			}
			ctx.Stop(p.self)
		}
	case *proxyServerGone:
		p.why = errors.New(m.reason)
		ctx.Stop(p.self)
	}
}

// logger prefixes the proxy actor's log lines with its server and its own id.
func (p *proxyActor) logger() *slog.Logger {
	id := ""
	if p.self != nil {
		id = p.self.Id
	}
	return p.d.Logger.With("server_id", p.rec.ID, "server", p.rec.Name, "proxy", id)
}

// connect builds the backend's transport (resolving ${VAR} now) and connects in a goroutine, bounded by the
// connection timeout, as the server actor's own connect does.
func (p *proxyActor) connect(ctx actor.Context) {
	b, err := buildTransport(p.rec, p.d, p.d.newGuard())
	if err != nil {
		p.fail(ctx, err)
		return
	}
	sctx, cancel := context.WithCancel(context.Background())
	att := &connectAttempt{b: b, cancel: cancel}
	att.timer = time.AfterFunc(p.d.Config.ConnectionTimeout, cancel)
	p.attempt = att
	p.stopping, p.stop = context.WithCancel(context.Background())
	impl := p.opts.ClientInfo
	if impl == nil {
		impl = &mcp.Implementation{Name: "mcp-aggregator", Version: Version}
	}
	gate := newNotificationGate(p.stopping)
	transport := gate.gate(b)
	client := mcp.NewClient(impl, p.clientOptions())
	client.AddReceivingMiddleware(p.requestMiddleware)
	client.AddReceivingMiddleware(gate.middleware) // outermost: counts a notification once fully handled
	version := proxyProtocolVersion(p.opts.ProtocolVersion)
	sys, self, timeout := p.sys, p.self, p.d.Config.ConnectionTimeout
	go func() {
		ok, err := att.handOver(sctx, timeout, func() (*mcp.ClientSession, error) {
			return client.Connect(sctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
		})
		if !ok {
			return
		}
		sys.Root.Send(self, &proxyConnected{att: att, client: client, err: err})
	}()
}

// proxyProtocolVersion offers the backend the downstream client's version when the initialize handshake speaks it.
func proxyProtocolVersion(want string) string {
	if want != "" && want < "2026-07-28" {
		for _, v := range mcp.SupportedProtocolVersions() {
			if v == want {
				return want
			}
		}
	}
	return ProtocolVersion
}

// clientOptions advertise exactly the downstream client's capabilities and route what the backend sends to the
// handlers.
func (p *proxyActor) clientOptions() *mcp.ClientOptions {
	h := p.opts.Handlers
	// With Capabilities set, the go-sdk advertises roots from RootsV2 only, and nothing it was not told.
	caps := &mcp.ClientCapabilities{}
	if c := p.opts.Capabilities; c != nil {
		*caps = *c
	}
	o := &mcp.ClientOptions{Capabilities: caps}
	if p.rec.TransportType != persistence.TransportSTDIO {
		o.KeepAlive = p.d.Config.KeepAlive
	}
	if f := h.ToolListChanged; f != nil {
		o.ToolListChangedHandler = func(ctx context.Context, _ *mcp.ToolListChangedRequest) { f(ctx) }
	}
	if f := h.PromptListChanged; f != nil {
		o.PromptListChangedHandler = func(ctx context.Context, _ *mcp.PromptListChangedRequest) { f(ctx) }
	}
	if f := h.ResourceListChanged; f != nil {
		o.ResourceListChangedHandler = func(ctx context.Context, _ *mcp.ResourceListChangedRequest) { f(ctx) }
	}
	if f := h.ResourceUpdated; f != nil {
		o.ResourceUpdatedHandler = func(ctx context.Context, r *mcp.ResourceUpdatedNotificationRequest) { f(ctx, r.Params) }
	}
	if f := h.Log; f != nil {
		o.LoggingMessageHandler = func(ctx context.Context, r *mcp.LoggingMessageRequest) { f(ctx, r.Params) }
	}
	if f := h.Progress; f != nil {
		o.ProgressNotificationHandler = func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) { f(ctx, r.Params) }
	}
	if f := h.ElicitationComplete; f != nil {
		o.ElicitationCompleteHandler = func(ctx context.Context, r *mcp.ElicitationCompleteNotificationRequest) { f(ctx, r.Params) }
	}
	// The handlers are set only with the matching capability: the go-sdk infers a capability from a handler.
	if f := h.CreateMessage; f != nil && caps.Sampling != nil {
		o.CreateMessageWithToolsHandler = func(ctx context.Context, r *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			ctx, cancel := p.bound(ctx)
			defer cancel()
			return f(ctx, r.Params)
		}
	}
	if f := h.Elicit; f != nil && caps.Elicitation != nil {
		o.ElicitationHandler = func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ctx, cancel := p.bound(ctx)
			defer cancel()
			return f(ctx, r.Params)
		}
	}
	return o
}

// requestMiddleware passes the backend's roots/list and elicitation/create to the downstream client untouched: the
// go-sdk client would answer roots/list from its own root list, and would check an elicitation's schema itself
// (refusing some the downstream client accepts) before calling the handler. The downstream client decides.
func (p *proxyActor) requestMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		caps := p.opts.Capabilities
		switch method {
		case "roots/list":
			f := p.opts.Handlers.ListRoots
			if f == nil || caps == nil || caps.RootsV2 == nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "client does not support roots"}
			}
			params, _ := req.GetParams().(*mcp.ListRootsParams)
			ctx, cancel := p.bound(ctx)
			defer cancel()
			return f(ctx, params)
		case "elicitation/create":
			f := p.opts.Handlers.Elicit
			params, ok := req.GetParams().(*mcp.ElicitParams)
			if f == nil || caps == nil || caps.Elicitation == nil || !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "client does not support elicitation"}
			}
			ctx, cancel := p.bound(ctx)
			defer cancel()
			return f(ctx, params)
		}
		return next(ctx, method, req)
	}
}

// bound is ctx, also cancelled when the actor stops.
func (p *proxyActor) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.stopping, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

func (p *proxyActor) onConnected(ctx actor.Context, m *proxyConnected) {
	att := m.att
	att.mu.Lock()
	sess := att.sess
	att.sess = nil
	att.mu.Unlock()
	if att != p.attempt {
		if sess != nil {
			_ = sess.Close()
		}
		att.cancel()
		att.b.kill()
		att.b.closeIdle()
		return
	}
	p.attempt = nil
	if m.err != nil {
		att.cancel()
		att.b.kill()
		att.b.closeIdle()
		err := m.err
		if exit := att.b.exitReason(); exit != "" {
			err = fmt.Errorf("%s: %w", exit, err)
		}
		if att.b.stderr != nil {
			if t := strings.TrimSpace(att.b.stderr.String()); t != "" {
				err = fmt.Errorf("%w; stderr: %s", err, stderrSummary(t))
			}
		}
		p.fail(ctx, err)
		return
	}
	live := &liveSession{session: sess, b: att.b, cancel: att.cancel}
	p.live, p.client = live, m.client
	sys, self := p.sys, p.self
	go func() {
		err := sess.Wait()
		sys.Root.Send(self, &proxyLost{err: err})
	}()
	if p.shared.reply() {
		ctx.Send(p.replyTo, &proxyOpened{pid: p.self, init: sess.InitializeResult()})
	}
	p.logger().Info("proxy session connected", "protocol_version", sess.InitializeResult().ProtocolVersion)
}

// fail answers the asker with the connect error and stops.
func (p *proxyActor) fail(ctx actor.Context, err error) {
	p.why = fmt.Errorf("%w: %w", ErrProxyConnect, err)
	if p.shared.reply() {
		ctx.Send(p.replyTo, &regResult{err: p.why})
	}
	p.logger().Warn("proxy session connect failed", "error", err)
	ctx.Stop(p.self)
}

// request runs one front-end request on the session in a goroutine and answers the asker from there.
func (p *proxyActor) request(ctx actor.Context, m *proxyRequest) {
	if p.live == nil {
		ctx.Respond(&proxyReply{err: ErrProxyClosed})
		return
	}
	// A fresh context: the request's deadline and cancellation, but none of the front end's values (the
	// downstream transport's request ids must not leak into the upstream session).
	rctx, cancel := context.WithDeadline(context.Background(), m.deadline)
	stop := context.AfterFunc(m.ctx, cancel)
	p.next++
	id := p.next
	p.pending[id] = cancel
	up := proxyUpstream{client: p.client, sess: p.live.session}
	sender, sys, self := ctx.Sender(), p.sys, p.self
	go func() {
		defer cancel()
		defer stop()
		res, err := m.do(rctx, up)
		sys.Root.Send(self, &proxyRequestDone{id: id})
		if sender != nil {
			sys.Root.Send(sender, &proxyReply{res: res, err: err})
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
	if p.replyTo != nil && p.shared.reply() && p.sys != nil {
		p.sys.Root.Send(p.replyTo, &regResult{err: fmt.Errorf("%w: %w", ErrProxyConnect, p.why)})
	}
}

// OpenProxySession opens a new upstream session to the server named serverName for one downstream client. It
// fails with persistence.ErrNotFound for an unknown name, *UnavailableError when the server is not CONNECTED or
// DEGRADED, ErrProxyLimit at the cap and ErrProxyConnect when the backend refuses the session. It waits for the
// backend's initialize, bounded by the connection timeout and ctx.
func (s *System) OpenProxySession(ctx context.Context, serverName string, opts ProxyOptions) (*ProxySession, error) {
	srv, ok := s.Routes().ServerByName(serverName)
	if !ok {
		return nil, fmt.Errorf("server %s: %w", serverName, persistence.ErrNotFound)
	}
	if !callable(srv.Status) {
		return nil, &UnavailableError{Server: srv}
	}
	claim := &proxyClaim{}
	type answer struct {
		res any
		err error
	}
	ch := make(chan answer, 1)
	timeout := s.d.Config.ConnectionTimeout + s.d.Config.AskTimeout
	go func() {
		res, err := s.askActor(context.WithoutCancel(ctx), s.serverPID(srv.ID), &openProxy{opts: opts, claim: claim}, timeout)
		ch <- answer{res, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		a.err = fmt.Errorf("open proxy session: %w", ctx.Err())
	}
	if a.err == nil {
		if opened, ok := a.res.(*proxyOpened); ok {
			return &ProxySession{sys: s, pid: opened.pid, server: srv, init: opened.init}, nil
		}
		a.err = fmt.Errorf("unexpected reply %T to open proxy", a.res)
	}
	if pid := claim.abandon(); pid != nil {
		s.sys.Root.Stop(pid)
	}
	if errors.Is(a.err, ErrShuttingDown) {
		// The server actor is gone: removed meanwhile, or the daemon is stopping.
		return nil, fmt.Errorf("server %s: %w", serverName, persistence.ErrNotFound)
	}
	return nil, a.err
}

// Server is the server this session proxies (as the routing table knew it when the session opened).
func (p *ProxySession) Server() ServerEntry { return p.server }

// InitializeResult is the backend's answer to initialize: its capabilities, instructions, info and version.
func (p *ProxySession) InitializeResult() *mcp.InitializeResult { return p.init }

// Close ends the upstream session (and its child process) and waits until the proxy actor has stopped. It is
// idempotent.
func (p *ProxySession) Close() error {
	var err error
	p.once.Do(func() {
		if werr := p.sys.sys.Root.StopFuture(p.pid).Wait(); werr != nil && !errors.Is(werr, actor.ErrDeadLetter) {
			err = fmt.Errorf("stop proxy session: %w", werr)
		}
	})
	return err
}

// do asks the proxy actor to run fn on the session.
func (p *ProxySession) do(ctx context.Context, fn func(context.Context, proxyUpstream) (any, error)) (any, error) {
	deadline := p.sys.callDeadline(ctx)
	res, err := p.sys.askActor(ctx, p.pid, &proxyRequest{ctx: ctx, deadline: deadline, do: fn}, time.Until(deadline)+time.Second)
	if errors.Is(err, ErrShuttingDown) {
		return nil, ErrProxyClosed
	}
	if err != nil {
		return nil, err
	}
	r, ok := res.(*proxyReply)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T to proxy request", res)
	}
	return r.res, r.err
}

// proxyCall runs one typed request on the session.
func proxyCall[R any](ctx context.Context, p *ProxySession, fn func(context.Context, proxyUpstream) (R, error)) (R, error) {
	res, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) { return fn(ctx, up) })
	if err != nil {
		var zero R
		return zero, err
	}
	return res.(R), nil
}

// CallTool forwards tools/call; params (with their _meta and progress token) reach the backend unchanged.
func (p *ProxySession) CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) (*mcp.CallToolResult, error) {
		return up.sess.CallTool(ctx, params)
	})
}

// GetPrompt forwards prompts/get.
func (p *ProxySession) GetPrompt(ctx context.Context, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) (*mcp.GetPromptResult, error) {
		return up.sess.GetPrompt(ctx, params)
	})
}

// ReadResource forwards resources/read.
func (p *ProxySession) ReadResource(ctx context.Context, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) (*mcp.ReadResourceResult, error) {
		return up.sess.ReadResource(ctx, params)
	})
}

// Complete forwards completion/complete.
func (p *ProxySession) Complete(ctx context.Context, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) (*mcp.CompleteResult, error) {
		return up.sess.Complete(ctx, params)
	})
}

// Subscribe forwards resources/subscribe.
func (p *ProxySession) Subscribe(ctx context.Context, params *mcp.SubscribeParams) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) { return nil, up.sess.Subscribe(ctx, params) })
	return err
}

// Unsubscribe forwards resources/unsubscribe.
func (p *ProxySession) Unsubscribe(ctx context.Context, params *mcp.UnsubscribeParams) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) { return nil, up.sess.Unsubscribe(ctx, params) })
	return err
}

// SetLoggingLevel forwards logging/setLevel.
func (p *ProxySession) SetLoggingLevel(ctx context.Context, params *mcp.SetLoggingLevelParams) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) {
		return nil, up.sess.SetLoggingLevel(ctx, params)
	})
	return err
}

// Ping pings the backend.
func (p *ProxySession) Ping(ctx context.Context) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) { return nil, up.sess.Ping(ctx, nil) })
	return err
}

// NotifyProgress forwards a downstream client's progress notification (for a request the backend made).
func (p *ProxySession) NotifyProgress(ctx context.Context, params *mcp.ProgressNotificationParams) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) {
		return nil, up.sess.NotifyProgress(ctx, params)
	})
	return err
}

// NotifyRootsListChanged tells the backend that the downstream client's roots changed. The go-sdk client sends
// notifications/roots/list_changed only when its own root list changes, so a marker root is (re)added; the backend
// never sees it, since roots/list is answered by the downstream client.
func (p *ProxySession) NotifyRootsListChanged(ctx context.Context) error {
	_, err := p.do(ctx, func(ctx context.Context, up proxyUpstream) (any, error) {
		up.client.AddRoots(&mcp.Root{URI: "urn:mcp-aggregator:proxy-roots-changed"})
		return nil, nil
	})
	return err
}

// ListTools lists every tool of the backend, following pagination to the end.
func (p *ProxySession) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) ([]*mcp.Tool, error) {
		return collect(up.sess.Tools(ctx, nil))
	})
}

// ListPrompts lists every prompt of the backend.
func (p *ProxySession) ListPrompts(ctx context.Context) ([]*mcp.Prompt, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) ([]*mcp.Prompt, error) {
		return collect(up.sess.Prompts(ctx, nil))
	})
}

// ListResources lists every resource of the backend.
func (p *ProxySession) ListResources(ctx context.Context) ([]*mcp.Resource, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) ([]*mcp.Resource, error) {
		return collect(up.sess.Resources(ctx, nil))
	})
}

// ListResourceTemplates lists every resource template of the backend.
func (p *ProxySession) ListResourceTemplates(ctx context.Context) ([]*mcp.ResourceTemplate, error) {
	return proxyCall(ctx, p, func(ctx context.Context, up proxyUpstream) ([]*mcp.ResourceTemplate, error) {
		return collect(up.sess.ResourceTemplates(ctx, nil))
	})
}

func collect[T any](seq func(func(T, error) bool)) ([]T, error) {
	out := []T{}
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Ordering. The backend sends a request's notifications (progress, log messages) before its response, and the
// front end must forward them before it answers the downstream client, or they arrive after the answer (when the
// downstream request's stream is already closed). The go-sdk client does not keep that order: its reader hands a
// response to the waiting caller at once, while notifications wait in the handler queue, so the last progress
// notification of a call often reaches its handler after the call has returned (directly against a backend too).
// The gate restores the order for a proxy session: the transport counts the notifications it passes up, the
// client's outermost middleware counts those handled, and a response is passed up only once every notification
// read before it has been handled (or after gateWait, for a notification the go-sdk dropped as malformed).

// gateWait bounds how long a response waits for the notifications before it.
const gateWait = 5 * time.Second

// gated reports whether a notification reaches the client's middleware (notifications/cancelled does not: the
// go-sdk handles it itself), and so is counted by the gate.
func gated(method string) bool {
	switch method {
	case "notifications/progress", "notifications/message", "notifications/resources/updated",
		"notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/resources/list_changed", "notifications/elicitation/complete":
		return true
	}
	return false
}

type notificationGate struct {
	stopping context.Context
	mu       sync.Mutex
	read     uint64
	handled  uint64
	changed  chan struct{} // closed and replaced whenever handled moves
}

func newNotificationGate(stopping context.Context) *notificationGate {
	return &notificationGate{stopping: stopping, changed: make(chan struct{})}
}

// saw counts a notification passed up by the transport.
func (g *notificationGate) saw(method string) {
	if gated(method) {
		g.mu.Lock()
		g.read++
		g.mu.Unlock()
	}
}

// wait returns once every notification counted so far has been handled, or after gateWait (the missing ones are
// then forgiven, so that a lost notification delays one response, not all later ones).
func (g *notificationGate) wait(ctx context.Context) {
	g.mu.Lock()
	target := g.read
	g.mu.Unlock()
	t := time.NewTimer(gateWait)
	defer t.Stop()
	for {
		g.mu.Lock()
		if g.handled >= target {
			g.mu.Unlock()
			return
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-g.stopping.Done():
			return
		case <-t.C:
			g.mu.Lock()
			if g.handled < target {
				g.handled = target
				close(g.changed)
				g.changed = make(chan struct{})
			}
			g.mu.Unlock()
			return
		}
	}
}

// middleware counts the notifications handled; it must be the client's outermost receiving middleware.
func (g *notificationGate) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !gated(method) {
			return next(ctx, method, req)
		}
		defer func() {
			g.mu.Lock()
			g.handled++
			close(g.changed)
			g.changed = make(chan struct{})
			g.mu.Unlock()
		}()
		return next(ctx, method, req)
	}
}

// gate puts the gate under a built transport: around the connection for stdio, around the HTTP bodies for SSE and
// streamable HTTP (whose connection the go-sdk must see unwrapped).
func (g *notificationGate) gate(b *built) mcp.Transport {
	if b.client != nil {
		base := b.client.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		b.client.Transport = &gatedRoundTripper{base: base, gate: g}
		return b.transport
	}
	return &gatedTransport{Transport: b.transport, gate: g}
}

type gatedTransport struct {
	mcp.Transport
	gate *notificationGate
}

func (t *gatedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Connection: c, gate: t.gate}, nil
}

type gatedConn struct {
	mcp.Connection
	gate *notificationGate
}

func (c *gatedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() {
			c.gate.saw(m.Method)
		}
	case *jsonrpc.Response:
		c.gate.wait(ctx)
	}
	return msg, err
}

type gatedRoundTripper struct {
	base http.RoundTripper
	gate *notificationGate
}

func (t *gatedRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		resp.Body = &gatedSSE{body: resp.Body, r: bufio.NewReader(resp.Body), gate: t.gate, ctx: r.Context()}
	case "application/json":
		resp.Body = &gatedJSON{ReadCloser: resp.Body, gate: t.gate, ctx: r.Context()}
	}
	return resp, nil
}

// gatedJSON holds a JSON answer (a response) back until the notifications before it are handled.
type gatedJSON struct {
	io.ReadCloser
	gate   *notificationGate
	ctx    context.Context
	waited bool
}

func (b *gatedJSON) Read(p []byte) (int, error) {
	if !b.waited {
		b.waited = true
		b.gate.wait(b.ctx)
	}
	return b.ReadCloser.Read(p)
}

// gatedSSE passes an event stream up event by event, counting notifications and holding responses back.
type gatedSSE struct {
	body    io.ReadCloser
	r       *bufio.Reader
	gate    *notificationGate
	ctx     context.Context
	pending []byte
	err     error
}

func (b *gatedSSE) Close() error { return b.body.Close() }

func (b *gatedSSE) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.next()
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// next reads one event (up to its blank line, or the end of the stream) and classifies its data.
func (b *gatedSSE) next() {
	var event, data []byte
	for {
		line, err := b.r.ReadBytes('\n')
		event = append(event, line...)
		trimmed := bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
		if err != nil {
			b.err = err
			break
		}
		if len(trimmed) == 0 {
			break
		}
	}
	if len(data) > 0 {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(data, &m) == nil {
			switch {
			case m.Method != "" && len(m.ID) == 0:
				b.gate.saw(m.Method)
			case m.Method == "" && len(m.ID) > 0:
				b.gate.wait(b.ctx)
			}
		}
	}
	b.pending = event
}
