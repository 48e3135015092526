package mcpserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/persistence"
)

// toolCurate is the admin meta-tool of tool curation: one tool with an action, so that the catalogue every
// client lists grows by one name, not ten. Each action is the REST route of the same name's twin, with the same
// validation (settings is that route's body) and audit events.
const toolCurate = "manage_tool_curation"

// Actions of manage_tool_curation.
var curateActions = []any{"show", "set_filter", "set_pinning", "set_override", "delete_override", "approve_change",
	"reject_change", "list_profiles", "put_profile", "delete_profile", "show_policy", "put_policy"}

func curateSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Required: []string{"action"}, Properties: map[string]*jsonschema.Schema{
		"action": {Type: "string", Enum: curateActions, Description: "show (a server's filter, pinning, overrides and " +
			"pending changes with diffs), set_filter, set_pinning, set_override, delete_override, approve_change, " +
			"reject_change, list_profiles, put_profile, delete_profile, show_policy, put_policy (the access policy)"},
		"server_id": {Type: "string", Description: "The server's id or name (server actions)"},
		"tool":      {Type: "string", Description: "The tool's original name on its server (override and change actions)"},
		"profile":   {Type: "string", Description: "The profile's name (put_profile, delete_profile)"},
		"settings": {Type: "object", Description: "The REST body of the action: set_filter {mode, patterns}; set_pinning " +
			"{enabled, pin_new_tools}; set_override {exposed_name, description, annotations}; approve/reject_change " +
			"{hash}; put_profile {description, selectors, clients, bindings, token_budget}; put_policy {default, rules: [{name, effect, when}]}"},
	}}
}

func (s *Server) addCurationTool() {
	s.addMetaTool(&mcp.Tool{Name: toolCurate, Description: "Admin: curate the tools clients see (filters, overrides, " +
		"definition pinning approvals, profiles).", InputSchema: curateSchema()}, s.curate)
}

// curate runs one manage_tool_curation action (admin scope).
func (s *Server) curate(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, denied := s.admit(ctx, req, auth.ScopeAdmin)
	if denied != nil {
		return denied, nil
	}
	cur, ok := s.gw.(actors.Curation)
	if !ok {
		return failure(apierror.CodeServiceUnavailable, "Tool curation is not available"), nil
	}
	var in struct {
		Action   string          `json:"action"`
		ServerID string          `json:"server_id"`
		Tool     string          `json:"tool"`
		Profile  string          `json:"profile"`
		Settings json.RawMessage `json:"settings"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Action == "" {
		return failure(apierror.CodeValidation, "action (a string) is required"), nil
	}
	settings := in.Settings
	if len(settings) == 0 || string(settings) == "null" {
		settings = json.RawMessage("{}")
	}
	c, cancel := s.askCtx(ctx)
	defer cancel()
	fail := func(err error) *mcp.CallToolResult {
		if errors.Is(err, persistence.ErrNotFound) && in.Profile != "" {
			return failure(apierror.CodeProfileNotFound, "Profile not found: "+in.Profile)
		}
		return s.failureFor(ctx, err, apierror.Subject{ID: in.ServerID, Name: in.ServerID})
	}
	switch in.Action {
	case "show_policy", "put_policy":
		return s.accessPolicyAction(ctx, c, id, in.Action, settings), nil
	case "list_profiles":
		list, err := s.store.ListProfiles(c)
		if err != nil {
			return fail(err), nil
		}
		return success(map[string]any{"profiles": list}), nil
	case "put_profile":
		p, errs := validate.Profile(in.Profile, settings)
		if len(errs) > 0 {
			return apierror.Validation(errs).CallToolResult(), nil
		}
		out, created, err := cur.PutProfile(c, p)
		if err != nil {
			return fail(err), nil
		}
		event := audit.ProfileUpdated
		if created {
			event = audit.ProfileCreated
		}
		s.audit(ctx, id, event, "", "", map[string]any{"profile": out.Name, "selectors": out.Selectors, "clients": out.Clients, "bindings": out.Bindings, "token_budget": out.TokenBudget})
		return success(map[string]any{"profile": out, "created": created}), nil
	case "delete_profile":
		if err := cur.DeleteProfile(c, in.Profile); err != nil {
			return fail(err), nil
		}
		s.audit(ctx, id, audit.ProfileDeleted, "", "", map[string]any{"profile": in.Profile})
		return success(map[string]any{"profile": in.Profile, "deleted": true}), nil
	}
	if in.ServerID == "" {
		return failure(apierror.CodeValidation, "server_id is required for "+in.Action), nil
	}
	srv, err := s.resolveServer(c, in.ServerID)
	if err != nil {
		return fail(err), nil
	}
	needTool := func() *mcp.CallToolResult {
		if validate.ToolName(in.Tool) != "" {
			return failure(apierror.CodeValidation, "tool (the tool's original name) is required for "+in.Action)
		}
		return nil
	}
	switch in.Action {
	case "show":
		ovs, err := s.store.ListToolOverrides(c, srv.ID)
		if err != nil {
			return fail(err), nil
		}
		set, err := s.store.ListToolPins(c, srv.ID)
		if err != nil {
			return fail(err), nil
		}
		var changes []map[string]any
		for _, p := range set.Pins {
			if p.PendingHash == "" {
				continue
			}
			d, _ := curation.Diff(p.ApprovedDef, p.PendingDef)
			kind := curation.ChangeChanged
			if p.ApprovedHash == "" {
				kind = curation.ChangeNew
			}
			changes = append(changes, map[string]any{"tool": p.OriginalName, "kind": kind, "pending_hash": p.PendingHash, "diff": d})
		}
		return success(map[string]any{"server_id": srv.ID, "filter": srv.Policy.Filter, "pinning": srv.Policy.Pinning,
			"pin_new_tools": srv.Policy.PinNewTools, "overrides": ovs, "pending_changes": changes}), nil
	case "set_filter":
		f, errs := validate.ToolFilter(settings)
		if len(errs) > 0 {
			return apierror.Validation(errs).CallToolResult(), nil
		}
		if _, err := cur.SetToolPolicy(c, srv.ID, persistence.ToolPolicyPatch{Filter: &f}); err != nil {
			return fail(err), nil
		}
		s.audit(ctx, id, audit.ToolFilterUpdated, srv.ID, srv.Name, map[string]any{"mode": f.Mode, "patterns": f.Patterns})
		return success(map[string]any{"server_id": srv.ID, "filter": f}), nil
	case "set_pinning":
		p, errs := validate.Pinning(settings)
		if len(errs) > 0 {
			return apierror.Validation(errs).CallToolResult(), nil
		}
		out, err := cur.SetToolPolicy(c, srv.ID, p)
		if err != nil {
			return fail(err), nil
		}
		s.audit(ctx, id, audit.PinningUpdated, srv.ID, srv.Name, map[string]any{"enabled": out.Policy.Pinning, "pin_new_tools": out.Policy.PinNewTools})
		return success(map[string]any{"server_id": srv.ID, "enabled": out.Policy.Pinning, "pin_new_tools": out.Policy.PinNewTools}), nil
	case "set_override":
		if r := needTool(); r != nil {
			return r, nil
		}
		o, errs := validate.Override(settings)
		if len(errs) > 0 {
			return apierror.Validation(errs).CallToolResult(), nil
		}
		o.ServerID, o.OriginalName = srv.ID, in.Tool
		out, err := cur.PutToolOverride(c, o)
		if err != nil {
			return fail(err), nil
		}
		s.audit(ctx, id, audit.ToolOverrideSet, srv.ID, srv.Name, map[string]any{"tool": in.Tool, "exposed_name": out.ExposedName})
		return success(map[string]any{"override": out}), nil
	case "delete_override":
		if r := needTool(); r != nil {
			return r, nil
		}
		if err := cur.DeleteToolOverride(c, srv.ID, in.Tool); err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				return failure(apierror.CodeNotFound, "The tool has no override"), nil
			}
			return fail(err), nil
		}
		s.audit(ctx, id, audit.ToolOverrideRemoved, srv.ID, srv.Name, map[string]any{"tool": in.Tool})
		return success(map[string]any{"server_id": srv.ID, "tool": in.Tool, "deleted": true}), nil
	case "approve_change", "reject_change":
		if r := needTool(); r != nil {
			return r, nil
		}
		hash, errs := validate.Decision(settings)
		if len(errs) > 0 {
			return apierror.Validation(errs).CallToolResult(), nil
		}
		approve := in.Action == "approve_change"
		pin, err := cur.ResolveToolChange(c, srv.ID, in.Tool, approve, hash)
		if err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				return failure(apierror.CodeNotFound, "The tool has no pending change"), nil
			}
			return fail(err), nil
		}
		event := audit.ToolChangeRejected
		if approve {
			event = audit.ToolChangeApproved
		}
		s.audit(ctx, id, event, srv.ID, srv.Name, map[string]any{"tool": in.Tool, "approved_hash": pin.ApprovedHash, "rejected_hash": pin.RejectedHash})
		return success(map[string]any{"server_id": srv.ID, "tool": in.Tool, "approved_hash": pin.ApprovedHash}), nil
	}
	return failure(apierror.CodeValidation, "unknown action "+in.Action), nil
}
