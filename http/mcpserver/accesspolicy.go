package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// policyList leaves out of a tools/list answer the backend tools the access policy hides from the caller (see
// gateway.Rules.Listed): one go-sdk server serves every session, so the tool set is shared and the answer is
// filtered per request. Meta-tools are always listed (they check the caller's scope themselves). With no rule,
// the answer passes as it is.
func (s *Server) policyList(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.ListToolsResult)
		if err != nil || !ok || r == nil || len(r.Tools) == 0 {
			return res, err
		}
		id, ok := s.callerOf(ctx, req.GetExtra())
		if !ok {
			return res, err
		}
		rt := s.gw.Routes()
		keep := s.cases.ListFilter(ctx, id, rt)
		if keep == nil {
			return res, err
		}
		s.mu.Lock()
		names := make(map[string]string, len(r.Tools))
		for _, t := range r.Tools {
			if e, ok := s.exposed[t.Name]; ok {
				names[t.Name] = e.name
			}
		}
		s.mu.Unlock()
		out := make([]*mcp.Tool, 0, len(r.Tools))
		for _, t := range r.Tools {
			name, backend := names[t.Name]
			if backend {
				if e, found := rt.Tool(name); found && !keep(e) {
					continue
				}
			}
			out = append(out, t)
		}
		r.Tools = out
		return r, nil
	}
}
