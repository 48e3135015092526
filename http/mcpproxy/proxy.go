// Package mcpproxy serves /mcp/servers/{name}: one registered backend exposed on its own MCP endpoint, transparently
// (no namespacing, no meta-tools). It exists because the aggregated endpoint (package mcpserver) can only relay
// tools: a client that needs a backend's prompts, resources, subscriptions, completions, logging, or the backend's
// own requests back to the client (sampling, elicitation, roots) talks to that backend through this proxy instead.
//
// MCP sessions are stateful, so every downstream session gets its own upstream session to the backend, owned by a
// proxy actor under the server's actor (actors.System.OpenProxySession): deleting or disconnecting the server, or
// stopping the daemon, ends every proxy session and its child process. Downstream, each session is a go-sdk
// *mcp.Server built for it from the backend's initialize answer (server info, capabilities, instructions, protocol
// version) whose tools, prompts, resources and resource templates mirror the backend's, kept current on the
// backend's list_changed notifications; its requests are forwarded to the upstream session, and what the backend
// sends back (progress, logs, resource updates, sampling, elicitation, roots) is forwarded to the downstream
// client on the stream of the request it belongs to. It is streamable HTTP (stateful) on net/http, not Fiber,
// because Fiber buffers responses.
//
// A per_user server's sessions run on the credential of the caller that opened them (credential.go): the upstream
// session is opened with that caller's own secret or OAuth grant injected, and a session is never its caller's to
// share. When the caller's credential changes, the upstream session is replaced underneath the client's, which goes
// on (session.replaceUpstream); a revocation ends it.
//
// Transparent does not mean uncurated: the tools are served as /mcp serves them (the routing table's curation:
// filters, pinning, overrides' descriptions), and a client token bound to profiles reaches only its profiles'
// servers and tools (README, issue 24).
package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// Prefix is where the daemon mounts the handler: mux.Handle(Prefix, h).
const Prefix = "/mcp/servers/"

// maxBody bounds the initialize request the handler reads itself (the go-sdk's own limit for the others).
const maxBody = mcp.DefaultMaxRequestBodyBytes

// Options configure the proxy.
type Options struct {
	Logger *slog.Logger
	// MaxSessionsPerServer caps the proxy sessions of one server (actors.DefaultMaxProxySessions when 0). Over
	// stdio each session runs its own child process.
	MaxSessionsPerServer int
	// IdleTimeout closes a session that sent no request for this long, with its upstream session (and child
	// process) (DefaultIdleTimeout when 0; negative: never).
	IdleTimeout time.Duration
	// StreamGrace reaps a session whose client is gone: once its last standalone stream (GET) has closed, the
	// session ends when no stream reopens and no request arrives or runs for this long (DefaultStreamGrace when 0;
	// negative: only the idle timeout reaps). Clients that never send DELETE (the conformance suite, the
	// TypeScript SDK's close()) close their stream when they leave.
	StreamGrace time.Duration
	// SyncTimeout bounds one refresh of a session's mirrored lists (30 s when 0).
	SyncTimeout time.Duration
	// Limiter rate-limits tool calls per client, shared with the other front ends (nil: no limit).
	Limiter *auth.Limiter
	// HostGuarded says the listener already checks Host and Origin (auth.HostGuard, with its allowed hosts), so
	// the built-in loopback Host check is skipped and every MCP route decides alike.
	HostGuarded bool
	// ConsoleURL is the web console's address (MCP_AGGREGATOR_CONSOLE_URL): a client that supports URL-mode
	// elicitation and opens a session to a per_user server without a credential of its own is sent to the
	// console's page for that server (credential.go). "": every such client is answered CREDENTIAL_REQUIRED.
	ConsoleURL string
	// Gateway exchanges a caller's OAuth access token of the organisation's issuer for their own backend grant of a
	// per_user server that allows it (gateway.Options.ExchangeCredential), as /mcp does for a call: when a
	// session cannot open, or a request could not be sent, for want of a grant that gives a token (none yet, or an
	// exchanged token that expired). nil: never; such a caller is answered CREDENTIAL_REQUIRED.
	Gateway *gateway.Gateway
}

// Defaults of Options.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultStreamGrace = 5 * time.Second
)

// Handler serves /mcp/servers/{name}. Create it with New.
type Handler struct {
	sys    *actors.System
	log    *slog.Logger
	sdkLog *slog.Logger
	opts   Options
	// bare answers a request that arrives without a session and is not an initialize, as a go-sdk server would.
	bare *mcp.Server

	stop func() // stops following the routing table
	// self is this node's actors.OwnerHeader value ("" on a single node: no header).
	self string

	mu       sync.Mutex
	byServer map[string]*mcp.StreamableHTTPHandler // by server id: a session is only reachable through its server
	sessions map[string]*session                   // by downstream session id
}

// New returns the proxy handler; mount it with mux.Handle(Prefix, h). Zero options are the defaults.
func New(sys *actors.System, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.StreamGrace == 0 {
		opts.StreamGrace = DefaultStreamGrace
	}
	if opts.IdleTimeout < 0 {
		opts.IdleTimeout = 0
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 30 * time.Second
	}
	log := opts.Logger.With("component", "mcpproxy")
	// The go-sdk logs every session and notification at info: keep its warnings and errors only.
	sdkLog := actors.QuietLogger(log, slog.LevelWarn)
	h := &Handler{
		sys: sys, log: log, sdkLog: sdkLog, opts: opts,
		bare:     mcp.NewServer(&mcp.Implementation{Name: "mcp-aggregator-proxy", Version: actors.Version}, &mcp.ServerOptions{Logger: sdkLog}),
		byServer: map[string]*mcp.StreamableHTTPHandler{},
		sessions: map[string]*session{},
	}
	if u, err := url.Parse(sys.NodeAddress()); err == nil {
		h.self = u.Host
	}
	// Curation (filters, pinning, overrides) and profile bindings change with the routing table: every session's
	// tools are curated again from the new one.
	h.stop = sys.OnRoutesChanged(func(*routing.RouteTable) { h.recurate() })
	return h
}

// Close stops following the routing table (sessions end with their server's actors).
func (h *Handler) Close() { h.stop() }

func (h *Handler) recurate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sessions {
		s.kickCuration()
	}
}

// serverKey carries the *mcp.Server built for a new session to the go-sdk handler's getServer.
type serverKey struct{}

func getServer(r *http.Request) *mcp.Server {
	s, _ := r.Context().Value(serverKey{}).(*mcp.Server)
	return s
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// DNS rebinding protection before anything else: a new session costs an upstream session (and maybe a child
	// process), so a forbidden request must not reach the backend. Same rule as the go-sdk handler's.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && !h.opts.HostGuarded {
		if isLoopback(la.String()) && !isLoopback(r.Host) {
			apierror.Write(w, &apierror.Error{Status: http.StatusForbidden, Code: apierror.CodeForbidden,
				Detail: fmt.Sprintf("Forbidden: invalid Host header %q", r.Host)})
			return
		}
	}
	name, ok := serverName(r.URL.Path)
	if !ok {
		apierror.Write(w, &apierror.Error{Status: http.StatusNotFound, Code: apierror.CodeNotFound, Detail: "Not found"})
		return
	}
	srv, ok := h.sys.Routes().ServerByName(name)
	if !ok {
		apierror.Write(w, apierror.ServerNotFound(name))
		return
	}
	caller, _ := auth.FromContext(r.Context())
	if bindable(caller) {
		// A client bound to profiles (its token's name, or its OAuth subject or claims) reaches only the servers its profiles contain (the rule of /mcp's
		// prompts and resources: a server with a tool in one of them).
		t := h.sys.Routes()
		if bound := t.BoundProfilesOf(gateway.CallerOf(caller)); bound != nil && !t.ServersIn(routing.Scope(bound))[srv.ID] {
			apierror.Write(w, &apierror.Error{Status: http.StatusForbidden, Code: apierror.CodeForbidden,
				Detail: "This client's profiles do not include server " + srv.Name})
			return
		}
	}
	if srv.Status != persistence.StatusConnected && srv.Status != persistence.StatusDegraded {
		apierror.Write(w, unavailable(srv, "Server unavailable: "+srv.Name))
		return
	}
	if h.forwarded(w, r, srv) {
		return
	}
	sdk := h.handlerFor(srv.ID)
	sid := r.Header.Get("Mcp-Session-Id")
	if sid != "" {
		// Only the caller that opened a session keeps it alive; the go-sdk handler refuses anyone else (403).
		if s := h.session(sid); s != nil && s.ownedBy(caller) {
			s.touch(caller)
		}
	}
	switch {
	case r.Method == http.MethodPost && sid == "":
		h.serveNew(w, r, srv, sdk)
	case r.Method == http.MethodGet && sid != "":
		// The standalone stream: server->client messages unrelated to a request wait for it (see session.detached).
		if s := h.session(sid); s != nil && s.ownedBy(caller) {
			done := s.streamOpened()
			defer done()
		}
		sdk.ServeHTTP(w, r)
	default:
		sdk.ServeHTTP(w, r)
	}
}

// forwarded sends the request to the cluster node that serves the server, when that is another node (a session of
// the per-server endpoint lives beside the server's actor); true when it did (or answered an error).
func (h *Handler) forwarded(w http.ResponseWriter, r *http.Request, srv routing.ServerEntry) bool {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.SyncTimeout)
	target, remote, err := h.sys.OwnerURL(ctx, srv.ID)
	cancel()
	switch {
	case err != nil:
		apierror.Write(w, unavailable(srv, "Server unavailable: "+srv.Name+": the cluster node that serves it cannot be reached"))
		return true
	case !remote:
		if h.self != "" {
			w.Header().Set(actors.OwnerHeader, h.self)
		}
		return false
	}
	u, err := url.Parse(target)
	if err != nil {
		apierror.Write(w, unavailable(srv, "Server unavailable: "+srv.Name))
		return true
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host // the owner's host guard accepts its own address
			pr.Out.URL.Path = pr.In.URL.Path
			pr.Out.URL.RawPath = pr.In.URL.RawPath
		},
		FlushInterval: -1, // SSE and streamable responses stream through
		// The owner names itself; whatever it says, the node it was reached at is the one to name.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(actors.OwnerHeader, u.Host)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			h.log.Warn("forwarding a per-server session to the node that serves it failed", "server", srv.Name, "node", u.Host, "error", err)
			apierror.Write(w, unavailable(srv, "Server unavailable: "+srv.Name+": the cluster node that serves it did not answer"))
		},
	}
	rp.ServeHTTP(w, r)
	return true
}

// serverName extracts {name} from /mcp/servers/{name} (a trailing slash is accepted).
func serverName(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, Prefix)
	if !ok {
		rest = strings.TrimPrefix(path, "/") // mounted behind http.StripPrefix
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// handlerFor returns the go-sdk handler of one server (created on first use): sessions are looked up per server, so
// a session id cannot be used through another server's path.
func (h *Handler) handlerFor(id string) *mcp.StreamableHTTPHandler {
	h.mu.Lock()
	defer h.mu.Unlock()
	sdk, ok := h.byServer[id]
	if !ok {
		sdk = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger: h.sdkLog, SessionTimeout: h.opts.IdleTimeout,
			DisableLocalhostProtection: h.opts.HostGuarded, // then the listener's auth.HostGuard decides
		})
		h.byServer[id] = sdk
	}
	return sdk
}

func (h *Handler) session(id string) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

func (h *Handler) track(id string, s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s == nil {
		delete(h.sessions, id)
		return
	}
	h.sessions[id] = s
}

// serveNew handles a POST without a session: an initialize opens the upstream session first, so that the
// downstream session starts with the backend's capabilities, and builds the session's server from it.
func (h *Handler) serveNew(w http.ResponseWriter, r *http.Request, srv routing.ServerEntry, sdk *mcp.StreamableHTTPHandler) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			apierror.Write(w, &apierror.Error{Status: http.StatusRequestEntityTooLarge, Code: apierror.CodeRequestTooLarge,
				Detail: "Request body is too large", Context: map[string]any{"max_bytes": mbe.Limit}})
			return
		}
		http.Error(w, "failed to read body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	init, ok := parseInitialize(body)
	if !ok {
		// Not an initialize: the go-sdk answers it (a ping, or an error) on a throwaway session.
		sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, h.bare)))
		return
	}
	// The version is in the body; a header naming one newer than the backend's would make the go-sdk refuse the
	// initialize instead of negotiating down.
	r.Header.Del("Mcp-Protocol-Version")
	caller, _ := auth.FromContext(r.Context())
	s, err := h.open(r.Context(), srv, init, caller)
	if h.exchanged(r.Context(), srv, caller, err) {
		s, err = h.open(r.Context(), srv, init, caller)
	}
	if errors.Is(err, actors.ErrCredentialRequired) {
		h.credentialRequired(w, srv, init, err)
		return
	}
	if err != nil {
		apierror.Write(w, h.openError(srv, err))
		return
	}
	sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, s.server)))
	s.attach()
}

// exchanged reports whether a session that could not open for want of the caller's own OAuth grant (none yet, or
// an exchanged token that expired) got one by exchanging the caller's OAuth token (the gateway's exchange, as /mcp
// does for a call): then it is opened again, once.
func (h *Handler) exchanged(ctx context.Context, srv routing.ServerEntry, caller auth.Identity, err error) bool {
	ce, ok := errors.AsType[*actors.CredentialRequiredError](err)
	return ok && ce.OAuth && h.opts.Gateway != nil && h.opts.Gateway.ExchangeCredential(ctx, srv.ID, caller) == nil
}

// initRequest is what the proxy needs of the downstream client's initialize.
type initRequest struct {
	ID              json.RawMessage // the request's JSON-RPC id
	ProtocolVersion string
	ClientInfo      *mcp.Implementation
	Capabilities    *mcp.ClientCapabilities
}

// parseInitialize recognises a single initialize request and reads the client's identity and capabilities.
func parseInitialize(body []byte) (initRequest, bool) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Method != "initialize" {
		return initRequest{}, false
	}
	var p struct {
		ProtocolVersion string              `json:"protocolVersion"`
		ClientInfo      *mcp.Implementation `json:"clientInfo"`
		Capabilities    json.RawMessage     `json:"capabilities"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil {
		return initRequest{}, false
	}
	caps := &mcp.ClientCapabilities{}
	if len(p.Capabilities) > 0 {
		if err := json.Unmarshal(p.Capabilities, caps); err != nil {
			return initRequest{}, false
		}
		// "roots" present (even empty) means roots support: the go-sdk wants that in RootsV2.
		var probe map[string]json.RawMessage
		if json.Unmarshal(p.Capabilities, &probe) == nil {
			if raw, ok := probe["roots"]; ok {
				rc := &mcp.RootCapabilities{}
				_ = json.Unmarshal(raw, rc)
				caps.RootsV2 = rc
			}
		}
	}
	return initRequest{ID: msg.ID, ProtocolVersion: p.ProtocolVersion, ClientInfo: p.ClientInfo, Capabilities: caps}, true
}

// openError is the answer to a session that could not be opened: the proxy's own failures (its session cap,
// a backend that refuses the session), then the mapping every front end shares (apierror.FromError, which knows
// a server that is not callable), else a logged internal error.
func (h *Handler) openError(srv routing.ServerEntry, err error) *apierror.Error {
	switch {
	case errors.Is(err, actors.ErrProxyLimit):
		limit := h.opts.MaxSessionsPerServer
		if limit <= 0 {
			limit = actors.DefaultMaxProxySessions
		}
		return &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.CodeServiceBusy,
			Detail: "Too many proxy sessions for server " + srv.Name, Context: map[string]any{"max_sessions": limit, "retryable": true},
			RetryAfter: 1}
	case errors.Is(err, actors.ErrProxyConnect), errors.Is(err, errMirror):
		h.log.Warn("proxy session failed", "server", srv.Name, "error", err)
		return unavailable(srv, fmt.Sprintf("Server %s did not accept a proxy session: %v", srv.Name, err))
	}
	if e := apierror.FromError(err, apierror.Subject{Name: srv.Name}); e != nil {
		return e
	}
	h.log.Error("open proxy session", "server", srv.Name, "error", err)
	return apierror.Internal()
}

// unavailable is the 503 SERVER_UNAVAILABLE of a server that cannot take a proxy session now.
func unavailable(srv routing.ServerEntry, detail string) *apierror.Error {
	return apierror.Unavailable(srv.ID, srv.Name, srv.Status, detail, nil)
}

// isLoopback reports whether addr (host or host:port) is localhost or a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
