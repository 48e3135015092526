package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// ErrDenied is what a Policy wraps to refuse a call (403 FORBIDDEN).
var ErrDenied = errors.New("call denied by policy")

// CallRequest is a decoded tool call: the front end authenticated the caller, took its rate-limit token and
// checked the request's shape.
type CallRequest struct {
	// Caller is who asks (for the Policy).
	Caller auth.Identity
	// Name is the tool's name as the client gave it: namespaced {server}.{tool}, its alias, or its original name
	// when one server has it. ServerID, when set, picks the server of an original name.
	Name, ServerID string
	// Profile is the profile the client asked the call within ("" none); Within is what the caller may see at all
	// (Bound for REST, the endpoint's scope for MCP; nil: every tool). A tool outside is not found.
	Profile string
	Within  routing.Scope
	// Arguments is the tool's arguments, a JSON object (empty or null: {}).
	Arguments json.RawMessage
	// Progress, when set, receives the backend's progress notifications while the call runs.
	Progress func(*pb.Progress)
	// Object asks for the go-sdk result object (CallResult.Object) instead of the JSON the actor encoded.
	Object bool
	// Start is when the front end received the call (zero: when Call began), the start of the metadata's times.
	Start time.Time
}

// Call describes a routed call: where it went, the name it was asked by and its times. Metadata renders it.
type Call struct {
	Route routing.Route
	// Asked is the name the client used.
	Asked string
	// Start is when the call was received, Routed when it was resolved, Done when the answer came.
	Start, Routed, Done time.Time
	// MaxCallsPerServer is reported in a SERVER_BUSY answer's context when known (0: not reported).
	MaxCallsPerServer int
}

// CallResult is a successful call: the backend's result as the server's actor produced it, and the call's route
// and times.
type CallResult struct {
	Call Call
	// Reply is the actor's answer; its ResultJson is the result's JSON unless Object was asked and the actor ran
	// on this node.
	Reply *pb.CallToolReply
	// Object is the go-sdk result when CallRequest.Object was set.
	Object *mcp.CallToolResult
}

// RouteError is a tool name that did not resolve: unknown server id, unknown tool, or an original name several
// servers have (Err is routing's or the store's error).
type RouteError struct {
	Err            error
	Name, ServerID string
	table          *routing.RouteTable
}

func (e *RouteError) Error() string { return fmt.Sprintf("resolve %q: %v", e.Name, e.Err) }
func (e *RouteError) Unwrap() error { return e.Err }

// Candidates names, by alias, the tools an ambiguous name could mean (nil when the name was not ambiguous).
func (e *RouteError) Candidates() []string {
	var amb *routing.AmbiguousToolError
	if !errors.As(e.Err, &amb) {
		return nil
	}
	return Candidates(e.table, amb)
}

// Candidates names, by alias, the tools an ambiguous name could mean.
func Candidates(rt *routing.RouteTable, amb *routing.AmbiguousToolError) []string {
	var out []string
	for _, id := range amb.ServerIDs {
		if srv, ok := rt.Server(id); ok {
			if e, ok := rt.Tool(srv.Name + "." + amb.Name); ok {
				out = append(out, e.Alias)
			}
		}
	}
	return out
}

// CallError is a resolved call that failed: the server's actor reported an error (Info: unavailable, busy,
// timed out, the backend's own error, ...), or asking it failed (Err: the server is gone, the ask timed out, the
// daemon is stopping).
type CallError struct {
	Call Call
	Info *pb.ErrorInfo
	Err  error
}

func (e *CallError) Error() string {
	if e.Info != nil {
		return fmt.Sprintf("call %s: %s: %s", e.Call.Route.Name, e.Info.Code, e.Info.Message)
	}
	return fmt.Sprintf("call %s: %v", e.Call.Route.Name, e.Err)
}
func (e *CallError) Unwrap() error { return e.Err }

// Call runs one tool call, in this order: the caller's scope, resolving the name in the routing table (no
// database on this path), the Policy, the call on the server's actor, the routing time. The server's actor decides
// whether the call runs, whatever status the routing table shows: right after the server was activated (a
// restart, a failover, a hand-over between cluster nodes) the table may still show an earlier owner's status while
// the actor keeps the call until its connection is up; otherwise it answers SERVER_UNAVAILABLE with the live
// status. The call is bounded by the actors' request timeout (or ctx's earlier deadline).
//
// The call is a span ("gateway.call") of the caller's trace, with the tool's name and the server it went to; its
// context goes with the call to the server's actor, wherever it runs.
func (g *Gateway) Call(ctx context.Context, req CallRequest) (CallResult, error) {
	if !telemetry.On() {
		return g.call(ctx, req)
	}
	ctx, span := telemetry.Tracer().Start(ctx, "gateway.call")
	defer span.End()
	res, err := g.call(ctx, req)
	traceCall(span, req, res, err)
	return res, err
}

func (g *Gateway) call(ctx context.Context, req CallRequest) (CallResult, error) {
	start := req.Start
	if start.IsZero() {
		start = time.Now()
	}
	rt := g.actors.Routes()
	sc, err := scope(rt, req.Profile, req.Within)
	if err != nil {
		return CallResult{}, err
	}
	route, err := rt.ResolveIn(sc, req.Name, req.ServerID)
	if err != nil {
		return CallResult{}, &RouteError{Err: err, Name: req.Name, ServerID: req.ServerID, table: rt}
	}
	if g.policy != nil {
		if err := g.policy.AllowCall(ctx, PolicyCall{Caller: req.Caller, Table: rt, Route: route, Arguments: req.Arguments}); err != nil {
			return CallResult{}, err
		}
	}
	call := Call{Route: route, Asked: req.Name, Start: start, Routed: time.Now()}
	res, err := g.run(ctx, call, req)
	if err != nil && g.exchange != nil && g.exchanged(ctx, req, route, err) { // (a successful call allocates nothing here)
		res, err = g.run(ctx, call, req)
	}
	return res, err
}

// exchanged reports whether a call that failed for want of the caller's own OAuth grant got one by exchanging the
// caller's access token of the organisation's issuer (ExchangedFor): then the call runs again.
func (g *Gateway) exchanged(ctx context.Context, req CallRequest, route routing.Route, err error) bool {
	var ce *CallError
	return errors.As(err, &ce) && g.ExchangedFor(ctx, route.ServerID, req.Caller, ce.Info)
}

// ExchangedFor reports whether a request to serverID the server's actor answered with info (a tool call, a
// resource read, a prompt: any request of a per_user server) failed for want of the caller's own OAuth grant and
// got one by exchanging the caller's access token of the organisation's issuer (ExchangeCredential): then the
// front end runs the request again, once. A request that was answered otherwise, or a caller with nothing to
// exchange, is not retried.
func (g *Gateway) ExchangedFor(ctx context.Context, serverID string, caller auth.Identity, info *pb.ErrorInfo) bool {
	if g.exchange == nil || info == nil || info.Code != errcode.CredentialRequired || !info.CredentialOauth {
		return false
	}
	return g.ExchangeCredential(ctx, serverID, caller) == nil
}

// errNoExchange: the gateway has no exchanger, or the caller came without an OAuth access token to exchange.
var errNoExchange = errors.New("no OAuth access token to exchange")

// ExchangeCredential gets caller a grant of their own for the per_user server serverID by exchanging the OAuth
// access token they came with (Options.ExchangeCredential), and stores it. The calls of this package use it on
// CREDENTIAL_REQUIRED; the per-server endpoint (http/mcpproxy) when a session opens and when the grant its
// session holds can give no more tokens. An error when there is nothing to exchange (a static token, no
// exchanger) or the exchange failed (the server does not exchange, its authorization server refused).
func (g *Gateway) ExchangeCredential(ctx context.Context, serverID string, caller auth.Identity) error {
	if g.exchange == nil || !caller.OAuth || caller.AccessToken() == "" {
		return errNoExchange
	}
	return g.exchange(ctx, serverID, CredentialSubject(caller), caller.AccessToken())
}

// traceCall describes a call on its span: the name asked, the route, and how it failed (error.type: the
// contract's code, or the kind of failure).
func traceCall(span trace.Span, req CallRequest, res CallResult, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.GenAIToolNameKey.String(req.Name))
	if r := res.Call.Route; r.ServerID != "" {
		span.SetAttributes(telemetry.ServerNameKey.String(r.ServerName), telemetry.ServerIDKey.String(r.ServerID),
			attribute.String("aggregator.tool", r.Name), attribute.String("aggregator.routing.strategy", r.Strategy))
	}
	var re *RouteError
	var ce *CallError
	switch {
	case err == nil:
		if res.Object != nil && res.Object.IsError {
			telemetry.Fail(span, nil, telemetry.ToolErrorType)
		}
	case errors.As(err, &re):
		telemetry.Fail(span, err, "route_error")
	case errors.Is(err, ErrDenied):
		telemetry.Fail(span, err, "forbidden")
	case errors.As(err, &ce) && ce.Info != nil:
		telemetry.Fail(span, err, ce.Info.Code)
	default:
		telemetry.Fail(span, err, "_OTHER")
	}
}

// run asks the route's server actor and classifies its answer.
func (g *Gateway) run(ctx context.Context, c Call, req CallRequest) (CallResult, error) {
	args := req.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var res CallResult
	var err error
	// A per_user server runs the call on the caller's own session (only then the subject goes along: a shared
	// server's call allocates nothing for it).
	if srv, ok := g.actors.Routes().Server(c.Route.ServerID); ok && srv.PerUser {
		ctx = WithCallerSubject(ctx, CredentialSubject(req.Caller))
	}
	if req.Object && g.objects != nil {
		res.Object, res.Reply, err = g.objects.CallResult(ctx, c.Route, args, req.Progress)
	} else {
		res.Reply, err = g.actors.Call(ctx, c.Route, args, req.Progress)
	}
	c.Done = time.Now()
	res.Call = c
	if err != nil {
		return res, &CallError{Call: c, Err: err}
	}
	// The aggregator's share of the call: everything but the backend's own execution.
	g.metrics.Routing(ctx, c.Done.Sub(c.Start)-time.Duration(res.Reply.ExecutionMs*float64(time.Millisecond)))
	if res.Reply.Error != nil {
		return res, &CallError{Call: c, Info: res.Reply.Error}
	}
	if req.Object && res.Object == nil {
		var out mcp.CallToolResult
		if err := json.Unmarshal(res.Reply.ResultJson, &out); err != nil {
			return res, fmt.Errorf("decode result of %s: %w", c.Route.Name, err)
		}
		res.Object = &out
	}
	return res, nil
}

// Metadata is the routing metadata of a successful call, the same on REST (the body's metadata) and MCP (the
// result's _meta.metadata): where it went, how it was resolved, the times, and a warning for a DEGRADED server.
func (c Call) Metadata() map[string]any {
	r := c.Route
	meta := map[string]any{
		"routed_to":         r.ServerName,
		"server_id":         r.ServerID,
		"tool":              r.Name,
		"strategy":          r.Strategy,
		"routing_time_ms":   Ms(c.Routed.Sub(c.Start)),
		"execution_time_ms": Ms(c.Done.Sub(c.Routed)),
		"total_time_ms":     Ms(c.Done.Sub(c.Start)),
	}
	if r.ServerStatus == persistence.StatusDegraded {
		meta["warning"] = "Server " + r.ServerName + " is DEGRADED: recent health checks failed"
	}
	return meta
}

// MetadataJSON is Metadata encoded, byte for byte what json.Marshal makes of it (keys in order), written without
// the map: the call path answers every call with it.
func (c Call) MetadataJSON() json.RawMessage {
	r := c.Route
	b := make([]byte, 0, 192+len(r.ServerName)*2+len(r.ServerID)+len(r.Name))
	b = append(b, `{"execution_time_ms":`...)
	b = appendFloat(b, Ms(c.Done.Sub(c.Routed)))
	b = appendMember(b, "routed_to", r.ServerName)
	b = append(b, `,"routing_time_ms":`...)
	b = appendFloat(b, Ms(c.Routed.Sub(c.Start)))
	b = appendMember(b, "server_id", r.ServerID)
	b = appendMember(b, "strategy", r.Strategy)
	b = appendMember(b, "tool", r.Name)
	b = append(b, `,"total_time_ms":`...)
	b = appendFloat(b, Ms(c.Done.Sub(c.Start)))
	if r.ServerStatus == persistence.StatusDegraded {
		b = appendMember(b, "warning", "Server "+r.ServerName+" is DEGRADED: recent health checks failed")
	}
	return append(b, '}')
}

// appendMember appends `,"key":value` for a string value, escaped as encoding/json escapes it.
func appendMember(b []byte, key, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(v) // rare: let encoding/json escape it
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"')
}

// appendFloat appends f as encoding/json writes a float64 (its exponent form only outside [1e-6, 1e21)).
func appendFloat(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		q, _ := json.Marshal(f)
		return append(b, q...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// Ms is a duration in milliseconds with microsecond precision, as the metadata reports times.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
