package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
)

// caller is who made an MCP tool call. One go-sdk server serves every session, so scopes are checked per call from
// what the HTTP layer (auth.Middleware) attached:
//
//   - streamable HTTP (/mcp): the go-sdk copies the auth.TokenInfo of each HTTP POST into req.Extra.TokenInfo, the
//     identity of that very request;
//   - SSE (/sse) and anything else served over HTTP: the handler's ctx keeps the values of the HTTP request that
//     opened the session (the go-sdk detaches only its cancellation), so auth.FromContext finds the identity that
//     opened it.
//
// With neither (stdio, or an HTTP listener without auth.Middleware) the caller is an anonymous admin, unless
// Options.RequireIdentity says tokens are configured, in which case it is nobody.
func (s *Server) caller(ctx context.Context, req *mcp.CallToolRequest) (auth.Identity, bool) {
	var extra *mcp.RequestExtra
	if req != nil {
		extra = req.Extra
	}
	return s.callerOf(ctx, extra)
}

// callerOf is caller for any request, from its extra (nil over stdio).
func (s *Server) callerOf(ctx context.Context, extra *mcp.RequestExtra) (auth.Identity, bool) {
	if extra != nil {
		if id, ok := auth.FromTokenInfo(extra.TokenInfo); ok {
			return id, true
		}
	}
	if id, ok := auth.FromContext(ctx); ok {
		return id, true
	}
	if s.requireIdentity {
		return auth.Identity{}, false
	}
	return auth.Anonymous(""), true
}

// admit returns the caller when it has the scope, else the tool error UNAUTHORIZED or FORBIDDEN to answer.
func (s *Server) admit(ctx context.Context, req *mcp.CallToolRequest, need auth.Scope) (auth.Identity, *mcp.CallToolResult) {
	id, ok := s.caller(ctx, req)
	if !ok {
		return id, failure(apierror.CodeUnauthorized, "A valid bearer token is required")
	}
	if !id.Allows(need) {
		return id, failure(apierror.CodeForbidden, "This tool needs a token with the "+need.String()+" scope")
	}
	return id, nil
}

// admitCall admits a tool call (client scope) and takes a token from the caller's rate limit bucket, answering the
// tool error RATE_LIMITED (with retry_after_seconds) when it is empty.
func (s *Server) admitCall(ctx context.Context, req *mcp.CallToolRequest) (auth.Identity, *mcp.CallToolResult) {
	id, denied := s.admit(ctx, req, auth.ScopeClient)
	if denied != nil {
		return id, denied
	}
	if e := apierror.RateLimit(s.limiter, id); e != nil {
		return id, e.CallToolResult()
	}
	return id, nil
}

// actorName is the audit actor of an identity: the token's name, the OAuth subject (with its email), or anonymous.
func actorName(id auth.Identity) string { return id.Actor() }

// audit records an admin operation made through a meta-tool.
func (s *Server) audit(ctx context.Context, id auth.Identity, event, serverID, serverName string, details map[string]any) {
	audit.Record(ctx, s.store, s.log, audit.Entry{Event: event, Actor: actorName(id), IP: id.IP, Via: "mcp",
		ServerID: serverID, ServerName: serverName, Details: details})
}
