// Package gateway is the aggregator's use-case layer: what a client can ask of it (call a tool, register a server,
// search the catalogue), each written once, in order, under every front end. REST (http/api, on Fiber), the MCP
// endpoint's tools (http/mcpserver) and its meta-tools decode a request, hand it to a Gateway and encode what it
// answers; the steps between (the caller's scope, resolving the name, the policy check, the call on the server's
// actor, the routing metadata and time) are here and nowhere else.
//
// It sits at the top level, beside actors/ and persistence/, because it is the layer between them and the front
// ends, not a detail of either: it imports neither Fiber nor protoactor (a test checks it), and reaches the actor
// system only through the small Actors interface (actors.System implements it). Its vocabulary (RegisterRequest,
// SearchRequest, the actor system's sentinel errors) is declared here so that a front end, and package apierror
// that maps every failure to the contract's answer, can name it without importing the actors.
//
// Errors: a Gateway returns the actor system's and the store's errors wrapped, a *RouteError when a tool name does
// not resolve and a *CallError when a resolved call failed; apierror.FromError maps each to its status, code and
// body, the same on every front end.
package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Actors is what the use cases ask of the actor system. Every method that asks an actor does so with a deadline
// and returns ErrAskTimeout rather than hang. actors.System implements it.
type Actors interface {
	// Routes is the current routing table: a lock-free snapshot.
	Routes() *routing.RouteTable
	// Call runs a tool on the server the route names and answers the result as the server's actor encoded it
	// (CallToolReply.ResultJson); errors of the call itself come back in the reply's ErrorInfo. progress, when
	// set, receives the backend's progress notifications while the call runs.
	Call(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*pb.CallToolReply, error)
	// Register persists a new server and, when AutoConnect is set, starts connecting it.
	Register(ctx context.Context, r RegisterRequest) (persistence.Server, error)
	// RegisterKeyed is Register under an idempotency key: a retry the store already holds answers that server
	// with replayed true and changes nothing.
	RegisterKeyed(ctx context.Context, r RegisterRequest, k persistence.IdempotencyKey) (srv persistence.Server, replayed bool, err error)
	// Search ranks the tools of the callable servers for a query.
	Search(ctx context.Context, r SearchRequest) (SearchResponse, error)
}

// ObjectCaller is what Actors implement when they can answer a call with the go-sdk result object itself: on the
// node that runs the server's actor it skips the JSON round trip (the MCP endpoint hands the object to its own
// session). actors.System implements it; without it, a call that asks for the object decodes the actor's JSON.
type ObjectCaller interface {
	CallResult(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*mcp.CallToolResult, *pb.CallToolReply, error)
}

// Policy decides who may call what: the access policy (Rules applies the stored CEL rules). It is asked once per
// call, after the tool's name resolved (so it sees the route: which server, which tool) and before the server's
// actor is asked; a non-nil answer refuses the call, which then runs nowhere. Return an error wrapping ErrDenied
// for a refusal (apierror answers 403 FORBIDDEN, naming a *DeniedError's rule); anything else is the front end's
// to map. Authentication (the bearer token, the token's scope) and rate limiting stay where they are, at the front
// end's door.
//
// A Gateway without a Policy (Options.Policy nil) allows every call its front end admitted.
type Policy interface {
	AllowCall(ctx context.Context, c PolicyCall) error
}

// PolicyCall is what a Policy decides on: who calls, the routing table the name resolved in, the route, and the
// call's arguments (a JSON object, as the client sent them; may be empty).
type PolicyCall struct {
	Caller    auth.Identity
	Table     *routing.RouteTable
	Route     routing.Route
	Arguments []byte
}

// Options configure a Gateway.
type Options struct {
	// Policy is asked before every call (nil: every admitted call is allowed).
	Policy Policy
	// Metrics records the aggregator's share of each call's time (nil: nothing).
	Metrics *metrics.Metrics
	// ExchangeCredential, when set, is tried when a caller who came with an OAuth access token of the
	// organisation's issuer has no credential of their own for a per_user server that takes OAuth: it exchanges
	// that token for the caller's backend grant (RFC 8693; internal/backendauth) and stores it, and the call runs
	// again once. An error (the server does not exchange, the authorization server refuses) leaves the call's
	// CREDENTIAL_REQUIRED as it was.
	ExchangeCredential func(ctx context.Context, serverID, subject, accessToken string) error
}

// Gateway runs the use cases over the actor system. It holds no state of its own beyond its dependencies: one
// Gateway serves every front end and every request at once.
type Gateway struct {
	actors   Actors
	objects  ObjectCaller // actors, when it is one; else nil
	policy   Policy
	metrics  *metrics.Metrics
	exchange func(ctx context.Context, serverID, subject, accessToken string) error
}

// New is a Gateway over a.
func New(a Actors, opts Options) *Gateway {
	g := &Gateway{actors: a, policy: opts.Policy, metrics: opts.Metrics, exchange: opts.ExchangeCredential}
	g.objects, _ = a.(ObjectCaller)
	return g
}

// Routes is the current routing table (what the front ends list and describe).
func (g *Gateway) Routes() *routing.RouteTable { return g.actors.Routes() }

// Bound is the scope a caller is restricted to by its token: the profiles a client token is bound to (by its
// name, or for an OAuth access token by its subject and claims); nil for an admin, an unbound caller and anyone
// while auth is off (they see every tool). Front ends that serve every caller alike (REST) pass it as the Within
// of their requests; an MCP endpoint made for one binding passes its own scope.
func Bound(rt *routing.RouteTable, id auth.Identity) routing.Scope {
	if id.Anonymous || id.Scope >= auth.ScopeAdmin {
		return nil
	}
	return rt.BoundProfilesOf(CallerOf(id))
}

// CallerOf is the identity as profile bindings see it.
func CallerOf(id auth.Identity) routing.Caller {
	return routing.Caller{Name: id.Name, OAuth: id.OAuth, Claims: id.Claims}
}

// scope is what a request may see: the profile it asked for within what its caller may see (ScopeFor), or that
// whole scope when it asked none (without the copy ScopeFor makes: the scope is only read).
func scope(rt *routing.RouteTable, profile string, within routing.Scope) (routing.Scope, error) {
	if profile == "" {
		return within, nil
	}
	return rt.ScopeFor(profile, within)
}
