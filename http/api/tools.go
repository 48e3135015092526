package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
)

// POST /api/v1/tools/call (BR-005, AG-US4): resolve from the in-memory routing table (no database on this path),
// run on the server's actor, return the backend's result unchanged plus routing metadata.
func (s *server) callTool(c *fiber.Ctx) error {
	start := time.Now()
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	req, ferrs := validate.Call(body, validate.RESTCall)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	scope, err := s.scopeOf(c, req.Profile)
	if err != nil {
		return err
	}
	route, err := s.control.Routes().ResolveIn(scope, req.Name, req.ServerID)
	if err != nil {
		return routeError(err, req)
	}
	call := apierror.Call{Route: route, Asked: req.Name, Start: start, Routed: time.Now()}
	// The server's actor decides whether the call runs, whatever status the routing table shows: right after the
	// server was activated (a restart, a failover, a hand-over between cluster nodes) the table may still show an
	// earlier owner's status while the actor keeps the call until its connection is up; otherwise it answers
	// SERVER_UNAVAILABLE with the live status. The call is bounded by the actors' request timeout, not by the admin ask deadline.
	reply, err := s.control.Call(c.UserContext(), route, req.Arguments, nil)
	if err != nil {
		return mapError(fmt.Errorf("call %s: %w", route.Name, err), subject{id: route.ServerID, name: route.ServerName})
	}
	call.Done = time.Now()
	s.metrics.Routing(call.Done.Sub(start) - time.Duration(reply.ExecutionMs*float64(time.Millisecond)))
	if reply.Error != nil {
		return apierror.CallError(call, reply.Error)
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(reply.ResultJson, &result); err != nil {
		return fmt.Errorf("decode result of %s: %w", route.Name, err)
	}
	if _, ok := result["isError"]; !ok {
		result["isError"] = json.RawMessage("false")
	}
	result["metadata"], _ = json.Marshal(apierror.Metadata(call))
	return c.JSON(result)
}

// routeError maps a failed resolution: unknown server id 404, unknown tool 404, ambiguous original name 400.
func routeError(err error, req validate.CallRequest) error {
	if e := apierror.RouteError(err, apierror.Resolution{Name: req.Name, ServerID: req.ServerID}); e != nil {
		return e
	}
	return err
}

// POST /servers/{id}/tools/refresh: start a discovery of a connected server; 202 at once.
func (s *server) refreshTools(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if err := s.control.RefreshTools(ctx, id); err != nil {
		return mapError(fmt.Errorf("refresh tools of %s: %w", id, err), subject{id: id})
	}
	s.audit(c, audit.ToolsRefreshed, id, s.serverName(ctx, id), nil)
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"server_id": id, "status": "REFRESHING", "message": "Tool discovery initiated"})
}
