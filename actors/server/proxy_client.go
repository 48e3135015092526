package server

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/persistence"
)

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

// keepAliveMisses is how many keepalive pings in a row must go unanswered (each within half the interval) before a
// session is given up: one ping missed by a busy but live backend, or on a loaded host, must not end a session and
// its calls in flight (the MCP spec: "multiple failed pings MAY trigger a connection reset"). A dead backend is
// noticed within two intervals.
const keepAliveMisses = 2

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
		o.KeepAlive, o.KeepAliveFailureThreshold = p.deps.Config.KeepAlive, keepAliveMisses
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
	if p.relay != nil {
		// A caller's session declares what the server's own session does (roots, elicitation, sampling), and
		// relays like it: to the client of the call in flight, log messages at the server's rate.
		caps.RootsV2 = &mcp.RootCapabilities{}
		name, mx := p.rec.Name, p.deps.Metrics
		limit := floodguard.NewLimiter(p.deps.Config.NotifyRate, func(kind string) { mx.NotificationDropped(name, kind) })
		relayHandlers(o, p.relay, p.sys, limit)
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
