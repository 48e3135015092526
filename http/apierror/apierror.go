// Package apierror is the one error vocabulary of every front end: the error codes, the error body
// {"detail","error_code","context"}, the one mapping from the store's and the actors' errors to (HTTP status, code,
// detail, context), the rate-limit answer, and how an answer is rendered on net/http (Write) and as an MCP tool
// result (CallToolResult). REST (http/api), the aggregated MCP endpoint (http/mcpserver, also served over stdio) and
// the per-server endpoint (http/mcpproxy) all use it, so the same failure gets the same code and words everywhere.
// It imports no HTTP framework: Fiber code adapts an *Error in a few lines (http/api's ErrorHandler).
package apierror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/errcode"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/apierror/errbody"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Error codes of the error body (system-contract.md's table plus the front ends' own), one spelling for clients
// and tests. Every code is declared once, in package errcode (which the actors and package auth use too); this
// block re-exports the whole list under the names the front ends use.
const (
	CodeServerNotFound       = errcode.ServerNotFound
	CodeServerAlreadyExists  = errcode.ServerAlreadyExists
	CodeServerLimitReached   = errcode.ServerLimitReached
	CodeValidation           = errcode.Validation
	CodeServiceBusy          = errcode.ServiceBusy
	CodeServiceUnavailable   = errcode.ServiceUnavailable
	CodeStoreUnavailable     = errcode.StoreUnavailable
	CodeRequestTooLarge      = errcode.RequestTooLarge
	CodeUnsupportedMediaType = errcode.UnsupportedMediaType
	CodeNotFound             = errcode.NotFound
	CodeMethodNotAllowed     = errcode.MethodNotAllowed
	CodeInternal             = errcode.Internal
	CodeToolNotFound         = errcode.ToolNotFound
	CodeToolAmbiguous        = errcode.ToolAmbiguous
	CodeServerUnavailable    = errcode.ServerUnavailable
	CodeExecutionFailed      = errcode.ExecutionFailed
	CodeRequestTimeout       = errcode.RequestTimeout
	CodeServerBusy           = errcode.ServerBusy
	CodeResponseTooLarge     = errcode.ResponseTooLarge
	CodeLoopDetected         = errcode.LoopDetected
	CodeUnauthorized         = errcode.Unauthorized
	CodeForbidden            = errcode.Forbidden
	CodeCredentialRequired   = errcode.CredentialRequired
	CodeHostNotAllowed       = errcode.HostNotAllowed
	CodeOriginNotAllowed     = errcode.OriginNotAllowed
	CodeRateLimited          = errcode.RateLimited
	// CodeSessionLimit: an MCP endpoint already holds its maximum of sessions (in total or for this client).
	CodeSessionLimit = errcode.SessionLimit
	// Tool curation.
	CodeProfileNotFound = errcode.ProfileNotFound
	CodeProfileInUse    = errcode.ProfileInUse
	CodeToolNameTaken   = errcode.ToolNameTaken
	CodeChangeOutdated  = errcode.ChangeOutdated
	// Idempotent registration (the Idempotency-Key header of POST /servers): a malformed key is 400, a key
	// already used for a different request body 422.
	CodeInvalidIdempotencyKey = errcode.InvalidIdempotencyKey
	CodeIdempotencyKeyReused  = errcode.IdempotencyKeyReused
)

// StatusLoopDetected is HTTP 508, the answer to a call that would loop back into this aggregator.
const StatusLoopDetected = http.StatusLoopDetected

// ServerRef names a server and its state in an error (SERVER_UNAVAILABLE) or a search result.
type ServerRef = errbody.ServerRef

// Body is the one shape of every error answer: Detail is a message, or for 422 the list of FieldError; Context
// carries extra machine-readable facts and is omitted when empty; Server is set on SERVER_UNAVAILABLE.
type Body = errbody.Body

// Error is a failure with its answer: the HTTP status, the code, the detail (a string, or []FieldError), extra
// context, the server it is about, and how many seconds to tell the client to wait (Retry-After; 0: none).
type Error struct {
	Status     int
	Code       string
	Detail     any
	Context    map[string]any
	Server     *ServerRef
	RetryAfter int
}

func (e *Error) Error() string {
	if s, ok := e.Detail.(string); ok {
		return e.Code + ": " + s
	}
	return e.Code
}

// Body is the error body to send.
func (e *Error) Body() Body {
	b := Body{Detail: e.Detail, ErrorCode: e.Code, Server: e.Server}
	if len(e.Context) > 0 {
		b.Context = e.Context
	}
	return b
}

// Message is the detail as one line: the string, or the JSON of a field error list.
func (e *Error) Message() string {
	if s, ok := e.Detail.(string); ok {
		return s
	}
	b, _ := json.Marshal(e.Detail)
	return string(b)
}

// RetryAfterHeader is the Retry-After header of the answer in seconds, "" for none: RetryAfter when set, and 1
// for SERVICE_BUSY (a busy answer always says when to come back).
func (e *Error) RetryAfterHeader() string {
	switch {
	case e.RetryAfter > 0:
		return strconv.Itoa(e.RetryAfter)
	case e.Code == CodeServiceBusy:
		return "1"
	}
	return ""
}

// Write answers e on a net/http response: the JSON error body with its status and Retry-After.
func Write(w http.ResponseWriter, e *Error) {
	errbody.Write(w, e.Status, e.Body(), e.RetryAfterHeader())
}

// ToolResult is the body of the error as an MCP tool result's structured content:
// {"status":"error","error_code","error"[,"context"][,"server"][,"retry_after_seconds"]}.
func (e *Error) ToolResult() map[string]any {
	body := map[string]any{"status": "error", "error_code": e.Code, "error": e.Message()}
	if _, ok := e.Detail.(string); !ok && e.Detail != nil {
		body["detail"] = e.Detail
	}
	if len(e.Context) > 0 {
		body["context"] = e.Context
	}
	if e.Server != nil {
		body["server"] = e.Server
	}
	if e.RetryAfter > 0 {
		body["retry_after_seconds"] = e.RetryAfter
	}
	return body
}

// CallToolResult is the error as an MCP tool error (isError) the model can read: ToolResult as text and as
// structured content.
func (e *Error) CallToolResult() *mcp.CallToolResult {
	body := e.ToolResult()
	b, _ := json.Marshal(body)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: body}
}

// Internal is the generic 500 that leaks nothing.
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Detail: "Internal server error"}
}

// Validation is a 422 with the field errors.
func Validation(errs []FieldError) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidation, Detail: errs}
}

// ServerNotFound is the 404 of an unknown server id or name.
func ServerNotFound(idOrName string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeServerNotFound, Detail: "Server not found: " + idOrName}
}

// Unavailable is the 503 of a server that cannot take calls now, naming it and its state.
func Unavailable(id, name, status, detail string, ctx map[string]any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeServerUnavailable, Detail: detail, Context: ctx,
		Server: &ServerRef{ID: id, Name: name, Status: status}}
}

// RetryAfterSeconds is the Retry-After value for a wait: whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// RateLimit takes one token from the caller's bucket of lim (one budget per client across REST and MCP): nil when
// the call may go ahead (always with a nil lim), else the RateLimited answer.
func RateLimit(lim *auth.Limiter, id auth.Identity) *Error {
	if ok, wait := lim.Allow(id.RateKey()); !ok {
		return RateLimited(wait)
	}
	return nil
}

// RateLimited is the 429 of an empty rate-limit bucket, the same on every front end.
func RateLimited(wait time.Duration) *Error {
	secs := RetryAfterSeconds(wait)
	return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
		Detail:  "Too many tool calls; retry after " + strconv.Itoa(secs) + " s",
		Context: map[string]any{"retry_after_seconds": secs}, RetryAfter: secs}
}

// Subject names what a failed operation was about, for the messages of 404 and 409.
type Subject struct {
	ID   string
	Name string
}

func (s Subject) idOrName() string {
	if s.ID != "" {
		return s.ID
	}
	return s.Name
}

// FromError maps the sentinel errors of the store and the actor system (and a context's end), and the use cases'
// failures (gateway.RouteError, gateway.CallError, gateway.ErrDenied), to their answer, or returns nil for anything
// else, which the front end logs and answers as a generic internal error. It is the one such mapping: every front
// end answers a failure of the store, the actors or a gateway use case through it.
func FromError(err error, s Subject) *Error {
	var ae *Error
	var ue *routing.UnavailableError
	var re *gateway.RouteError
	var de *gateway.DeniedError
	var ce *gateway.CallError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &re):
		return RouteError(re.Err, Resolution{Name: re.Name, ServerID: re.ServerID})
	case errors.As(err, &ce):
		if ce.Info != nil {
			return CallError(ce.Call, ce.Info)
		}
		return FromError(ce.Err, Subject{ID: ce.Call.Route.ServerID, Name: ce.Call.Route.ServerName})
	case errors.As(err, &de):
		detail := "Denied by the access policy's default"
		if de.Rule != "" {
			detail = "Denied by the access policy's rule " + strconv.Quote(de.Rule)
		}
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Detail: detail,
			Context: map[string]any{"rule": de.Rule, "tool": de.Tool}}
	case errors.Is(err, gateway.ErrDenied):
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Detail: "This client may not call that tool"}
	case errors.As(err, &ue):
		detail := ue.Detail
		if detail == "" {
			detail = "Server unavailable: " + ue.Server.Name
		}
		e := Unavailable(ue.Server.ID, ue.Server.Name, ue.Server.Status, detail, nil)
		if ue.RetryAfter > 0 {
			e.RetryAfter = RetryAfterSeconds(ue.RetryAfter)
		}
		return e
	case errors.Is(err, persistence.ErrUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable,
			Detail:  "The database is unreachable; the request was not performed and may be retried",
			Context: map[string]any{"retryable": true}, RetryAfter: 5}
	case errors.Is(err, routing.ErrProfileNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeProfileNotFound, Detail: "Profile not found"}
	case errors.Is(err, routing.ErrProfileForbidden):
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Detail: "This client may not use that profile"}
	case errors.Is(err, gateway.ErrProfileInUse):
		return &Error{Status: http.StatusConflict, Code: CodeProfileInUse,
			Detail: "The profile still binds client tokens; remove them from its clients first (deleting it would widen what they see)"}
	case errors.Is(err, gateway.ErrNameTaken):
		return &Error{Status: http.StatusConflict, Code: CodeToolNameTaken, Detail: "Exposed name already taken: " + errDetail(err)}
	case errors.Is(err, persistence.ErrChanged):
		return &Error{Status: http.StatusConflict, Code: CodeChangeOutdated,
			Detail: "The pending change is not the one given (the backend changed the tool again); read the changes and decide again"}
	case errors.Is(err, persistence.ErrKeyReused):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused,
			Detail: "The Idempotency-Key was already used for a different request; use a new key for a new request"}
	case errors.Is(err, persistence.ErrNotFound):
		return ServerNotFound(s.idOrName())
	case errors.Is(err, persistence.ErrAlreadyExists):
		return &Error{Status: http.StatusConflict, Code: CodeServerAlreadyExists, Detail: "Server already exists: " + s.Name}
	case errors.Is(err, gateway.ErrMaxServers):
		return &Error{Status: http.StatusConflict, Code: CodeServerLimitReached,
			Detail: "Maximum number of servers reached; remove a server before registering another"}
	case errors.Is(err, gateway.ErrShuttingDown):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeServiceUnavailable, Detail: "The service is shutting down"}
	case errors.Is(err, gateway.ErrAskTimeout), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeServiceBusy,
			Detail: "The operation timed out; it may be retried", Context: map[string]any{"retryable": true}, RetryAfter: 1}
	case errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeServiceUnavailable, Detail: "The request was cancelled"}
	}
	return nil
}

// Resolution is a failed resolution of a tool name, for RouteError.
type Resolution struct {
	// Name is the name asked for, ServerID the server_id given (or "").
	Name, ServerID string
	// Candidates names the tools an ambiguous name could mean (their aliases or namespaced names), when known.
	Candidates []string
}

// RouteError maps a failed resolution: unknown server id 404, unknown tool 404, ambiguous original name 400 (with
// the candidate servers and, when given, the candidates' names). Anything else goes through FromError.
func RouteError(err error, r Resolution) *Error {
	var amb *routing.AmbiguousToolError
	switch {
	case errors.As(err, &amb):
		ctx := map[string]any{"tool": r.Name, "server_ids": amb.ServerIDs}
		detail := fmt.Sprintf("Tool %q is provided by several servers; call it by its namespaced name or with server_id", r.Name)
		if len(r.Candidates) > 0 {
			ctx["candidates"] = r.Candidates
			detail += fmt.Sprintf(" (one of %q)", r.Candidates)
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeToolAmbiguous, Detail: detail, Context: ctx}
	case errors.Is(err, persistence.ErrNotFound):
		return ServerNotFound(r.ServerID)
	case errors.Is(err, routing.ErrToolNotFound):
		ctx := map[string]any{"tool": r.Name}
		if r.ServerID != "" {
			ctx["server_id"] = r.ServerID
		}
		return &Error{Status: http.StatusNotFound, Code: CodeToolNotFound, Detail: "Tool not found: " + r.Name, Context: ctx}
	}
	return FromError(err, Subject{ID: r.ServerID})
}

// NotCallable is the answer to a call of a tool whose server is known but not CONNECTED or DEGRADED (for example
// while it reconnects), or nil when the server takes calls.
func NotCallable(route routing.Route) *Error {
	if route.ServerStatus == persistence.StatusConnected || route.ServerStatus == persistence.StatusDegraded {
		return nil
	}
	return Unavailable(route.ServerID, route.ServerName, route.ServerStatus,
		fmt.Sprintf("Server unavailable: %s (%s)", route.ServerName, route.ServerStatus), nil)
}

// Call describes a routed call, for CallError and Metadata (gateway.Call).
type Call = gateway.Call

// Ms is a duration in milliseconds with microsecond precision, as the metadata reports times.
func Ms(d time.Duration) float64 { return gateway.Ms(d) }

// CallError maps what a server actor reported about a call: lost or disconnected session 503 (with what was in
// progress), the server's call limit 503 SERVER_BUSY with Retry-After, a JSON-RPC error from the backend 502, an
// oversized answer 502, a loop back into the aggregator 508, the request timeout 504.
func CallError(c Call, e *pb.ErrorInfo) *Error {
	route := c.Route
	status := e.ServerStatus
	if status == "" {
		status = route.ServerStatus
	}
	elapsed := c.Done.Sub(c.Routed)
	if c.Done.IsZero() || c.Routed.IsZero() {
		elapsed = 0
	}
	inProgress := map[string]any{"tool": route.Name, "requested_as": c.Asked, "elapsed_ms": Ms(elapsed)}
	switch e.Code {
	case errcode.ExecutionFailed:
		return &Error{Status: http.StatusBadGateway, Code: CodeExecutionFailed, Detail: e.Message,
			Context: map[string]any{"tool": route.Name, "server_id": route.ServerID, "backend_error": e.Message}}
	case errcode.RequestTimeout:
		return &Error{Status: http.StatusGatewayTimeout, Code: CodeRequestTimeout, Detail: e.Message, Context: inProgress}
	case errcode.ServerBusy:
		ctx := map[string]any{"server": route.ServerName, "server_id": route.ServerID, "tool": route.Name, "retryable": true}
		if c.MaxCallsPerServer > 0 {
			ctx["limit"] = c.MaxCallsPerServer
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeServerBusy, Detail: e.Message, Context: ctx, RetryAfter: 1}
	case errcode.ResponseTooLarge:
		return &Error{Status: http.StatusBadGateway, Code: CodeResponseTooLarge, Detail: e.Message,
			Context: map[string]any{"tool": route.Name, "server": route.ServerName, "server_id": route.ServerID}}
	case errcode.CredentialRequired:
		// The caller has no credential of their own for a per_user server: 403 with where to provide one (on /mcp
		// the same body is the tool error).
		ce := CredentialRequired(route.ServerID, route.ServerName, e.Message, e.CredentialOauth)
		ce.Context["tool"] = route.Name
		return ce
	case errcode.LoopDetected:
		return &Error{Status: StatusLoopDetected, Code: CodeLoopDetected, Detail: e.Message,
			Context: map[string]any{"tool": route.Name, "server": route.ServerName, "server_id": route.ServerID}}
	default:
		return Unavailable(route.ServerID, route.ServerName, status, e.Message, map[string]any{"in_progress": inProgress})
	}
}

// CredentialRequired is the 403 CREDENTIAL_REQUIRED of a caller without a credential of their own for a per_user
// server: detail (the actors' text) and where to store one, or for an OAuth server (oauth) where to start the
// caller's authorization.
func CredentialRequired(serverID, serverName, detail string, oauth bool) *Error {
	ctx := map[string]any{"server": serverName, "server_id": serverID,
		"credential_url": gateway.CredentialPath(serverID), "method": http.MethodPut,
		"body": map[string]any{"secret": "..."}}
	if oauth { // the route that starts the caller's authorization (its answer holds the URL to open)
		ctx["credential_url"], ctx["method"], ctx["oauth"] = gateway.OAuthStartPath(serverID), http.MethodPost, true
		delete(ctx, "body")
	}
	return &Error{Status: http.StatusForbidden, Code: CodeCredentialRequired, Detail: detail, Context: ctx}
}

// Metadata is the routing metadata of a successful call (gateway.Call.Metadata).
func Metadata(c Call) map[string]any { return c.Metadata() }

// errDetail is the innermost message an actors error gives a client: the part before the first ": " that wraps a
// sentinel (ErrNameTaken's callers say which name and which tool hold it).
func errDetail(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i > 0 {
		return msg[:i]
	}
	return msg
}
