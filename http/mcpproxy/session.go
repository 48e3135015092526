package mcpproxy

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/internal/telemetry"
)

// errMirror means the backend's lists could not be mirrored for a new session.
var errMirror = errors.New("mirroring the backend's lists failed")

// errClosed is what server->client requests get once the session has ended.
var errClosed = errors.New("proxy session closed")

const (
	// readyWait bounds how long a backend's request waits for the downstream client to finish initializing.
	readyWait = 30 * time.Second
	// streamWait bounds how long a message unrelated to any request waits for a standalone stream to open.
	streamWait = 5 * time.Second
	// codeRejected is the go-sdk transport's "rejected by transport" (no stream to write to).
	codeRejected = -32005
)

// Mirrored lists, indexes into session.kicks.
const (
	kindTools = iota
	kindPrompts
	kindResources
	kinds
)

// session is one downstream session and its upstream proxy session.
type session struct {
	h      *Handler
	srv    routing.ServerEntry
	log    *slog.Logger
	server *mcp.Server

	life   context.Context // ends with the session
	cancel context.CancelFunc
	once   sync.Once
	ready  chan struct{} // closed when the downstream client sent notifications/initialized
	rOnce  sync.Once
	kicks  [kinds]chan struct{}
	// recurate asks the sync goroutine to apply the routing table's curation to the tools again (no backend call).
	recurate chan struct{}

	// The client that opened the session: its token's name (or OAuth subject and claims), and whether profile
	// bindings apply to it (a client; not an admin, not auth off). Its bound profiles are read from the routing
	// table each time.
	client     routing.Caller
	restricted bool
	// caller is the whole identity, for the access policy (accesspolicy.go); filtered says its rules left tools
	// out of the mirror last time.
	caller   auth.Identity
	filtered bool
	// latest is the caller's identity as its last request came (under mu): the OAuth access token a renewal
	// exchanges, the newest one the client has (its own token expires too).
	latest auth.Identity

	mu sync.Mutex
	// up is the upstream session, replaced underneath the client's session when the caller's credential changes
	// (replaceUpstream): read it with upstream. upGen counts the replacements (the handlers of an upstream session
	// that is no longer current are ignored); upChanged is closed at the next replacement.
	up        *actors.ProxySession
	upOpts    actors.ProxyOptions
	upGen     uint64
	upChanged chan struct{}
	// What the client set on the upstream session, set again on a replacement: its log level, its subscriptions.
	level    *mcp.SetLoggingLevelParams
	subs     map[string]bool
	ss       *mcp.ServerSession
	sid      string
	seq      uint64
	flights  map[uint64]*flight
	tokens   map[string]*flight
	streams  int
	streamCh chan struct{} // closed while a standalone stream is open
	lastSeen time.Time     // the last request of the client
	reaper   *time.Timer   // armed while no standalone stream is open after one was

	// The mirror (name or URI -> JSON of what was added); owned by build and then by the sync goroutine.
	mirror [kinds]map[string]string
	tmpls  map[string]string
	// upTools is the backend's own tool list as last fetched (owned like the mirror): curation filters it;
	// curated says whether the mirror holds it curated.
	upTools []*mcp.Tool
	curated bool
}

// flight is a downstream request being forwarded: backend messages that belong to it are sent on its stream.
type flight struct {
	ctx    context.Context
	method string
	seq    uint64
	token  string
}

// open opens the upstream session for a new downstream session and builds the session's server from it.
func (h *Handler) open(ctx context.Context, srv routing.ServerEntry, init initRequest, caller auth.Identity) (*session, error) {
	life, cancel := context.WithCancel(context.Background())
	s := &session{lastSeen: time.Now(),
		h: h, srv: srv, log: h.log.With("server", srv.Name), life: life, cancel: cancel,
		ready: make(chan struct{}), flights: map[uint64]*flight{}, tokens: map[string]*flight{},
		streamCh: make(chan struct{}), tmpls: map[string]string{}, recurate: make(chan struct{}, 1),
		client: gateway.CallerOf(caller), restricted: bindable(caller), caller: caller, latest: caller,
		upChanged: make(chan struct{}), subs: map[string]bool{},
	}
	for i := range s.kicks {
		s.kicks[i] = make(chan struct{}, 1)
		s.mirror[i] = map[string]string{}
	}
	s.upOpts = actors.ProxyOptions{
		ClientInfo: init.ClientInfo, Capabilities: init.Capabilities, ProtocolVersion: init.ProtocolVersion,
		MaxSessions: h.opts.MaxSessionsPerServer,
		// A per_user server's session runs on this caller's own credential (and is replaced when it changes); an
		// exchanged OAuth grant is renewed by exchanging the caller's token again, as /mcp does for a call.
		Subject: gateway.CredentialSubject(caller), Renew: s.renew,
	}
	opts := s.upOpts
	opts.Handlers = s.handlers(0)
	up, err := h.sys.OpenProxySession(ctx, srv.Name, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	s.mu.Lock()
	s.up = up
	s.mu.Unlock()
	if err := s.build(ctx); err != nil {
		s.close(err)
		return nil, fmt.Errorf("%w: %w", errMirror, err)
	}
	go s.syncLoop()
	return s, nil
}

// build makes the session's server: the backend's info, capabilities, instructions and protocol version, its
// lists mirrored, and every request forwarded.
func (s *session) build(ctx context.Context) error {
	init := s.upstream().InitializeResult()
	caps := &mcp.ServerCapabilities{}
	if init.Capabilities != nil {
		*caps = *init.Capabilities
	}
	impl := &mcp.Implementation{Name: s.srv.Name}
	if init.ServerInfo != nil {
		c := *init.ServerInfo
		impl = &c
	}
	opts := &mcp.ServerOptions{
		Instructions:                init.Instructions,
		Logger:                      s.h.sdkLog,
		Capabilities:                caps,
		InitializedHandler:          s.initialized,
		ProgressNotificationHandler: s.downstreamProgress,
		RootsListChangedHandler:     s.rootsChanged,
		SupportedProtocolVersions:   versionsUpTo(init.ProtocolVersion),
		// The session is known by its id before the initialize is answered, so that the client's standalone
		// stream (GET), which may come at once, is seen (see ask).
		GetSessionID: func() string {
			id := rand.Text()
			s.mu.Lock()
			s.sid = id
			s.mu.Unlock()
			s.h.track(id, s)
			s.kickCuration() // a table made while the session was built is applied too
			return id
		},
	}
	if caps.Resources != nil && caps.Resources.Subscribe {
		opts.SubscribeHandler = func(ctx context.Context, r *mcp.SubscribeRequest) error {
			if err := s.upstream().Subscribe(ctx, r.Params); err != nil {
				return rpcError(err)
			}
			s.mu.Lock()
			s.subs[r.Params.URI] = true
			s.mu.Unlock()
			return nil
		}
		opts.UnsubscribeHandler = func(ctx context.Context, r *mcp.UnsubscribeRequest) error {
			if err := s.upstream().Unsubscribe(ctx, r.Params); err != nil {
				return rpcError(err)
			}
			s.mu.Lock()
			delete(s.subs, r.Params.URI)
			s.mu.Unlock()
			return nil
		}
	}
	s.server = mcp.NewServer(impl, opts)
	// Each request is a server span continuing the client's trace (from its _meta or its HTTP headers), as on
	// /mcp; outermost, so it covers the forwarding too.
	s.server.AddReceivingMiddleware(telemetry.ServerMiddleware, s.forward)
	sctx, cancel := context.WithTimeout(ctx, s.h.opts.SyncTimeout)
	defer cancel()
	for k := range kinds {
		if err := s.sync(sctx, k); err != nil {
			return err
		}
	}
	return nil
}

// versionsUpTo narrows the downstream's protocol versions to the backend's: a client asking for a newer one is
// answered with the backend's, as the backend would.
func versionsUpTo(v string) []string {
	var out []string
	for _, x := range mcp.SupportedProtocolVersions() {
		if x <= v && x < "2026-07-28" {
			out = append(out, x)
		}
	}
	return out
}

// forward sends the downstream client's requests to the backend. Lists are answered from the mirror; initialize,
// and the notifications, stay with the go-sdk (which calls the handlers of build).
func (s *session) forward(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		defer s.inflight(ctx, method, req.GetParams())()
		s.mu.Lock()
		changed := s.upChanged
		s.mu.Unlock()
		res, err := s.request(ctx, next, method, req)
		if unsent(err) && s.awaitReplaced(ctx, changed) {
			// The upstream session ended before the request was sent, for a new one with the caller's new
			// credential: the request goes to that one.
			res, err = s.request(ctx, next, method, req)
		}
		if ce, ok := errors.AsType[*actors.CredentialRequiredError](err); ok {
			return s.credentialLost(req, ce)
		}
		if unsent(err) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "proxy: " + err.Error()}
		}
		return res, err
	}
}

// unsent reports an error of an upstream session that had ended (closed, or ended for the caller's new
// credential) before the request was sent to the backend.
func unsent(err error) bool {
	return errors.Is(err, actors.ErrProxyClosed) || errors.Is(err, actors.ErrCredentialChanged)
}

// upstream is the current upstream session.
func (s *session) upstream() *actors.ProxySession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// awaitReplaced waits until the upstream session current when changed was read has been replaced (true), or the
// session ends, ctx ends, or no replacement comes within the sync timeout (false).
func (s *session) awaitReplaced(ctx context.Context, changed chan struct{}) bool {
	t := time.NewTimer(s.h.opts.SyncTimeout)
	defer t.Stop()
	select {
	case <-changed:
		return s.life.Err() == nil
	case <-s.life.Done():
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// replaceUpstream opens the client a new upstream session after the caller's credential changed (the old one
// ended with actors.ErrCredentialChanged): the client's session goes on, its next request reaches the backend on
// the new credential. The new session gets the client's log level and subscriptions again, and the mirrored lists
// are refreshed from it (the client hears list_changed where they differ). When none can open (the credential was
// revoked: CREDENTIAL_REQUIRED), the client's session ends, as before.
func (s *session) replaceUpstream(why error) {
	ctx, cancel := context.WithTimeout(s.life, s.h.opts.SyncTimeout)
	defer cancel()
	s.mu.Lock()
	gen := s.upGen + 1
	opts := s.upOpts
	s.mu.Unlock()
	opts.Handlers = s.handlers(gen)
	up, err := s.h.sys.OpenProxySession(ctx, s.srv.Name, opts)
	if err != nil {
		s.close(fmt.Errorf("upstream: %w; no new one: %w", why, err))
		return
	}
	// The client's log level and subscriptions are set on the new session before any request of the client goes
	// to it.
	s.mu.Lock()
	level := s.level
	subs := make([]string, 0, len(s.subs))
	for u := range s.subs {
		subs = append(subs, u)
	}
	s.mu.Unlock()
	if level != nil {
		if err := up.SetLoggingLevel(ctx, level); err != nil {
			s.log.Debug("set the log level again on the new upstream session", "error", err)
		}
	}
	for _, u := range subs {
		if err := up.Subscribe(ctx, &mcp.SubscribeParams{URI: u}); err != nil {
			s.log.Debug("subscribe again on the new upstream session", "error", err)
		}
	}
	s.mu.Lock()
	if s.life.Err() != nil {
		s.mu.Unlock()
		_ = up.Close()
		return
	}
	s.up, s.upGen = up, gen
	close(s.upChanged)
	s.upChanged = make(chan struct{})
	s.mu.Unlock()
	s.log.Info("proxy session's upstream replaced: the caller's credential changed")
	for k := range kinds {
		s.kick(k)
	}
}

// request answers one of the client's requests from the backend (forward).
func (s *session) request(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	switch method {
	case "tools/call":
		return s.callTool(ctx, req.(*mcp.CallToolRequest))
	case "prompts/get":
		p := req.(*mcp.GetPromptRequest).Params
		return result(telemetry.Forward(ctx, s.srv.Name, s.srv.ID, method, p, func(ctx context.Context) (*mcp.GetPromptResult, error) {
			return s.upstream().GetPrompt(ctx, p)
		}))
	case "resources/read":
		p := req.(*mcp.ReadResourceRequest).Params
		return result(telemetry.Forward(ctx, s.srv.Name, s.srv.ID, method, p, func(ctx context.Context) (*mcp.ReadResourceResult, error) {
			return s.upstream().ReadResource(ctx, p)
		}))
	case "completion/complete":
		p := req.(*mcp.CompleteRequest).Params
		return result(telemetry.Forward(ctx, s.srv.Name, s.srv.ID, method, p, func(ctx context.Context) (*mcp.CompleteResult, error) {
			return s.upstream().Complete(ctx, p)
		}))
	case "logging/setLevel":
		// The backend filters what it sends; the go-sdk session filters what it forwards: both get the level.
		p, _ := req.GetParams().(*mcp.SetLoggingLevelParams)
		if err := s.upstream().SetLoggingLevel(ctx, p); err != nil {
			return nil, rpcError(err)
		}
		s.mu.Lock()
		s.level = p
		s.mu.Unlock()
	case "ping":
		if err := s.upstream().Ping(ctx); err != nil {
			return nil, rpcError(err)
		}
	}
	return next(ctx, method, req)
}

func (s *session) callTool(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if t := s.h.sys.Routes(); t != nil {
		if sc, curated := s.view(t); curated {
			if _, ok := t.ToolIn(sc, s.srv.ID, r.Params.Name); !ok {
				// Hidden, withheld, outside the client's profiles: unknown, as the go-sdk answers a tool it does
				// not have (and as /mcp does), so that curation does not reveal what it hides.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", r.Params.Name)}
			}
		}
	}
	if denied := s.rateLimited(ctx, r); denied != nil {
		return denied, nil
	}
	if denied := s.denied(ctx, s.h.sys.Routes(), r); denied != nil {
		return denied, nil
	}
	// The call rules every front end shares: the arguments, when given, are an object.
	if _, ferrs := validate.Arguments(r.Params.Arguments); len(ferrs) > 0 {
		return apierror.Validation(ferrs).CallToolResult(), nil
	}
	p := &mcp.CallToolParams{Meta: r.Params.Meta, Name: r.Params.Name,
		InputResponses: r.Params.InputResponses, RequestState: r.Params.RequestState}
	if len(r.Params.Arguments) > 0 {
		p.Arguments = r.Params.Arguments
	}
	// The backend gets the trace context of a client span of its own (in _meta), when the request is traced.
	res, err := telemetry.Forward(ctx, s.srv.Name, s.srv.ID, "tools/call", p, func(ctx context.Context) (*mcp.CallToolResult, error) {
		return s.upstream().CallTool(ctx, p)
	})
	if err != nil {
		return nil, rpcError(err)
	}
	if res.Content == nil {
		res.Content = []mcp.Content{} // the spec's content is an array, never null
	}
	return res, nil
}

// result turns an upstream answer into the middleware's.
func result[R mcp.Result](r R, err error) (mcp.Result, error) {
	if err != nil {
		return nil, rpcError(err)
	}
	return r, nil
}

// rpcError passes the backend's JSON-RPC errors through unchanged (code, message, data); a failure of the proxy
// itself is an internal error.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je
	}
	if _, ok := errors.AsType[*actors.CredentialRequiredError](err); ok || unsent(err) {
		return err // forward answers it (credentialLost; or again on a new upstream session)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "proxy: " + err.Error()}
}

// inflight records a downstream request until it is answered.
func (s *session) inflight(ctx context.Context, method string, params mcp.Params) func() {
	s.mu.Lock()
	s.seq++
	f := &flight{ctx: ctx, method: method, seq: s.seq}
	if t := progressToken(params); t != nil {
		f.token = tokenKey(t)
		s.tokens[f.token] = f
	}
	s.flights[f.seq] = f
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.flights, f.seq)
		if f.token != "" && s.tokens[f.token] == f {
			delete(s.tokens, f.token)
		}
	}
}

func progressToken(p mcp.Params) any {
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p.GetMeta()["progressToken"]
}

// tokenKey tells a string token from a numeric one with the same text.
func tokenKey(t any) string {
	if s, ok := t.(string); ok {
		return "s:" + s
	}
	return fmt.Sprintf("n:%v", t)
}

// byToken is the request a progress token belongs to.
func (s *session) byToken(t any) *flight {
	if t == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[tokenKey(t)]
}

// work reports whether a request makes the backend work for the client, which may call back (log, sample, elicit).
func work(method string) bool {
	switch method {
	case "tools/call", "prompts/get", "resources/read", "completion/complete":
		return true
	}
	return false
}

// related picks the downstream request a backend message without a progress token belongs to. The go-sdk client
// does not say on which upstream request's stream a message arrived (and stdio has no streams), so this is a
// choice: the most recent request in flight that does work, else the most recent one, else none (the message
// goes to the standalone stream).
func (s *session) related() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *flight
	for _, f := range s.flights {
		if f.ctx.Err() != nil {
			continue
		}
		if best == nil || work(f.method) && !work(best.method) || work(f.method) == work(best.method) && f.seq > best.seq {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return best.ctx
}

// handlers route what the backend sends to the downstream session.
func (s *session) handlers(gen uint64) actors.ProxyHandlers {
	return actors.ProxyHandlers{
		ToolListChanged:     func(context.Context) { s.kick(kindTools) },
		PromptListChanged:   func(context.Context) { s.kick(kindPrompts) },
		ResourceListChanged: func(context.Context) { s.kick(kindResources) },
		ResourceUpdated: func(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
			if s.readySession() != nil {
				_ = s.server.ResourceUpdated(ctx, p) // to the downstream session if it subscribed
			}
		},
		Log: func(_ context.Context, p *mcp.LoggingMessageParams) {
			if ss := s.readySession(); ss != nil {
				_ = ss.Log(s.notifyContext(s.related()), p)
			}
		},
		Progress: func(_ context.Context, p *mcp.ProgressNotificationParams) {
			ss := s.readySession()
			if f := s.byToken(p.ProgressToken); ss != nil && f != nil {
				_ = ss.NotifyProgress(s.notifyContext(f.ctx), p)
			}
		},
		ElicitationComplete: func(_ context.Context, p *mcp.ElicitationCompleteParams) {
			if ss := s.readySession(); ss != nil {
				_ = ss.NotifyElicitationComplete(s.notifyContext(nil), p)
			}
		},
		CreateMessage: func(ctx context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
			return ask(s, ctx, "sampling/createMessage", func(ctx context.Context, ss *mcp.ServerSession) (*mcp.CreateMessageWithToolsResult, error) {
				return ss.CreateMessageWithTools(ctx, p)
			})
		},
		Elicit: func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return ask(s, ctx, "elicitation/create", func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ElicitResult, error) {
				return ss.Elicit(ctx, p)
			})
		},
		ListRoots: func(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
			return ask(s, ctx, "roots/list", func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ListRootsResult, error) {
				return ss.ListRoots(ctx, p)
			})
		},
		Closed: func(err error) {
			s.mu.Lock()
			current := s.upGen == gen
			s.mu.Unlock()
			switch {
			case !current: // replaced: the client's session goes on with the new one
			case errors.Is(err, actors.ErrCredentialChanged):
				s.replaceUpstream(err)
			default:
				if err == nil {
					err = errClosed
				}
				s.close(fmt.Errorf("upstream: %w", err))
			}
		},
	}
}

// notifyContext is the context of a message to the downstream client: the related request's values (so that the
// go-sdk transport writes on that request's stream), none of its cancellation; nil means the standalone stream.
func (s *session) notifyContext(related context.Context) context.Context {
	if related == nil {
		return context.Background()
	}
	return context.WithoutCancel(related)
}

// ask forwards a backend's request to the downstream client once it is initialized, on the stream of the request
// it most likely belongs to, cancelled when the backend cancels it or the session ends. A request that belongs to
// no request in flight goes to the standalone stream; if none is open yet it waits (briefly) for one.
func ask[R any](s *session, ctx context.Context, method string, call func(context.Context, *mcp.ServerSession) (R, error)) (R, error) {
	var zero R
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-s.life.Done():
		return zero, errClosed
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-t.C:
		return zero, errors.New("the downstream client has not finished initializing")
	}
	ss := s.readySession()
	rel := s.related()
	if rel == nil {
		s.waitStream(ctx, streamWait)
	}
	dctx, cancel := context.WithCancel(s.notifyContext(rel))
	defer cancel()
	stop1, stop2 := context.AfterFunc(ctx, cancel), context.AfterFunc(s.life, cancel)
	defer stop1()
	defer stop2()
	// Within a traced request (the related one), the relayed request is a span below it.
	sid := ""
	if ss != nil {
		sid = ss.ID()
	}
	dctx, end := telemetry.Relayed(dctx, method, sid)
	res, err := call(dctx, ss)
	var je *jsonrpc.Error
	if err != nil && rel == nil && errors.As(err, &je) && je.Code == codeRejected && dctx.Err() == nil {
		// No stream took it: a standalone stream may be opening right now.
		if s.waitStream(ctx, streamWait) {
			time.Sleep(50 * time.Millisecond)
			res, err = call(dctx, ss)
		}
	}
	end(err)
	return res, err
}

// streamOpened records a standalone stream (GET) while it is served.
func (s *session) streamOpened() func() {
	s.mu.Lock()
	s.streams++
	if s.streams == 1 {
		close(s.streamCh)
	}
	if s.reaper != nil {
		s.reaper.Stop()
		s.reaper = nil
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.streams--
		if s.streams == 0 {
			s.streamCh = make(chan struct{})
			if g := s.h.opts.StreamGrace; g > 0 && s.life.Err() == nil {
				s.lastSeen = time.Now()
				s.reaper = time.AfterFunc(g, s.reap)
			}
		}
	}
}

// ownedBy reports whether caller is the client that opened the session (the same credential subject).
func (s *session) ownedBy(caller auth.Identity) bool {
	return gateway.CredentialSubject(caller) == gateway.CredentialSubject(s.caller)
}

// touch records a request of the client, which came as caller (its owner).
func (s *session) touch(caller auth.Identity) {
	s.mu.Lock()
	s.lastSeen = time.Now()
	s.latest = caller
	s.mu.Unlock()
}

// renew is the upstream session's ProxyOptions.Renew: the grant it holds can give no more tokens (an exchanged
// token that expired), so the caller's latest OAuth token is exchanged again (the gateway's exchange, /mcp's), and
// the session takes the stored grant. It runs before the request that needs the token is sent, whichever it is (a
// client's request, or the upstream session's own keep-alive ping, whose failure would end the session): no
// request is sent twice. An error (a static-token caller, a server that does not exchange, a refusal) leaves the
// request unsent and answered CREDENTIAL_REQUIRED.
func (s *session) renew(ctx context.Context) error {
	if s.h.opts.Gateway == nil {
		return errNoGateway
	}
	s.mu.Lock()
	caller := s.latest
	s.mu.Unlock()
	return s.h.opts.Gateway.ExchangeCredential(ctx, s.srv.ID, caller)
}

// errNoGateway: the handler has no gateway to exchange a caller's token with (Options.Gateway).
var errNoGateway = errors.New("no gateway to exchange the caller's token")

// reap ends a session whose client left: its standalone stream closed and, for the grace period, no stream
// reopened, no request arrived and none is running. Otherwise it looks again later.
func (s *session) reap() {
	g := s.h.opts.StreamGrace
	s.mu.Lock()
	if s.streams > 0 || s.life.Err() != nil {
		s.mu.Unlock()
		return
	}
	if quiet := time.Since(s.lastSeen); len(s.flights) > 0 || quiet < g {
		wait := g - quiet
		if wait <= 0 || len(s.flights) > 0 {
			wait = g
		}
		s.reaper = time.AfterFunc(wait, s.reap)
		s.mu.Unlock()
		return
	}
	s.reaper = nil
	s.mu.Unlock()
	s.close(errors.New("the client left: its stream closed and it sent nothing since"))
}

// waitStream waits up to d for a standalone stream; it reports whether one is open.
func (s *session) waitStream(ctx context.Context, d time.Duration) bool {
	s.mu.Lock()
	ch := s.streamCh
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-s.life.Done():
	}
	return false
}

// initialized marks the downstream session ready for what the backend sends.
func (s *session) initialized(_ context.Context, r *mcp.InitializedRequest) {
	s.mu.Lock()
	if s.ss == nil {
		s.ss = r.Session
	}
	s.mu.Unlock()
	s.rOnce.Do(func() { close(s.ready) })
}

// readySession is the downstream session once initialized, else nil (before, the client has no level set, no
// subscription and no request in flight: there is nothing to forward to it).
func (s *session) readySession() *mcp.ServerSession {
	select {
	case <-s.ready:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ss
}

// downstreamProgress forwards the client's progress on a request the backend made.
func (s *session) downstreamProgress(_ context.Context, r *mcp.ProgressNotificationServerRequest) {
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	if err := s.upstream().NotifyProgress(ctx, r.Params); err != nil {
		s.log.Debug("forward progress upstream", "error", err)
	}
}

// rootsChanged forwards notifications/roots/list_changed.
func (s *session) rootsChanged(_ context.Context, _ *mcp.RootsListChangedRequest) {
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	if err := s.upstream().NotifyRootsListChanged(ctx); err != nil {
		s.log.Debug("forward roots/list_changed upstream", "error", err)
	}
}

// attach finds the downstream session the go-sdk created for the initialize just served and ties the two
// sessions' ends together.
func (s *session) attach() {
	var ss *mcp.ServerSession
	for x := range s.server.Sessions() {
		ss = x
	}
	s.mu.Lock()
	id := s.sid
	if s.ss == nil {
		s.ss = ss
	}
	s.mu.Unlock()
	if ss == nil {
		s.h.track(id, nil)
		s.close(errors.New("downstream initialize failed"))
		return
	}
	go func() {
		err := ss.Wait()
		s.h.track(id, nil)
		if err == nil {
			err = errors.New("downstream session ended")
		}
		s.close(err)
	}()
	if s.life.Err() != nil {
		_ = ss.Close() // the upstream session ended while the initialize was answered
	}
}

// close ends both sessions once.
func (s *session) close(why error) {
	s.once.Do(func() {
		s.cancel()
		s.mu.Lock()
		ss, up := s.ss, s.up
		s.mu.Unlock()
		s.log.Info("proxy session closed", "reason", why)
		if ss != nil {
			_ = ss.Close()
		}
		if up != nil {
			if err := up.Close(); err != nil {
				s.log.Warn("close upstream session", "error", err)
			}
		}
	})
}

func (s *session) kick(k int) {
	select {
	case s.kicks[k] <- struct{}{}:
	default:
	}
}

// syncLoop refreshes a mirrored list after each list_changed of the backend (kicks coalesce).
func (s *session) syncLoop() {
	for {
		k := -1
		select {
		case <-s.life.Done():
			return
		case <-s.kicks[kindTools]:
			k = kindTools
		case <-s.kicks[kindPrompts]:
			k = kindPrompts
		case <-s.kicks[kindResources]:
			k = kindResources
		case <-s.recurate:
			s.applyTools(false)
			continue
		}
		ctx, cancel := context.WithTimeout(s.life, s.h.opts.SyncTimeout)
		switch err := s.sync(ctx, k); {
		case err == nil:
		case s.life.Err() != nil, errors.Is(err, actors.ErrProxyClosed), errors.Is(err, context.Canceled):
			s.log.Debug("refresh mirrored list: session ending", "kind", k, "error", err)
		default:
			s.log.Warn("refresh mirrored list", "kind", k, "error", err)
		}
		cancel()
	}
}

// sync makes one mirrored list equal to the backend's: what is new or changed is added (the go-sdk then tells the
// downstream client with list_changed), what is gone is removed. A list the backend does not advertise is left
// empty; one it fails to serve is logged and left as it was.
func (s *session) sync(ctx context.Context, k int) error {
	up := s.upstream()
	caps := up.InitializeResult().Capabilities
	if caps == nil {
		return nil
	}
	switch k {
	case kindTools:
		if caps.Tools == nil {
			return nil
		}
		tools, err := up.ListTools(ctx)
		if err != nil {
			return s.listFailed("tools", err)
		}
		s.upTools = tools
		s.applyTools(true)
	case kindPrompts:
		if caps.Prompts == nil {
			return nil
		}
		prompts, err := up.ListPrompts(ctx)
		if err != nil {
			return s.listFailed("prompts", err)
		}
		apply(s, s.mirror[k], prompts, func(p *mcp.Prompt) string { return p.Name }, func(p *mcp.Prompt) {
			s.server.AddPrompt(p, func(ctx context.Context, r *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				res, err := s.upstream().GetPrompt(ctx, r.Params)
				return res, rpcError(err)
			})
		}, s.server.RemovePrompts)
	case kindResources:
		if caps.Resources == nil {
			return nil
		}
		read := func(ctx context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			res, err := s.upstream().ReadResource(ctx, r.Params)
			return res, rpcError(err)
		}
		resources, err := up.ListResources(ctx)
		if err != nil {
			return s.listFailed("resources", err)
		}
		apply(s, s.mirror[k], resources, func(r *mcp.Resource) string { return r.URI },
			func(r *mcp.Resource) { s.server.AddResource(r, read) }, s.server.RemoveResources)
		templates, err := up.ListResourceTemplates(ctx)
		if err != nil {
			return s.listFailed("resource templates", err)
		}
		apply(s, s.tmpls, templates, func(t *mcp.ResourceTemplate) string { return t.URITemplate },
			func(t *mcp.ResourceTemplate) { s.server.AddResourceTemplate(t, read) }, s.server.RemoveResourceTemplates)
	}
	return nil
}

// listFailed: a method the backend does not implement is an empty list; other failures are errors.
func (s *session) listFailed(what string, err error) error {
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == jsonrpc.CodeMethodNotFound {
		return nil
	}
	return fmt.Errorf("list %s: %w", what, err)
}

// apply updates one mirrored list: add what is new or changed, remove what is gone. The go-sdk panics on items it
// refuses (a tool whose input schema is not an object, an invalid URI or template): those are logged and left out.
func apply[T any](s *session, have map[string]string, items []T, key func(T) string, add func(T), remove func(...string)) {
	want := make(map[string]bool, len(items))
	for _, it := range items {
		k := key(it)
		want[k] = true
		b, err := json.Marshal(it)
		if err != nil || have[k] == string(b) {
			continue
		}
		if safeAdd(s, k, func() { add(it) }) {
			have[k] = string(b)
		} else if _, ok := have[k]; ok {
			delete(have, k)
			remove(k) // the previous version must not stay
		}
	}
	var gone []string
	for k := range have {
		if !want[k] {
			gone = append(gone, k)
			delete(have, k)
		}
	}
	if len(gone) > 0 {
		remove(gone...)
	}
}

func safeAdd(s *session, key string, add func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Warn("backend item not mirrored: the go-sdk refuses it", "item", key, "error", fmt.Sprint(r))
			ok = false
		}
	}()
	add()
	return true
}

// rateLimited takes a token from the caller's bucket (the identity the auth middleware established, as on the
// other front ends) and answers the tool error RATE_LIMITED when it is empty.
func (s *session) rateLimited(ctx context.Context, r *mcp.CallToolRequest) *mcp.CallToolResult {
	lim := s.h.opts.Limiter
	if lim == nil {
		return nil
	}
	id, ok := auth.Identity{}, false
	if r.Extra != nil {
		id, ok = auth.FromTokenInfo(r.Extra.TokenInfo)
	}
	if !ok {
		id, _ = auth.FromContext(ctx)
	}
	if e := apierror.RateLimit(lim, id); e != nil {
		return e.CallToolResult()
	}
	return nil
}

// bindable reports whether profile bindings apply to a caller: a client token (admins, and every caller while auth
// is off, are not bound).
func bindable(id auth.Identity) bool { return !id.Anonymous && id.Scope < auth.ScopeAdmin }

// view is what the session's client is served of the server's tools in table t: the profiles its token is bound to
// (nil: no binding), and whether the table decides at all (curated: the server's curation changes what clients are
// served, or the client is bound). Uncurated, the backend's own list is served as it is.
func (s *session) view(t *routing.RouteTable) (sc routing.Scope, curated bool) {
	if s.restricted {
		sc = routing.Scope(t.BoundProfilesOf(s.client))
	}
	return sc, sc != nil || t.Curated(s.srv.ID)
}

// kickCuration asks for the tools to be curated again (the routing table changed).
func (s *session) kickCuration() {
	select {
	case s.recurate <- struct{}{}:
	default:
	}
}

// applyTools makes the mirrored tools what the client is served of the backend's list: as /mcp serves them when
// curation applies (hidden, withheld and out-of-profile tools left out, held changes as their approved
// definition, an override's description and annotations), the backend's own list otherwise. Tools keep the
// backend's names: this endpoint is transparent (an override's exposed name is an alias of /mcp). fetched says the
// backend's list is new; otherwise (a new routing table) an uncurated mirror that stays uncurated is left as it is.
func (s *session) applyTools(fetched bool) {
	tools := s.upTools
	if t := s.h.sys.Routes(); t != nil {
		sc, curated := s.view(t)
		filter := s.policyActive()
		if !fetched && !curated && !s.curated && !filter && !s.filtered {
			return
		}
		s.filtered = filter
		s.curated = curated
		if curated {
			tools = make([]*mcp.Tool, 0, len(s.upTools))
			for _, up := range s.upTools {
				if e, ok := t.ToolIn(sc, s.srv.ID, up.Name); ok {
					tools = append(tools, servedTool(up, e))
				}
			}
		}
		tools = s.listedTools(t, tools)
	}
	apply(s, s.mirror[kindTools], tools, func(t *mcp.Tool) string { return t.Name }, func(t *mcp.Tool) {
		s.server.AddTool(t, func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return s.callTool(ctx, r)
		})
	}, s.server.RemoveTools)
}

// servedTool is a backend tool as the routing table serves it (e's definition: the approved one while a change is
// held, with an override's description and annotations), under the backend's name.
func servedTool(up *mcp.Tool, e *routing.ToolEntry) *mcp.Tool {
	out := &mcp.Tool{}
	if len(e.Definition) == 0 || json.Unmarshal(e.Definition, out) != nil {
		c := *up
		out = &c
	}
	out.Name = up.Name
	out.Description = e.Description
	if len(e.InputSchema) > 0 {
		out.InputSchema = json.RawMessage(e.InputSchema)
	} else if out.InputSchema == nil {
		out.InputSchema = up.InputSchema
	}
	return out
}
