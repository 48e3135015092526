package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
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
	// included); err says why (ErrProxyClosed after Close; ErrCredentialChanged when the caller's credential was
	// revoked or replaced, after which the front end may open a new one for the same client).
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
	// Subject is the caller the session stands for (gateway.CredentialSubject of the request's identity). For a
	// per_user server the session is opened with that caller's own stored credential injected, as their sessions
	// of /mcp are (proxy_user.go), and ends when it is revoked or replaced; a caller without one gets
	// ErrCredentialRequired. Ignored for a shared server.
	Subject string
	// Renew, for a per_user server whose callers authorize through OAuth, gets Subject a new grant when theirs can
	// give no more tokens (an exchanged token that expired: it has no refresh token) and stores it; the session then
	// goes on with it (backendauth.SessionHandler.Renew). The per-server endpoint exchanges the caller's OAuth
	// token again. Nil: such a session can only take a grant stored meanwhile, else its requests are not sent.
	Renew    func(ctx context.Context) error
	Handlers ProxyHandlers
}

// ProxySession is one upstream session to a backend, owned by a proxy actor. Its methods ask that actor, which runs
// each request in its own goroutine: a slow request never holds another one. Every request is bounded by the
// request timeout (or ctx's earlier deadline) and cancelled at the backend when ctx ends.
type ProxySession struct {
	node   Node
	pid    *actor.PID
	server routing.ServerEntry
	init   *mcp.InitializeResult
	shared *proxyShared
	once   sync.Once
}

// RemoteServerError means the server's actor lives on another cluster node: a per-server session must be opened
// there (the front end forwards the request to that node's MCP listener).
type RemoteServerError struct {
	Server routing.ServerEntry
	Node   string // the member id of the node that serves it
}

func (e *RemoteServerError) Error() string {
	return fmt.Sprintf("server %s is served by cluster node %s", e.Server.Name, e.Node)
}

// Node is what a proxy session asks of the node's actor tree (package actors' System).
type Node interface {
	// ActorSystem is the node's protoactor system.
	ActorSystem() *actor.ActorSystem
	// Ask asks one actor within timeout (or ctx's earlier deadline): a timeout is gateway.ErrAskTimeout, a stopped
	// actor ErrShuttingDown, and a msg.Reply's error is the error.
	Ask(ctx context.Context, pid *actor.PID, m any, timeout time.Duration) (any, error)
	// CallDeadline is when a request started now must end: the request timeout, or ctx's earlier deadline.
	CallDeadline(ctx context.Context) time.Time
}

// OpenProxy asks the server actor pid (on this node) for a new proxy session to srv for one downstream client,
// waiting up to timeout for the backend's initialize, or until ctx ends. It fails with ErrProxyLimit at the cap,
// ErrProxyConnect when the backend refuses the session, ErrCredentialRequired when the server is per_user and
// opts.Subject has no credential of their own (the error's text says where to store one), and ErrShuttingDown when
// the server actor is gone.
func OpenProxy(ctx context.Context, n Node, pid *actor.PID, srv routing.ServerEntry, opts ProxyOptions, timeout time.Duration) (*ProxySession, error) {
	claim := &proxyClaim{}
	type answer struct {
		res any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := n.Ask(context.WithoutCancel(ctx), pid, &openProxy{opts: opts, claim: claim}, timeout)
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
			return &ProxySession{node: n, pid: opened.pid, server: srv, init: opened.init, shared: opened.shared}, nil
		}
		a.err = fmt.Errorf("unexpected reply %T to open proxy", a.res)
	}
	if pid := claim.abandon(); pid != nil {
		n.ActorSystem().Root.Stop(pid)
	}
	return nil, a.err
}

// Server is the server this session proxies (as the routing table knew it when the session opened).
func (p *ProxySession) Server() routing.ServerEntry { return p.server }

// InitializeResult is the backend's answer to initialize: its capabilities, instructions, info and version.
func (p *ProxySession) InitializeResult() *mcp.InitializeResult { return p.init }

// Close ends the upstream session (and its child process) and waits until the proxy actor has stopped. It is
// idempotent.
func (p *ProxySession) Close() error {
	var err error
	p.once.Do(func() {
		if werr := p.node.ActorSystem().Root.StopFuture(p.pid).Wait(); werr != nil && !errors.Is(werr, actor.ErrDeadLetter) {
			err = fmt.Errorf("stop proxy session: %w", werr)
		}
	})
	return err
}

// do asks the proxy actor to run fn on the session.
func (p *ProxySession) do(ctx context.Context, fn func(context.Context, proxyUpstream) (any, error)) (any, error) {
	if err := p.shared.endedWith(); err != nil {
		return nil, err // never sent (ErrCredentialChanged)
	}
	deadline := p.node.CallDeadline(ctx)
	req := &proxyRequest{ctx: ctx, deadline: deadline, do: fn}
	res, err := p.ask(ctx, req, time.Until(deadline)+time.Second)
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
	if cr, ok := r.res.(*mcp.CallToolResult); ok {
		scrubToolError(cr, r.scrub)
	}
	return r.res, scrubbed(r.err, r.scrub)
}

// ask sends req to the proxy actor and waits for its answer, or until the actor stops without having received req:
// a request that passed endedWith just before the caller's credential changed may reach the mailbox after the
// actor's end, where it is dropped unanswered; it is answered at once with why the session ended (never run: the
// front end sends it again on a new upstream session) instead of at the ask's timeout.
func (p *ProxySession) ask(ctx context.Context, req *proxyRequest, timeout time.Duration) (any, error) {
	type answer struct {
		res any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := p.node.Ask(ctx, p.pid, req, timeout)
		ch <- answer{res, err}
	}()
	var stopped <-chan struct{}
	if p.shared != nil {
		stopped = p.shared.stoppedCh()
	}
	select {
	case a := <-ch:
		return a.res, a.err
	case <-stopped:
		if !req.taken.CompareAndSwap(false, true) {
			a := <-ch // the actor received it: it answers (run, or refused)
			return a.res, a.err
		}
		if err := p.shared.endedWith(); err != nil {
			return nil, err
		}
		return nil, ErrProxyClosed
	}
}

// scrubToolError removes the session's own secrets (scrub: a caller's credential, their OAuth tokens as renewed)
// from a tool error result (isError) in place: its text contents and its structured content, as from a JSON-RPC
// error's text (scrubbed). A successful result is the backend's answer and passes as it came.
func scrubToolError(res *mcp.CallToolResult, scrub func(string) string) {
	if res == nil || !res.IsError || scrub == nil {
		return
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			tc.Text = scrub(tc.Text)
		}
	}
	if res.StructuredContent == nil {
		return
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		res.StructuredContent = nil // nothing that cannot be checked reaches the client
		return
	}
	if clean := scrub(string(raw)); clean != string(raw) {
		var v any
		if json.Unmarshal([]byte(clean), &v) != nil {
			v = nil
		}
		res.StructuredContent = v
	}
}

// scrubbed is err with the session's own secrets (a caller's credential) removed from its text: a backend's
// JSON-RPC error keeps its code and data, anything else keeps ErrProxyClosed or ErrProxyConnect when it wraps them.
func scrubbed(err error, scrub func(string) string) error {
	if err == nil || scrub == nil {
		return err
	}
	text := err.Error()
	clean := scrub(text)
	if clean == text {
		return err
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		out := &jsonrpc.Error{Code: je.Code, Message: scrub(je.Message)}
		if d := scrub(string(je.Data)); len(je.Data) > 0 && json.Valid([]byte(d)) {
			out.Data = json.RawMessage(d)
		}
		return out
	}
	for _, sentinel := range []error{ErrProxyClosed, ErrProxyConnect} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("%w: %s", sentinel, clean)
		}
	}
	return errors.New(clean)
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
