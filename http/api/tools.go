package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
)

// POST /api/v1/tools/call (BR-005, AG-US4): decode and validate the body, run the call through the gateway (scope,
// resolution from the in-memory routing table, policy, the server's actor), and answer the backend's result as the
// actor encoded it, plus isError and the routing metadata.
func (s *server) callTool(c *fiber.Ctx) error {
	start := time.Now()
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	body, task, asTask := splitTask(body) // "task": run it in the background (tasks.go)
	req, ferrs := validate.Call(body, validate.RESTCall)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	id := identityOf(c)
	if asTask {
		return s.startTaskCall(c, id, req, task, start)
	}
	res, err := s.gw.Call(c.UserContext(), gateway.CallRequest{Caller: id, Name: req.Name, ServerID: req.ServerID,
		Profile: req.Profile, Within: gateway.Bound(s.gw.Routes(), id), Arguments: req.Arguments, Start: start})
	if err != nil {
		return mapError(err, subject{id: req.ServerID})
	}
	out, err := resultBody(res.Reply.ResultJson, res.Call.MetadataJSON())
	if err != nil {
		return fmt.Errorf("answer %s: %w", res.Call.Route.Name, err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if s.owner != nil {
		// In a cluster: the node that serves the server, so that a balancer can send the next call of this name
		// straight there (README, "Owner routing").
		if owner := s.owner(res.Call.Route.ServerID); owner != "" {
			c.Set(actors.OwnerHeader, owner)
		}
	}
	return c.Send(out)
}

// resultBody is the answer to a REST call: the backend's result object as the actor encoded it (checked, not
// decoded), with "isError":false when the backend left it out and the call's "metadata". A result that is not a
// JSON object is an error.
func resultBody(result, meta json.RawMessage) ([]byte, error) {
	result = bytes.TrimSpace(result)
	if len(result) < 2 || result[0] != '{' || !json.Valid(result) {
		return nil, errors.New("result is not a JSON object")
	}
	members, hasIsError := scanMembers(result, "isError")
	out := make([]byte, 0, len(result)+len(meta)+32)
	out = append(out, result[:len(result)-1]...) // without the closing brace
	if members > 0 {
		out = append(out, ',')
	}
	if !hasIsError {
		out = append(out, `"isError":false,`...)
	}
	out = append(out, `"metadata":`...)
	out = append(out, meta...)
	return append(out, '}'), nil
}

// scanMembers counts the members of the valid JSON object obj and reports whether one is named key (as written:
// the go-sdk's encoder writes member names without escapes). It reads the bytes once and allocates nothing.
func scanMembers(obj []byte, key string) (members int, found bool) {
	depth, keyStart := 0, -1
	inString, escaped, wantKey := false, false, false
	for i, b := range obj {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
				if keyStart >= 0 {
					found = found || string(obj[keyStart:i]) == key
					keyStart = -1
				}
			}
			continue
		}
		switch b {
		case '"':
			inString = true
			if depth == 1 && wantKey {
				members++
				keyStart, wantKey = i+1, false
			}
		case '{', '[':
			depth++
			wantKey = depth == 1
		case '}', ']':
			depth--
		case ',':
			wantKey = depth == 1
		}
	}
	return members, found
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
