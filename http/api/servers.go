package api

import (
	"context"
	"fmt"
	"mime"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Paging bounds of the list endpoints.
const (
	defaultLimit        = 100
	maxLimit            = 1000
	defaultHistoryLimit = 50
)

// knownStatus reports whether s is a server status, the values the status filter accepts (validate.Statuses, the
// enum of list_mcp_servers' filter too).
func knownStatus(s string) bool { return slices.Contains(validate.Statuses, s) }

// serverID reads the :id parameter. Only a canonical UUID (8-4-4-4-12 hex, any case) is accepted; anything else is
// a server that cannot exist, answered 404 without asking anyone. The id is returned in lowercase canonical form.
func serverID(c *fiber.Ctx) (string, error) {
	raw := c.Params("id")
	if len(raw) != 36 {
		return "", apierror.ServerNotFound(raw)
	}
	u, err := uuid.Parse(raw)
	if err != nil {
		return "", apierror.ServerNotFound(raw)
	}
	return u.String(), nil
}

// serverOf reads the :id server.
func (s *server) serverOf(c *fiber.Ctx) (persistence.Server, error) {
	id, err := serverID(c)
	if err != nil {
		return persistence.Server{}, err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	return s.storedServer(ctx, c, id)
}

// storedServer reads server id (the :id of c, canonical) from the store.
func (s *server) storedServer(ctx context.Context, c *fiber.Ctx, id string) (persistence.Server, error) {
	srv, err := s.store.GetServer(ctx, id)
	if err != nil {
		return srv, serverFailed(c, "get server", id, err)
	}
	return srv, nil
}

// serverFailed maps err, the failure of op (e.g. "connect server", "list tools of") on server id, the :id of c: a
// missing server is answered with the :id as the caller sent it.
func serverFailed(c *fiber.Ctx, op, id string, err error) error {
	return mapError(fmt.Errorf("%s %s: %w", op, id, err), subject{id: c.Params("id")})
}

// jsonBody returns a copy of the request body (the ctx reuses its buffer after the handler returns). A body sent
// with a Content-Type other than JSON is refused with 415: it also keeps browsers from posting a registration
// cross-site as a "simple" text/plain or form request, which needs no CORS preflight.
func jsonBody(c *fiber.Ctx, maxBytes int) ([]byte, error) {
	body := c.Body()
	if len(body) > maxBytes {
		return nil, fiber.ErrRequestEntityTooLarge
	}
	if len(body) > 0 {
		if ct := c.Get(fiber.HeaderContentType); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || (mt != fiber.MIMEApplicationJSON && !strings.HasSuffix(mt, "+json")) {
				return nil, fiber.ErrUnsupportedMediaType
			}
		}
	}
	return append([]byte(nil), body...), nil
}

// checkedBody is the request body (jsonBody) as check reads it; check's field errors are a 422.
func checkedBody[T any](c *fiber.Ctx, maxBytes int, check func(body []byte) (T, []apierror.FieldError)) (T, error) {
	var zero T
	body, err := jsonBody(c, maxBytes)
	if err != nil {
		return zero, err
	}
	v, ferrs := check(body)
	if len(ferrs) > 0 {
		return zero, apierror.Validation(ferrs)
	}
	return v, nil
}

// queryInt reads an integer query parameter within [lo, hi]; absent means def. Errors go to v.
func queryInt(c *fiber.Ctx, v *strictjson.Checker, name string, def, lo, hi int) int {
	args := c.Context().QueryArgs()
	if !args.Has(name) {
		return def
	}
	loc := []any{"query", name}
	n, err := strconv.Atoi(string(args.Peek(name)))
	switch {
	case err != nil:
		v.Add(apierror.FieldTypeError, "Input should be a valid integer", loc)
	case n < lo:
		v.Add(apierror.FieldValueError, fmt.Sprintf("Input should be greater than or equal to %d", lo), loc)
	case n > hi:
		v.Add(apierror.FieldValueError, fmt.Sprintf("Input should be less than or equal to %d", hi), loc)
	default:
		return n
	}
	return def
}

// pageQuery reads the limit and offset of a page of a list endpoint; a bad one is a 422.
func pageQuery(c *fiber.Ctx) (limit, offset int, err error) {
	v := strictjson.New("body")
	limit = queryInt(c, v, "limit", defaultLimit, 1, maxLimit)
	offset = queryInt(c, v, "offset", 0, 0, maxOffset)
	if v.Count() > 0 {
		return limit, offset, apierror.Validation(v.Errors())
	}
	return limit, offset, nil
}

// queryBool reads a boolean query parameter (true/false/1/0, any case); absent means false.
func queryBool(c *fiber.Ctx, v *strictjson.Checker, name string) bool {
	args := c.Context().QueryArgs()
	if !args.Has(name) {
		return false
	}
	b, err := strconv.ParseBool(strings.ToLower(string(args.Peek(name))))
	if err != nil {
		v.Add(apierror.FieldTypeError, "Input should be a valid boolean", []any{"query", name})
	}
	return b
}

// POST /servers: validate (BR-001), then register through the actors. 201 with the full server. With an
// Idempotency-Key header the registration is retryable: a retry with the same key and body answers 201 with the
// server the key registered (as it is now) and Idempotent-Replayed: true; the same key with another body is 422
// IDEMPOTENCY_KEY_REUSED.
func (s *server) createServer(c *fiber.Ctx) error {
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	key, keyed, err := idempotencyKey(c)
	if err != nil {
		return err
	}
	req, ferrs := validate.Registration(body, validate.Outbound(s.control))
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	if keyed {
		if key.Fingerprint, err = requestFingerprint(body); err != nil {
			return err
		}
	}
	req.Actor = actorOf(c)
	req.IP = c.IP()

	ctx, cancel := s.opContext(c)
	defer cancel()
	var k *persistence.IdempotencyKey
	if keyed {
		k = &key
	}
	srv, replayed, err := s.gw.Register(ctx, req, k)
	if err != nil {
		return mapError(err, subject{name: req.Name})
	}
	if replayed {
		// The first request registered it (and was audited); this one only learns the answer it missed.
		c.Set(headerIdempotentReplayed, "true")
	} else {
		s.audit(c, audit.ServerRegistered, srv.ID, srv.Name, map[string]any{"transport_type": srv.TransportType, "auto_connect": req.AutoConnect})
	}
	c.Location(apiPrefix + "/servers/" + srv.ID)
	return c.Status(fiber.StatusCreated).JSON(view.NewServerDetail(srv))
}

// GET /servers: page of servers, optionally filtered by status and with their tools.
func (s *server) listServers(c *fiber.Ctx) error {
	v := strictjson.New("body")
	status := ""
	if c.Context().QueryArgs().Has("status") {
		status = strings.ToUpper(c.Query("status"))
		if !knownStatus(status) {
			v.Add(apierror.FieldValueError, "Input should be one of "+strings.Join(validate.Statuses, ", "), []any{"query", "status"})
		}
	}
	includeTools := queryBool(c, v, "include_tools")
	limit := queryInt(c, v, "limit", defaultLimit, 1, maxLimit)
	offset := queryInt(c, v, "offset", 0, 0, maxOffset)
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}

	ctx, cancel := s.opContext(c)
	defer cancel()
	servers, total, err := s.store.ListServers(ctx, persistence.ListServersFilter{Status: status, Limit: limit, Offset: offset})
	if err != nil {
		return mapError(fmt.Errorf("list servers: %w", err), subject{})
	}
	out := serverListView{Total: total, Limit: limit, Offset: offset}
	if includeTools {
		ids := make([]string, len(servers))
		for i, srv := range servers {
			ids[i] = srv.ID
		}
		// The tools as stored, from the routing table (the router's one read of each server's rows).
		tools, err := s.control.StoredTools(ctx, ids...)
		if err != nil {
			return mapError(fmt.Errorf("list tools: %w", err), subject{})
		}
		items := make([]serverWithToolsView, 0, len(servers))
		for _, srv := range servers {
			items = append(items, serverWithToolsView{Server: view.NewServer(srv), Tools: view.NewTools(tools[srv.ID])})
		}
		out.Servers = items
	} else {
		items := make([]view.Server, 0, len(servers))
		for _, srv := range servers {
			items = append(items, view.NewServer(srv))
		}
		out.Servers = items
	}
	return c.JSON(out)
}

// maxOffset keeps offsets in a range every store handles (and far beyond any real list).
const maxOffset = 1<<31 - 1

// GET /servers/{id}: the detail view.
func (s *server) getServer(c *fiber.Ctx) error {
	srv, err := s.serverOf(c)
	if err != nil {
		return err
	}
	return c.JSON(view.NewServerDetail(srv))
}

// PATCH /servers/{id}: change name, description, connection config or health URL through the actors. The
// server is read first because its transport decides which connection_config is valid.
func (s *server) patchServer(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	current, err := s.storedServer(ctx, c, id)
	if err != nil {
		return err
	}
	patch, ferrs := validate.PatchServer(body, current, validate.Outbound(s.control))
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	name := current.Name
	if patch.Name != nil {
		name = *patch.Name
	}
	srv, err := s.control.Update(ctx, id, patch)
	if err != nil {
		return mapError(fmt.Errorf("update server %s: %w", id, err), subject{id: c.Params("id"), name: name})
	}
	s.audit(c, audit.ServerUpdated, srv.ID, srv.Name, patchDetails(patch, current.Name))
	return c.JSON(view.NewServerDetail(srv))
}

// DELETE /servers/{id}: disconnect and remove with tools and history. 204.
func (s *server) deleteServer(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	name := s.serverName(ctx, id)
	if err := s.control.Remove(ctx, id); err != nil {
		return serverFailed(c, "remove server", id, err)
	}
	s.audit(c, audit.ServerRemoved, id, name, nil)
	return c.SendStatus(fiber.StatusNoContent)
}

// POST /servers/{id}/connect: idempotent (BR-002); any body is ignored.
func (s *server) connectServer(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	res, err := s.control.Connect(ctx, id)
	if err != nil {
		return serverFailed(c, "connect server", id, err)
	}
	s.audit(c, audit.ServerConnected, id, s.serverName(ctx, id), map[string]any{"status": res.Status, "message": res.Message})
	return c.JSON(res)
}

// POST /servers/{id}/disconnect: optional {"force": bool} body (BR-007); empty means force=false.
func (s *server) disconnectServer(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	force, err := checkedBody(c, s.cfg.MaxBodyBytes, validate.Disconnect)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	res, err := s.control.Disconnect(ctx, id, force)
	if err != nil {
		return serverFailed(c, "disconnect server", id, err)
	}
	s.audit(c, audit.ServerDisconnected, id, s.serverName(ctx, id),
		map[string]any{"force": force, "status": res.Status, "pending_requests": res.PendingRequests})
	return c.JSON(res)
}

// GET /servers/{id}/tools: page of the server's tools with classification totals.
func (s *server) listServerTools(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	limit, offset, err := pageQuery(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if _, err := s.storedServer(ctx, c, id); err != nil {
		return err
	}
	if served, restricted, err := s.servedTools(c, id); err != nil {
		return err
	} else if restricted {
		return c.JSON(newToolListView(served, limit, offset))
	}
	// An admin reads the tools as stored, from the routing table (the router's one read of the server's rows).
	stored, err := s.control.StoredTools(ctx, id)
	if err != nil {
		return serverFailed(c, "list tools of", id, err)
	}
	return c.JSON(newToolListView(stored[id], limit, offset))
}

// newToolListView is one page (limit, offset) of tools, with the counts of them all.
func newToolListView(tools []persistence.Tool, limit, offset int) toolListView {
	out := toolListView{Tools: []view.Tool{}, Total: len(tools)}
	for _, t := range tools {
		if t.IsClassified {
			out.Classified++
		}
	}
	out.Unclassified = out.Total - out.Classified
	if offset < len(tools) {
		out.Tools = view.NewTools(tools[offset:min(offset+limit, len(tools))])
	}
	return out
}

// servedTools is what a client token sees of a server's tools: the routing table's rows as clients are served them
// (hidden and withheld tools left out, held ones with their approved definition, overrides applied), within the
// token's profiles, by namespaced name. restricted is false for admins (and every caller while auth is off): they
// see the stored tools as the backend lists them (Control.StoredTools, from the same table). Without this a client token could read, through the tool
// listings, the names a filter hides and the unapproved text that pinning holds back.
func (s *server) servedTools(c *fiber.Ctx, serverID string) (tools []persistence.Tool, restricted bool, err error) {
	if id := identityOf(c); id.Anonymous || id.Allows(auth.ScopeAdmin) {
		return nil, false, nil
	}
	sc, err := s.scopeOf(c, "")
	if err != nil {
		return nil, true, err
	}
	for _, e := range s.control.Routes().ToolsIn(sc) {
		if e.SourceServerID == serverID {
			tools = append(tools, *e.Tool)
		}
	}
	return tools, true, nil
}

// GET /servers/{id}/history: the newest connection events first.
func (s *server) serverHistory(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	v := strictjson.New("body")
	limit := queryInt(c, v, "limit", defaultHistoryLimit, 1, maxLimit)
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if _, err := s.storedServer(ctx, c, id); err != nil {
		return err
	}
	events, err := s.store.ListHistory(ctx, id, limit)
	if err != nil {
		return serverFailed(c, "list history of", id, err)
	}
	out := historyView{ServerID: id, History: make([]historyEventView, 0, len(events)), Limit: limit}
	for _, e := range events {
		out.History = append(out.History, newHistoryEventView(e))
	}
	return c.JSON(out)
}
