package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// callRequest is a validated POST /api/v1/tools/call body.
type callRequest struct {
	name      string
	arguments json.RawMessage
	serverID  string
}

// validateCall reads {"name": string, "arguments": object (optional), "server_id": uuid (optional)}.
func validateCall(body []byte) (callRequest, []FieldError) {
	var v validator
	var r callRequest
	members, ok := v.topObject(body)
	if !ok {
		return r, v.errs
	}
	fields := v.index(members, bodyAt())
	for _, m := range members {
		switch m.key {
		case "name", "arguments", "server_id":
		default:
			v.add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.key))
		}
	}
	if raw, ok := fields["name"]; !ok || kindOf(raw) == kindNull {
		v.add(FieldMissing, "Field required", bodyAt("name"))
	} else if name, ok := v.str(raw, bodyAt("name")); ok {
		if name == "" || len(name) > 2048 {
			v.add(FieldValueError, "name must be 1 to 2048 characters", bodyAt("name"))
		}
		r.name = name
	}
	r.arguments = json.RawMessage("{}")
	if raw, ok := fields["arguments"]; ok && kindOf(raw) != kindNull {
		if kindOf(raw) != kindObject {
			v.add(FieldTypeError, "arguments must be an object", bodyAt("arguments"))
		} else {
			r.arguments = bytes.TrimSpace(raw)
		}
	}
	if raw, ok := fields["server_id"]; ok && kindOf(raw) != kindNull {
		if id, ok := v.str(raw, bodyAt("server_id")); ok {
			u, err := uuid.Parse(id)
			if err != nil || len(id) != 36 {
				v.add(FieldValueError, "server_id must be a UUID", bodyAt("server_id"))
			} else {
				r.serverID = u.String()
			}
		}
	}
	if len(v.errs) > 0 {
		return callRequest{}, v.errs
	}
	return r, nil
}

// POST /api/v1/tools/call (BR-005, AG-US4): resolve from the in-memory routing table (no database on this path),
// run on the server's actor, return the backend's result unchanged plus routing metadata.
func (s *server) callTool(c *fiber.Ctx) error {
	start := time.Now()
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	req, ferrs := validateCall(body)
	if len(ferrs) > 0 {
		return validationError(ferrs)
	}
	route, err := s.control.Routes().Resolve(req.name, req.serverID)
	if err != nil {
		return routeError(err, req)
	}
	routed := time.Now()
	if route.ServerStatus != persistence.StatusConnected && route.ServerStatus != persistence.StatusDegraded {
		return unavailable(route.ServerID, route.ServerName, route.ServerStatus, "Server unavailable: "+route.ServerName, nil)
	}
	// The call is bounded by the actors' request timeout, not by the admin ask deadline.
	reply, err := s.control.Call(c.UserContext(), route, req.arguments, nil)
	if err != nil {
		return mapError(fmt.Errorf("call %s: %w", route.Name, err), subject{id: route.ServerID, name: route.ServerName})
	}
	done := time.Now()
	s.metrics.Routing(done.Sub(start) - time.Duration(reply.ExecutionMs*float64(time.Millisecond)))
	if reply.Error != nil {
		return callError(route, reply.Error, req.name, done.Sub(routed))
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(reply.ResultJson, &result); err != nil {
		return fmt.Errorf("decode result of %s: %w", route.Name, err)
	}
	if _, ok := result["isError"]; !ok {
		result["isError"] = json.RawMessage("false")
	}
	meta := map[string]any{
		"routed_to":         route.ServerName,
		"server_id":         route.ServerID,
		"tool":              route.Name,
		"strategy":          route.Strategy,
		"routing_time_ms":   ms(routed.Sub(start)),
		"execution_time_ms": ms(done.Sub(routed)),
		"total_time_ms":     ms(done.Sub(start)),
	}
	if route.ServerStatus == persistence.StatusDegraded {
		meta["warning"] = "Server " + route.ServerName + " is DEGRADED: recent health checks failed"
	}
	result["metadata"], _ = json.Marshal(meta)
	return c.JSON(result)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// routeError maps a failed resolution: unknown server id 404, unknown tool 404, ambiguous original name 400.
func routeError(err error, req callRequest) error {
	var amb *actors.AmbiguousToolError
	switch {
	case errors.As(err, &amb):
		return &apiError{status: fiber.StatusBadRequest, code: CodeToolAmbiguous,
			detail:  fmt.Sprintf("Tool %q is provided by several servers; call it by its namespaced name or with server_id", req.name),
			context: map[string]any{"tool": req.name, "server_ids": amb.ServerIDs}}
	case errors.Is(err, persistence.ErrNotFound):
		return serverNotFound(req.serverID)
	case errors.Is(err, actors.ErrToolNotFound):
		ctx := map[string]any{"tool": req.name}
		if req.serverID != "" {
			ctx["server_id"] = req.serverID
		}
		return &apiError{status: fiber.StatusNotFound, code: CodeToolNotFound, detail: "Tool not found: " + req.name, context: ctx}
	}
	return err
}

func unavailable(id, name, status, detail string, ctx map[string]any) *apiError {
	return &apiError{status: fiber.StatusServiceUnavailable, code: CodeServerUnavailable, detail: detail, context: ctx,
		server: &ServerRef{ID: id, Name: name, Status: status}}
}

// callError maps what the server actor reported: lost or disconnected session 503 (with what was in progress),
// a JSON-RPC error from the backend 502, the request timeout 504.
func callError(route actors.Route, e *pb.ErrorInfo, asked string, elapsed time.Duration) error {
	status := e.ServerStatus
	if status == "" {
		status = route.ServerStatus
	}
	inProgress := map[string]any{"tool": route.Name, "requested_as": asked, "elapsed_ms": ms(elapsed)}
	switch e.Code {
	case actors.CodeExecutionFailed:
		return &apiError{status: fiber.StatusBadGateway, code: CodeExecutionFailed, detail: e.Message,
			context: map[string]any{"tool": route.Name, "server_id": route.ServerID, "backend_error": e.Message}}
	case actors.CodeRequestTimeout:
		return &apiError{status: fiber.StatusGatewayTimeout, code: CodeRequestTimeout, detail: e.Message, context: inProgress}
	default:
		return unavailable(route.ServerID, route.ServerName, status, e.Message, map[string]any{"in_progress": inProgress})
	}
}

// POST /servers/{id}/tools/refresh: start a discovery of a connected server; 202 at once.
func (s *server) refreshTools(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	var ue *actors.UnavailableError
	if err := s.control.RefreshTools(ctx, id); errors.As(err, &ue) {
		return unavailable(ue.Server.ID, ue.Server.Name, ue.Server.Status, "Server unavailable: "+ue.Server.Name, nil)
	} else if err != nil {
		return mapError(fmt.Errorf("refresh tools of %s: %w", id, err), subject{id: id})
	}
	s.audit(c, AuditToolsRefreshed, id, s.serverName(ctx, id), nil)
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"server_id": id, "status": "REFRESHING", "message": "Tool discovery initiated"})
}
