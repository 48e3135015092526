package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/actors/server"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The server actor kind lives in package server; these are the names the front ends use.
const (
	// ProtocolVersion is the MCP version the aggregator speaks to its backends (server.ProtocolVersion).
	ProtocolVersion = server.ProtocolVersion
	// Version is reported to backends in initialize.
	Version = server.Version
	// RequestIDMetaKey is the _meta key under which a call's request id reaches the backend.
	RequestIDMetaKey = server.RequestIDMetaKey
	// ReasonNoSessionAfterStart is the reason of the transition that resets a status a previous process left.
	ReasonNoSessionAfterStart = server.ReasonNoSessionAfterStart
	// DefaultMaxProxySessions caps the proxy sessions of one server when ProxyOptions.MaxSessions is 0.
	DefaultMaxProxySessions = server.DefaultMaxProxySessions
	// Methods of the prompts and resources a front end asks a server for (FeatureRequest).
	MethodReadResource = server.MethodReadResource
	MethodGetPrompt    = server.MethodGetPrompt
	MethodComplete     = server.MethodComplete
	MethodSubscribe    = server.MethodSubscribe
	MethodUnsubscribe  = server.MethodUnsubscribe
)

// Errors of proxy sessions and per-user sessions (package server).
var (
	ErrProxyLimit         = server.ErrProxyLimit
	ErrProxyConnect       = server.ErrProxyConnect
	ErrProxyClosed        = server.ErrProxyClosed
	ErrCredentialRequired = server.ErrCredentialRequired
	// ErrCredentialChanged: a caller's upstream session of the per-server endpoint ended because their credential
	// was revoked or replaced (server.ErrCredentialChanged).
	ErrCredentialChanged = server.ErrCredentialChanged
)

type (
	// CredentialRequiredError is ErrCredentialRequired with where to provide the credential
	// (server.CredentialRequiredError).
	CredentialRequiredError = server.CredentialRequiredError
	// ProxyHandlers receive what the backend sends on a proxy session (server.ProxyHandlers).
	ProxyHandlers = server.ProxyHandlers
	// ProxyOptions describe the downstream client a proxy session stands for (server.ProxyOptions).
	ProxyOptions = server.ProxyOptions
	// ProxySession is one upstream session to a backend, owned by a proxy actor (server.ProxySession).
	ProxySession = server.ProxySession
	// RemoteServerError means the server's actor lives on another cluster node (server.RemoteServerError).
	RemoteServerError = server.RemoteServerError
	// Relay takes the requests and log messages a backend sends during a call to the call's client (server.Relay).
	Relay = server.Relay
)

// WithRelay returns ctx carrying r for the calls made with it (server.WithRelay).
func WithRelay(ctx context.Context, r Relay) context.Context { return server.WithRelay(ctx, r) }

// TitledMultiSelect reports whether an elicitation schema has a titled multi-select property
// (server.TitledMultiSelect).
func TitledMultiSelect(schema any) bool { return server.TitledMultiSelect(schema) }

// OpenProxySession opens a new upstream session to the server named serverName for one downstream client. It
// fails with persistence.ErrNotFound for an unknown name, *UnavailableError when the server is not CONNECTED or
// DEGRADED, *RemoteServerError when another cluster node serves it, ErrProxyLimit at the cap and ErrProxyConnect
// when the backend refuses the session. It waits for the backend's initialize, bounded by the connection timeout
// and ctx.
func (s *System) OpenProxySession(ctx context.Context, serverName string, opts ProxyOptions) (*ProxySession, error) {
	srv, ok := s.Routes().ServerByName(serverName)
	if !ok {
		return nil, fmt.Errorf("server %s: %w", serverName, persistence.ErrNotFound)
	}
	if !callable(srv.Status) {
		return nil, &routing.UnavailableError{Server: srv}
	}
	pid, err := s.resolve(ctx, srv.ID)
	if err != nil {
		return nil, err
	}
	if pid.Address != s.sys.Address() {
		return nil, &RemoteServerError{Server: srv, Node: s.members.IDAt(pid.Address)}
	}
	p, err := server.OpenProxy(ctx, serverNode{s}, pid, srv, opts, s.deps.Config.ConnectionTimeout+s.deps.Config.AskTimeout)
	if errors.Is(err, ErrShuttingDown) {
		// The server actor is gone: removed meanwhile, or the daemon is stopping.
		return nil, fmt.Errorf("server %s: %w", serverName, persistence.ErrNotFound)
	}
	return p, err
}

// serverNode is the System as a proxy session sees it (server.Node).
type serverNode struct{ s *System }

func (n serverNode) ActorSystem() *actor.ActorSystem { return n.s.sys }
func (n serverNode) Ask(ctx context.Context, pid *actor.PID, m any, timeout time.Duration) (any, error) {
	return n.s.askActor(ctx, pid, m, timeout)
}
func (n serverNode) CallDeadline(ctx context.Context) time.Time { return n.s.callDeadline(ctx) }

// EndUserSession closes the subject's own session of a per_user server (after their credential was revoked or
// replaced), wherever the server's actor runs; nothing happens when none runs. It returns once the server's actor
// has told the sessions to end: a request sent after it returns never runs on a session of the old credential
// (the subject's /mcp/servers/{name} sessions then go on, on a new upstream session; mcpproxy).
func (s *System) EndUserSession(ctx context.Context, serverID, subject string) error {
	var pid *actor.PID
	if s.cluster == nil {
		p, ok := s.hostedPID(serverID)
		if !ok {
			return nil
		}
		pid = p
	} else {
		p, err := s.resolve(ctx, serverID)
		if err != nil {
			return fmt.Errorf("end the session of %s on server %s: %w", subject, serverID, err)
		}
		pid = p
	}
	_, err := s.askActor(ctx, pid, &pb.EndUserSession{Subject: subject}, 0)
	if errors.Is(err, ErrShuttingDown) {
		return nil // no server actor: no session
	}
	if err != nil {
		return fmt.Errorf("end the session of %s on server %s: %w", subject, serverID, err)
	}
	return nil
}
