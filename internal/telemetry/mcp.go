package telemetry

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Attributes of OpenTelemetry's MCP and GenAI semantic conventions, and this daemon's own.
var (
	mcpMethod     = semconv.McpMethodNameKey
	mcpSession    = semconv.McpSessionIDKey
	mcpResource   = semconv.McpResourceURIKey
	genAITool     = semconv.GenAIToolNameKey
	genAIPrompt   = semconv.GenAIPromptNameKey
	genAIOp       = semconv.GenAIOperationNameKey
	errorType     = semconv.ErrorTypeKey
	rpcStatusCode = semconv.RPCResponseStatusCodeKey
	// ServerNameKey names the registered backend server a span is about.
	ServerNameKey = attribute.Key("aggregator.server.name")
	// ServerIDKey is that server's id.
	ServerIDKey = attribute.Key("aggregator.server.id")
)

// ToolErrorType is error.type of a tools/call whose result has isError (the MCP semantic conventions' tool_error).
const ToolErrorType = "tool_error"

// ServerMiddleware makes a server span of every MCP request the aggregator's own endpoint receives (not of
// notifications): named "{method} {tool or prompt}", with mcp.method.name, gen_ai.tool.name (and
// gen_ai.operation.name execute_tool) or gen_ai.prompt.name or mcp.resource.uri, and mcp.session.id. It continues
// the client's trace from the request's _meta (traceparent, tracestate) or else from the HTTP request's headers.
// An error answer, or a tool result with isError, sets error.type and the span's status.
func ServerMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "notifications/") || !On() {
			return next(ctx, method, req)
		}
		ctx = incoming(ctx, req)
		ctx, span := Tracer().Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			describe(span, method, req)
			if s, ok := req.GetSession().(*mcp.ServerSession); ok && s != nil {
				if id := s.ID(); id != "" {
					span.SetAttributes(mcpSession.String(id))
				}
			}
		}
		res, err := next(ctx, method, req)
		outcome(span, res, err, true)
		return res, err
	}
}

// incoming continues the trace context of a request: its _meta's when it has one, else its HTTP headers'.
func incoming(ctx context.Context, req mcp.Request) context.Context {
	if p := params(req); p != nil {
		if meta := p.GetMeta(); meta != nil {
			if _, ok := meta[TraceparentKey].(string); ok {
				return fromMeta(ctx, meta)
			}
		}
	}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(extra.Header))
	}
	return ctx
}

// ClientMiddleware makes a client span of every request a backend session sends within a traced request (a call
// the aggregator routes; not keep-alive pings, notifications, or the discovery the daemon runs on its own): named
// "{method} {tool}", with mcp.method.name, gen_ai.tool.name, mcp.session.id and the server's name and id. The
// span's context goes into the request's _meta (traceparent, tracestate; for every transport) and, through the
// request's context, into the HTTP headers of an SSE or HTTP session (the session's transport injects them). A
// failure sets error.type and the status, never the error's text (a transport error can name the endpoint's URL).
func ClientMiddleware(serverName, serverID string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "ping" || strings.HasPrefix(method, "notifications/") || !trace.SpanContextFromContext(ctx).IsValid() {
				return next(ctx, method, req)
			}
			ctx, span := Tracer().Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient))
			defer span.End()
			if span.IsRecording() {
				describe(span, method, req)
				span.SetAttributes(ServerNameKey.String(serverName), ServerIDKey.String(serverID))
				if s, ok := req.GetSession().(*mcp.ClientSession); ok && s != nil {
					if id := s.ID(); id != "" {
						span.SetAttributes(mcpSession.String(id))
					}
				}
			}
			if p := params(req); p != nil {
				// A copy: the caller's _meta map may be shared.
				meta := maps.Clone(p.GetMeta())
				if meta == nil {
					meta = map[string]any{}
				}
				otel.GetTextMapPropagator().Inject(ctx, MetaCarrier(meta))
				p.SetMeta(meta)
			}
			res, err := next(ctx, method, req)
			outcome(span, res, err, false)
			return res, err
		}
	}
}

// params is the request's params, nil when it has none: a request sent without params (a ping, a tools/call
// without any) has a nil pointer of its params type, whose methods must not be called.
func params(req mcp.Request) mcp.Params {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p
}

// describe names span after the request's method and target and sets their attributes.
func describe(span trace.Span, method string, req mcp.Request) {
	attrs := []attribute.KeyValue{mcpMethod.String(method)}
	target := ""
	switch p := params(req).(type) {
	case *mcp.CallToolParamsRaw:
		target = p.Name
	case *mcp.CallToolParams:
		target = p.Name
	case *mcp.GetPromptParams:
		attrs = append(attrs, genAIPrompt.String(p.Name))
		span.SetName(method + " " + p.Name)
	case *mcp.ReadResourceParams:
		attrs = append(attrs, mcpResource.String(p.URI))
	}
	if target != "" {
		attrs = append(attrs, genAITool.String(target), genAIOp.String("execute_tool"))
		span.SetName(method + " " + target)
	}
	span.SetAttributes(attrs...)
}

// outcome sets the span's error: a JSON-RPC error's code, another error's kind, or tool_error for a tool result
// with isError. withText records the error's text too.
func outcome(span trace.Span, res mcp.Result, err error, withText bool) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		kind := "_OTHER"
		var rpc *jsonrpc.Error
		switch {
		case errors.As(err, &rpc):
			kind = strconv.FormatInt(rpc.Code, 10)
			span.SetAttributes(rpcStatusCode.String(kind))
		case errors.Is(err, context.DeadlineExceeded):
			kind = "timeout"
		case errors.Is(err, context.Canceled):
			kind = "cancelled"
		}
		if !withText {
			err = nil
		}
		Fail(span, err, kind)
		return
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		Fail(span, nil, ToolErrorType)
	}
}

// Relayed starts the span of a backend's request (elicitation/create, sampling/createMessage, roots/list) that the
// aggregator relays to the calling client, within a traced call: a client span (the aggregator asks, the client
// answers) named after the method, below the call's span, with mcp.method.name and, when known, the calling
// client's mcp.session.id. end records the outcome: an error (the client's JSON-RPC error, a timeout, the client
// gone) sets error.type and the status. Outside a trace nothing is started and end does nothing.
func Relayed(ctx context.Context, method, sessionID string) (_ context.Context, end func(error)) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noEnd
	}
	ctx, span := Tracer().Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(mcpMethod.String(method))
		if sessionID != "" {
			span.SetAttributes(mcpSession.String(sessionID))
		}
	}
	return ctx, func(err error) {
		outcome(span, nil, err, true)
		span.End()
	}
}

func noEnd(error) {}

// Forward runs call, a request (method, with params) that the aggregator forwards to a backend on a session whose
// requests do not pass ClientMiddleware (the per-server endpoint's upstream session), inside the client span
// ClientMiddleware makes, with that span's context put into params' _meta (a copy of the map); call sends params
// with the context it is given. Outside a trace it is call(ctx) itself.
func Forward[R mcp.Result](ctx context.Context, serverName, serverID, method string, params mcp.Params, call func(context.Context) (R, error)) (R, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return call(ctx)
	}
	h := ClientMiddleware(serverName, serverID)(func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		return call(ctx)
	})
	res, err := h(ctx, method, &mcp.ServerRequest[mcp.Params]{Params: params})
	r, _ := res.(R)
	return r, err
}
