package mcpproxy

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
)

// The access policy (issue 27) on /mcp/servers/{name}: this endpoint calls the backend itself (not through
// gateway.Call), so it asks the same rules here: a denied call gets the tool error /mcp answers, and a tool no
// call of which the caller may make is left out of the session's mirrored tools.

// rules is the access policy's hook over the actor system.
func (s *session) rules() *gateway.Rules {
	return &gateway.Rules{Source: s.h.sys, Logger: s.log}
}

// policyActive reports whether some rule or a default deny is in force.
func (s *session) policyActive() bool { return !s.h.sys.AccessPolicy().Empty() }

// denied is the tool error of a call the access policy refuses, or nil.
func (s *session) denied(ctx context.Context, t *routing.RouteTable, r *mcp.CallToolRequest) *mcp.CallToolResult {
	if !s.policyActive() || t == nil {
		return nil
	}
	e, _ := t.ToolIn(nil, s.srv.ID, r.Params.Name)
	if e == nil {
		return nil // not in the routing table (yet): nothing to decide on; curation answers unknown tools
	}
	route := routing.Route{ServerID: s.srv.ID, ServerName: s.srv.Name, ServerStatus: s.srv.Status, Tool: e.OriginalName, Name: e.Name}
	err := s.rules().AllowCall(ctx, gateway.PolicyCall{Caller: s.caller, Table: t, Route: route, Arguments: r.Params.Arguments})
	if err == nil {
		return nil
	}
	if ae := apierror.FromError(err, apierror.Subject{ID: s.srv.ID, Name: s.srv.Name}); ae != nil {
		return ae.CallToolResult()
	}
	return apierror.Internal().CallToolResult()
}

// listedTools leaves out of tools those the access policy hides from the session's caller.
func (s *session) listedTools(t *routing.RouteTable, tools []*mcp.Tool) []*mcp.Tool {
	if t == nil || !s.policyActive() {
		return tools
	}
	rules := s.rules()
	out := make([]*mcp.Tool, 0, len(tools))
	for _, tl := range tools {
		if e, _ := t.ToolIn(nil, s.srv.ID, tl.Name); e != nil && !rules.Listed(s.life, s.caller, t, e) {
			continue
		}
		out = append(out, tl)
	}
	return out
}
