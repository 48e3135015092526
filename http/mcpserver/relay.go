package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/telemetry"
)

// sessionRelay is the client session of a tool call, answering its backend's elicitation and sampling requests
// and taking its log messages (actors.Relay; see actors/server_relay.go for when a backend's request is relayed).
type sessionRelay struct{ ss *mcp.ServerSession }

func (r sessionRelay) Supports(method string) bool {
	p := r.ss.InitializeParams()
	if p == nil || p.Capabilities == nil {
		return false
	}
	switch method {
	case "elicitation/create":
		return p.Capabilities.Elicitation != nil
	case "sampling/createMessage":
		return p.Capabilities.Sampling != nil
	case "roots/list":
		return p.Capabilities.RootsV2 != nil
	}
	return false
}

// ClientKey names the client session (actors.RelayClient): its MCP session id, or, for a session without one
// (stdio), the session object's address, unique while it lives. A backend that sends requests to its client gets a
// backend session per key.
func (r sessionRelay) ClientKey() string {
	if id := r.ss.ID(); id != "" {
		return id // no allocation: every relayed call asks for it
	}
	return fmt.Sprintf("ss:%p", r.ss)
}

// Each request relayed to the client is a span below the call's (telemetry.Relayed), when the call is traced.

func (r sessionRelay) Elicit(ctx context.Context, p *mcp.ElicitParams) (res *mcp.ElicitResult, err error) {
	ctx, end := telemetry.Relayed(ctx, "elicitation/create", r.ss.ID())
	defer func() { end(err) }()
	if actors.TitledMultiSelect(p.RequestedSchema) {
		// ServerSession.Elicit would refuse the client's answer to this schema (see elicitSchemaKey): it is sent
		// without one, and the sending middleware puts it back on the wire. The backend that asked validates the
		// answer against it.
		cp := *p
		cp.RequestedSchema = nil
		return r.ss.Elicit(context.WithValue(ctx, elicitSchemaKey{}, p.RequestedSchema), &cp)
	}
	return r.ss.Elicit(ctx, p)
}

// elicitSchemaKey carries a requested schema that go-sdk v1.8.0 wrongly refuses: a titled multi-select enum (an
// array whose items are `{"type": "string", "anyOf": [{"const", "title"}...]}`, valid under SEP-1330), for which its
// schema check wants `enum`. ServerSession.Elicit runs that check on the client's answer; restoreElicitSchema, a
// sending middleware, puts the schema into the request on the wire only, so that the client sees what the backend
// asked while the go-sdk's check is skipped. Remove when the go-sdk accepts the schema.
type elicitSchemaKey struct{}

// restoreElicitSchema is the sending middleware that puts back the schema Elicit was called without.
func restoreElicitSchema(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		schema := ctx.Value(elicitSchemaKey{})
		if method != "elicitation/create" || schema == nil {
			return next(ctx, method, req)
		}
		// Elicit sends a *ServerRequest[mcp.Params] (not [*ElicitParams]): reach the params through the interface.
		p, ok := req.GetParams().(*mcp.ElicitParams)
		if !ok || p == nil {
			return next(ctx, method, req)
		}
		p.RequestedSchema = schema
		defer func() { p.RequestedSchema = nil }() // Elicit checks the answer against what it holds
		return next(ctx, method, req)
	}
}

func (r sessionRelay) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (res *mcp.CreateMessageResult, err error) {
	ctx, end := telemetry.Relayed(ctx, "sampling/createMessage", r.ss.ID())
	defer func() { end(err) }()
	return r.ss.CreateMessage(ctx, p)
}

func (r sessionRelay) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (res *mcp.ListRootsResult, err error) {
	ctx, end := telemetry.Relayed(ctx, "roots/list", r.ss.ID())
	defer func() { end(err) }()
	return r.ss.ListRoots(ctx, p)
}

// Log passes a backend's log message on; the session sends it only at or above the level its client set.
func (r sessionRelay) Log(ctx context.Context, p *mcp.LoggingMessageParams) { _ = r.ss.Log(ctx, p) }

// withRelay makes a tool call relay its backend's requests and log messages to the calling session, when its
// client declared elicitation, sampling or roots. Other clients' calls carry nothing (no relay actor, no allocation): their
// backend's requests are answered -32601 by the server actor, and their log messages are not relayed.
func withRelay(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req == nil || req.Session == nil {
		return ctx
	}
	r := sessionRelay{req.Session}
	if !r.Supports("elicitation/create") && !r.Supports("sampling/createMessage") && !r.Supports("roots/list") {
		return ctx
	}
	return actors.WithRelay(ctx, r)
}
