package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/persistence"
)

// policyList leaves out of a tools/list answer the backend tools the access policy hides from the caller (see
// gateway.Rules.Listed): one go-sdk server serves every session, so the tool set is shared and the answer is
// filtered per request. Meta-tools are always listed (they check the caller's scope themselves);
// search_aggregated_tools' description, which counts and names the catalogue's tools and servers, is made again
// for the caller, from the tools it may see. With no rule, the answer passes as it is.
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
		listed := s.cases.ListFilter(ctx, id, rt)
		if listed == nil {
			return res, err
		}
		// Each tool is decided once: the listing and search_aggregated_tools' description ask for the same ones.
		decided := map[*routing.ToolEntry]bool{}
		keep := func(e *routing.ToolEntry) bool {
			v, ok := decided[e]
			if !ok {
				v = listed(e)
				decided[e] = v
			}
			return v
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
			if t.Name == toolSearch {
				mine := *t // the go-sdk's copy is shared by every session's answer
				mine.Description = searchDescription(rt, s.opts.Scope, s.skills, keep)
				t = &mine
			}
			out = append(out, t)
		}
		r.Tools = out
		return r, nil
	}
}

// accessPolicies is what the access policy actions ask of the actor system (actors.System).
type accessPolicies interface {
	GetAccessPolicy(ctx context.Context) (policy.Document, persistence.AccessPolicy, error)
	PutAccessPolicy(ctx context.Context, doc policy.Document) (policy.Document, persistence.AccessPolicy, error)
}

// accessPolicyAction runs manage_tool_curation's show_policy and put_policy, the twins of GET and PUT
// /api/v1/aggregator/policy (same validation, same audit event). ctx is the call's, c its deadline's.
func (s *Server) accessPolicyAction(ctx, c context.Context, id auth.Identity, action string, settings json.RawMessage) *mcp.CallToolResult {
	ap, ok := s.gw.(accessPolicies)
	if !ok {
		return failure(apierror.CodeServiceUnavailable, "The access policy is not available")
	}
	answer := func(d policy.Document, p persistence.AccessPolicy) *mcp.CallToolResult {
		out := map[string]any{"default": d.Default, "rules": d.Rules, "version": p.Version, "updated_at": nil}
		if p.Version > 0 {
			out["updated_at"] = p.UpdatedAt
		}
		return success(out)
	}
	if action == "show_policy" {
		d, p, err := ap.GetAccessPolicy(c)
		if err != nil {
			return s.failureFor(ctx, err, apierror.Subject{})
		}
		return answer(d, p)
	}
	var doc policy.Document
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return apierror.Validation([]apierror.FieldError{{Loc: []any{"arguments", "settings"}, Type: apierror.FieldJSONInvalid,
			Msg: "settings must be {default, rules: [{name, effect, when, description}]}: " + err.Error()}}).CallToolResult()
	}
	d, p, err := ap.PutAccessPolicy(c, doc)
	var verr *policy.ValidationError
	if errors.As(err, &verr) {
		return apierror.Validation([]apierror.FieldError{{Loc: append([]any{"arguments", "settings"}, verr.Loc...),
			Msg: verr.Msg, Type: apierror.FieldValueError}}).CallToolResult()
	}
	if err != nil {
		return s.failureFor(ctx, err, apierror.Subject{})
	}
	names := make([]string, len(d.Rules))
	for i, r := range d.Rules {
		names[i] = r.Name
	}
	s.audit(ctx, id, audit.AccessPolicyUpdated, "", "", map[string]any{"version": p.Version, "default": d.Default, "rules": names})
	return answer(d, p)
}
