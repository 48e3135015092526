package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/persistence"
)

// Tool curation routes (issue 16): per-server tool filter and pinning settings, per-tool overrides, the pending
// definition changes with their approval, and profiles. Every write goes through actors.Curation (which announces
// it to every node) and is audited; all of them, reads included, are admin-only (auth.Policy): they show the
// backend's original text and the token bindings.

func (s *server) routeCuration(g fiber.Router) {
	g.Get("/servers/:id/tool-filter", s.getToolFilter)
	g.Put("/servers/:id/tool-filter", s.putToolFilter)
	g.Get("/servers/:id/pinning", s.getPinning)
	g.Put("/servers/:id/pinning", s.putPinning)
	g.Get("/servers/:id/tools/overrides", s.listOverrides)
	g.Get("/servers/:id/tools/changes", s.listChanges)
	g.Post("/servers/:id/tools/changes/:tool/approve", s.approveChange)
	g.Post("/servers/:id/tools/changes/:tool/reject", s.rejectChange)
	g.Put("/servers/:id/tools/:tool/override", s.putOverride)
	g.Delete("/servers/:id/tools/:tool/override", s.deleteOverride)
	g.Get("/profiles", s.listProfiles)
	g.Get("/profiles/:name", s.getProfile)
	g.Put("/profiles/:name", s.putProfile)
	g.Delete("/profiles/:name", s.deleteProfile)
	g.Get("/profiles/:name/tools", s.profileTools)
	s.routeAccessPolicy(g)
}

// curationOrUnavailable is the Curation the routes need (a daemon always has one; a test app may not).
func (s *server) curationOrUnavailable() (actors.Curation, error) {
	if s.curation == nil {
		return nil, &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable, Detail: "Tool curation is not available"}
	}
	return s.curation, nil
}

// curationWrite reads what every curation write of a server needs: the Curation, the :id server id and the body.
func (s *server) curationWrite(c *fiber.Ctx) (actors.Curation, string, []byte, error) {
	cur, err := s.curationOrUnavailable()
	if err != nil {
		return nil, "", nil, err
	}
	id, err := serverID(c)
	if err != nil {
		return nil, "", nil, err
	}
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return nil, "", nil, err
	}
	return cur, id, body, nil
}

// setToolPolicy is a curation write of the :id server's tool policy: the body, checked and made a patch by
// patch, is applied through the Curation; the server as it is then is returned.
func (s *server) setToolPolicy(c *fiber.Ctx, patch func(body []byte) (persistence.ToolPolicyPatch, []apierror.FieldError)) (persistence.Server, error) {
	cur, id, body, err := s.curationWrite(c)
	if err != nil {
		return persistence.Server{}, err
	}
	p, ferrs := patch(body)
	if len(ferrs) > 0 {
		return persistence.Server{}, apierror.Validation(ferrs)
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	srv, err := cur.SetToolPolicy(ctx, id, p)
	if err != nil {
		return srv, mapError(err, subject{id: id})
	}
	return srv, nil
}

// toolParam is the :tool path segment, decoded (a tool name may hold characters a path must escape).
func toolParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("tool")
	name, err := url.PathUnescape(raw)
	if err != nil || validate.ToolName(name) != "" {
		return "", apierror.Validation([]apierror.FieldError{{Loc: []any{"path", "tool"}, Msg: "tool must be a tool's original name", Type: apierror.FieldValueError}})
	}
	return name, nil
}

// curationOfTool reads what a curation write of one stored tool needs: the Curation, the :id server and the :tool.
func (s *server) curationOfTool(c *fiber.Ctx) (actors.Curation, persistence.Server, string, error) {
	cur, err := s.curationOrUnavailable()
	if err != nil {
		return nil, persistence.Server{}, "", err
	}
	srv, err := s.serverOf(c)
	if err != nil {
		return nil, srv, "", err
	}
	tool, err := toolParam(c)
	if err != nil {
		return nil, srv, "", err
	}
	return cur, srv, tool, nil
}

type filterView struct {
	ServerID string   `json:"server_id"`
	Mode     string   `json:"mode"`
	Patterns []string `json:"patterns"`
}

func newFilterView(srv persistence.Server) filterView {
	v := filterView{ServerID: srv.ID, Mode: srv.Policy.Filter.Mode, Patterns: srv.Policy.Filter.Patterns}
	if v.Mode == "" {
		v.Mode = validate.FilterNone
	}
	if v.Patterns == nil {
		v.Patterns = []string{}
	}
	return v
}

// GET /servers/{id}/tool-filter
func (s *server) getToolFilter(c *fiber.Ctx) error {
	srv, err := s.serverOf(c)
	if err != nil {
		return err
	}
	return c.JSON(newFilterView(srv))
}

// PUT /servers/{id}/tool-filter: replace the filter ("none" removes it); effective at once.
func (s *server) putToolFilter(c *fiber.Ctx) error {
	srv, err := s.setToolPolicy(c, func(body []byte) (persistence.ToolPolicyPatch, []apierror.FieldError) {
		f, ferrs := validate.ToolFilter(body)
		return persistence.ToolPolicyPatch{Filter: &f}, ferrs
	})
	if err != nil {
		return err
	}
	v := newFilterView(srv)
	s.audit(c, audit.ToolFilterUpdated, srv.ID, srv.Name, map[string]any{"mode": v.Mode, "patterns": v.Patterns})
	return c.JSON(v)
}

type pinningView struct {
	ServerID       string     `json:"server_id"`
	Enabled        bool       `json:"enabled"`
	PinNewTools    string     `json:"pin_new_tools"`
	BaselineAt     *time.Time `json:"baseline_at"`
	PendingChanges int        `json:"pending_changes"`
}

func (s *server) pinningOf(c *fiber.Ctx, srv persistence.Server) (pinningView, error) {
	v := pinningView{ServerID: srv.ID, Enabled: srv.Policy.Pinning, PinNewTools: srv.Policy.PinNewTools, BaselineAt: srv.Policy.PinsBaselineAt}
	if v.PinNewTools == "" {
		v.PinNewTools = persistence.PinNewWithhold
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	set, err := s.store.ListToolPins(ctx, srv.ID)
	if err != nil {
		return v, mapError(fmt.Errorf("list pins of %s: %w", srv.ID, err), subject{id: srv.ID})
	}
	for _, p := range set.Pins {
		if p.PendingHash != "" {
			v.PendingChanges++
		}
	}
	return v, nil
}

// GET /servers/{id}/pinning
func (s *server) getPinning(c *fiber.Ctx) error {
	srv, err := s.serverOf(c)
	if err != nil {
		return err
	}
	v, err := s.pinningOf(c, srv)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

// PUT /servers/{id}/pinning: turn pinning on (the stored tools become the approved baseline) or off, and choose
// what happens to new tools.
func (s *server) putPinning(c *fiber.Ctx) error {
	srv, err := s.setToolPolicy(c, validate.Pinning)
	if err != nil {
		return err
	}
	v, err := s.pinningOf(c, srv)
	if err != nil {
		return err
	}
	s.audit(c, audit.PinningUpdated, srv.ID, srv.Name, map[string]any{"enabled": v.Enabled, "pin_new_tools": v.PinNewTools})
	return c.JSON(v)
}

type overrideView struct {
	ServerID    string                       `json:"server_id"`
	Tool        string                       `json:"tool"`
	ExposedName *string                      `json:"exposed_name"`
	Description *string                      `json:"description"`
	Annotations *persistence.ToolAnnotations `json:"annotations"`
	UpdatedAt   time.Time                    `json:"updated_at"`
}

func newOverrideView(o persistence.ToolOverride) overrideView {
	return overrideView{ServerID: o.ServerID, Tool: o.OriginalName, ExposedName: o.ExposedName, Description: o.Description,
		Annotations: o.Annotations, UpdatedAt: o.UpdatedAt}
}

// GET /servers/{id}/tools/overrides
func (s *server) listOverrides(c *fiber.Ctx) error {
	srv, err := s.serverOf(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	list, err := s.store.ListToolOverrides(ctx, srv.ID)
	if err != nil {
		return mapError(fmt.Errorf("list overrides of %s: %w", srv.ID, err), subject{id: srv.ID})
	}
	out := make([]overrideView, len(list))
	for i, o := range list {
		out[i] = newOverrideView(o)
	}
	return c.JSON(overrideListView{ServerID: srv.ID, Overrides: out})
}

// PUT /servers/{id}/tools/{tool}/override: create or replace a tool's override (the tool need not be listed yet:
// an override may be prepared for a tool a backend is about to offer). 409 TOOL_NAME_TAKEN on a clash.
func (s *server) putOverride(c *fiber.Ctx) error {
	cur, id, body, err := s.curationWrite(c)
	if err != nil {
		return err
	}
	tool, err := toolParam(c)
	if err != nil {
		return err
	}
	o, ferrs := validate.Override(body)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	o.ServerID, o.OriginalName = id, tool
	ctx, cancel := s.opContext(c)
	defer cancel()
	out, err := cur.PutToolOverride(ctx, o)
	if err != nil {
		return mapError(err, subject{id: id})
	}
	v := newOverrideView(out)
	s.audit(c, audit.ToolOverrideSet, id, s.serverName(ctx, id), map[string]any{"tool": tool, "exposed_name": v.ExposedName,
		"description_set": v.Description != nil, "annotations": v.Annotations})
	return c.JSON(v)
}

// DELETE /servers/{id}/tools/{tool}/override: 204; 404 NOT_FOUND when the tool has none.
func (s *server) deleteOverride(c *fiber.Ctx) error {
	cur, srv, tool, err := s.curationOfTool(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if err := cur.DeleteToolOverride(ctx, srv.ID, tool); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeNotFound, Detail: "The tool has no override"}
		}
		return mapError(err, subject{id: srv.ID})
	}
	s.audit(c, audit.ToolOverrideRemoved, srv.ID, srv.Name, map[string]any{"tool": tool})
	return c.SendStatus(fiber.StatusNoContent)
}

type changeView struct {
	Tool               string               `json:"tool"`
	Kind               string               `json:"kind"`
	ApprovedHash       string               `json:"approved_hash,omitempty"`
	PendingHash        string               `json:"pending_hash"`
	PendingSince       *time.Time           `json:"pending_since"`
	Diff               []curation.DiffEntry `json:"diff"`
	ApprovedDefinition json.RawMessage      `json:"approved_definition,omitempty"`
	PendingDefinition  json.RawMessage      `json:"pending_definition"`
}

// GET /servers/{id}/tools/changes: the changes held for approval, each with a diff from the approved definition
// (a new tool's diff adds everything).
func (s *server) listChanges(c *fiber.Ctx) error {
	srv, err := s.serverOf(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	set, err := s.store.ListToolPins(ctx, srv.ID)
	if err != nil {
		return mapError(fmt.Errorf("list pins of %s: %w", srv.ID, err), subject{id: srv.ID})
	}
	out := []changeView{}
	for _, p := range set.Pins {
		if p.PendingHash == "" {
			continue
		}
		v := changeView{Tool: p.OriginalName, Kind: curation.ChangeChanged, ApprovedHash: p.ApprovedHash, PendingHash: p.PendingHash,
			PendingSince: p.PendingSince, ApprovedDefinition: p.ApprovedDef, PendingDefinition: p.PendingDef}
		if p.ApprovedHash == "" {
			v.Kind = curation.ChangeNew
		}
		if d, err := curation.Diff(p.ApprovedDef, p.PendingDef); err == nil {
			v.Diff = d
		}
		if v.Diff == nil {
			v.Diff = []curation.DiffEntry{}
		}
		out = append(out, v)
	}
	return c.JSON(changeListView{ServerID: srv.ID, Pinning: srv.Policy.Pinning, Changes: out})
}

func (s *server) approveChange(c *fiber.Ctx) error { return s.resolveChange(c, true) }
func (s *server) rejectChange(c *fiber.Ctx) error  { return s.resolveChange(c, false) }

// resolveChange approves or rejects a held change; the optional body {"hash"} names the change the admin saw
// (409 CHANGE_OUTDATED when the backend changed the tool again since).
func (s *server) resolveChange(c *fiber.Ctx, approve bool) error {
	cur, srv, tool, err := s.curationOfTool(c)
	if err != nil {
		return err
	}
	hash, err := checkedBody(c, s.cfg.MaxBodyBytes, validate.Decision)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	pin, err := cur.ResolveToolChange(ctx, srv.ID, tool, approve, hash)
	if err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeNotFound, Detail: "The tool has no pending change"}
		}
		return mapError(err, subject{id: srv.ID})
	}
	event, decision := audit.ToolChangeRejected, "rejected"
	if approve {
		event, decision = audit.ToolChangeApproved, "approved"
	}
	s.audit(c, event, srv.ID, srv.Name, map[string]any{"tool": tool, "approved_hash": pin.ApprovedHash, "rejected_hash": pin.RejectedHash})
	return c.JSON(decisionView{ServerID: srv.ID, Tool: tool, Decision: decision, ApprovedHash: pin.ApprovedHash, ApprovedAt: pin.ApprovedAt})
}

type profileView struct {
	Name        string                        `json:"name"`
	Description *string                       `json:"description"`
	Selectors   []persistence.ProfileSelector `json:"selectors"`
	Clients     []string                      `json:"clients"`
	Bindings    []persistence.ProfileBinding  `json:"bindings"`
	TokenBudget *int                          `json:"token_budget"`
	ToolCount   int                           `json:"tool_count"`
	Endpoint    string                        `json:"mcp_endpoint"`
	CreatedAt   time.Time                     `json:"created_at"`
	UpdatedAt   time.Time                     `json:"updated_at"`
}

func (s *server) newProfileView(p persistence.Profile) profileView {
	v := profileView{Name: p.Name, Description: p.Description, Selectors: p.Selectors, Clients: p.Clients,
		Bindings: p.Bindings, TokenBudget: p.TokenBudget, Endpoint: "/mcp/profiles/" + p.Name, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if pv, ok := s.control.Routes().Profile(p.Name); ok {
		v.ToolCount = pv.Count()
	}
	if v.Selectors == nil {
		v.Selectors = []persistence.ProfileSelector{}
	}
	if v.Clients == nil {
		v.Clients = []string{}
	}
	if v.Bindings == nil {
		v.Bindings = []persistence.ProfileBinding{}
	}
	return v
}

func profileParam(c *fiber.Ctx) (string, error) {
	name := c.Params("name")
	if validate.ProfileName(name) != "" {
		return "", &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeProfileNotFound, Detail: "Profile not found"}
	}
	return name, nil
}

func profileNotFound(err error) error {
	if errors.Is(err, persistence.ErrNotFound) {
		return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeProfileNotFound, Detail: "Profile not found"}
	}
	return mapError(err, subject{})
}

// GET /profiles
func (s *server) listProfiles(c *fiber.Ctx) error {
	ctx, cancel := s.opContext(c)
	defer cancel()
	list, err := s.store.ListProfiles(ctx)
	if err != nil {
		return mapError(fmt.Errorf("list profiles: %w", err), subject{})
	}
	out := make([]profileView, len(list))
	for i, p := range list {
		out[i] = s.newProfileView(p)
	}
	return c.JSON(profileListView{Profiles: out, Total: len(out)})
}

// GET /profiles/{name}
func (s *server) getProfile(c *fiber.Ctx) error {
	name, err := profileParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	p, err := s.store.GetProfile(ctx, name)
	if err != nil {
		return profileNotFound(err)
	}
	return c.JSON(s.newProfileView(p))
}

// PUT /profiles/{name}: create (201) or replace (200). A selector may name a server that does not exist yet.
func (s *server) putProfile(c *fiber.Ctx) error {
	cur, err := s.curationOrUnavailable()
	if err != nil {
		return err
	}
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	p, ferrs := validate.Profile(c.Params("name"), body)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	out, created, err := cur.PutProfile(ctx, p)
	if err != nil {
		return mapError(err, subject{})
	}
	event, status := audit.ProfileUpdated, fiber.StatusOK
	if created {
		event, status = audit.ProfileCreated, fiber.StatusCreated
	}
	s.audit(c, event, "", "", map[string]any{"profile": out.Name, "selectors": out.Selectors, "clients": out.Clients, "bindings": out.Bindings, "token_budget": out.TokenBudget})
	return c.Status(status).JSON(s.newProfileView(out))
}

// DELETE /profiles/{name}: 204; 409 PROFILE_IN_USE while client tokens are bound to it.
func (s *server) deleteProfile(c *fiber.Ctx) error {
	cur, err := s.curationOrUnavailable()
	if err != nil {
		return err
	}
	name, err := profileParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if err := cur.DeleteProfile(ctx, name); err != nil {
		return profileNotFound(err)
	}
	s.audit(c, audit.ProfileDeleted, "", "", map[string]any{"profile": name})
	return c.SendStatus(fiber.StatusNoContent)
}

type profileToolView struct {
	Name        string `json:"name"`
	Alias       string `json:"alias"`
	Server      string `json:"server"`
	ServerID    string `json:"server_id"`
	Description string `json:"description"`
	Callable    bool   `json:"callable"`
}

// GET /profiles/{name}/tools: the tools the profile holds now (from the routing table).
func (s *server) profileTools(c *fiber.Ctx) error {
	name, err := profileParam(c)
	if err != nil {
		return err
	}
	rt := s.control.Routes()
	if _, ok := rt.Profile(name); !ok {
		return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeProfileNotFound, Detail: "Profile not found"}
	}
	out := []profileToolView{}
	for _, e := range rt.ToolsIn(routing.Scope{name}) {
		srv, _ := rt.Server(e.SourceServerID)
		out = append(out, profileToolView{Name: e.Name, Alias: e.Alias, Server: srv.Name, ServerID: srv.ID,
			Description: e.Description, Callable: srv.Status == persistence.StatusConnected || srv.Status == persistence.StatusDegraded})
	}
	return c.JSON(profileToolsView{Profile: name, Tools: out, Total: len(out)})
}

// scopeOf is what the caller may see: the profile it asked for and, for a client token bound to profiles, no
// more than those (admins and unbound tokens are unrestricted).
func (s *server) scopeOf(c *fiber.Ctx, profile string) (routing.Scope, error) {
	sc, err := s.control.Routes().ScopeFor(profile, s.bound(c))
	if err != nil {
		return nil, mapError(err, subject{})
	}
	return sc, nil
}

// bound is what the caller may see at all: the profiles its client token is bound to (gateway.Bound).
func (s *server) bound(c *fiber.Ctx) routing.Scope {
	return gateway.Bound(s.control.Routes(), identityOf(c))
}

// Answer shapes of the curation routes (named types, so that the OpenAPI document describes them).
type (
	overrideListView struct {
		ServerID  string         `json:"server_id"`
		Overrides []overrideView `json:"overrides"`
	}
	changeListView struct {
		ServerID string       `json:"server_id"`
		Pinning  bool         `json:"pinning"`
		Changes  []changeView `json:"changes"`
	}
	decisionView struct {
		ServerID     string     `json:"server_id"`
		Tool         string     `json:"tool"`
		Decision     string     `json:"decision"`
		ApprovedHash string     `json:"approved_hash"`
		ApprovedAt   *time.Time `json:"approved_at"`
	}
	profileListView struct {
		Profiles []profileView `json:"profiles"`
		Total    int           `json:"total"`
	}
	profileToolsView struct {
		Profile string            `json:"profile"`
		Tools   []profileToolView `json:"tools"`
		Total   int               `json:"total"`
	}
)
