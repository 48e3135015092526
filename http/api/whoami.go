package api

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/view"
)

// WhoamiPath answers who the caller is: a client (the console) learns whether its token may change anything
// before it offers to.
const WhoamiPath = "/api/v1/whoami"

// WhoamiView answers GET /api/v1/whoami.
type WhoamiView struct {
	// Name is the token's name ("anonymous" while auth is off).
	Name string `json:"name"`
	// Scope is "admin" or "client".
	Scope string `json:"scope"`
	// AuthEnabled is false when the daemon has no token: everyone is an anonymous admin.
	AuthEnabled bool `json:"auth_enabled"`
}

// GET /api/v1/whoami: the caller's token name and scope (client scope suffices).
func (s *server) whoami(c *fiber.Ctx) error {
	id := identityOf(c)
	return c.JSON(WhoamiView{Name: id.Name, Scope: id.Scope.String(), AuthEnabled: s.tokens.Enabled()})
}

// toolDetailView is one tool with its input schema, which the tool lists leave out.
type toolDetailView struct {
	view.Tool
	InputSchema json.RawMessage `json:"input_schema"`
	ServerID    string          `json:"server_id"`
}

// GET /servers/{id}/tools/{tool}: one tool of a server by its namespaced name, original name or id, with its
// input schema (the console builds its "try this tool" form from it).
func (s *server) getServerTool(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	want, err := url.PathUnescape(c.Params("tool"))
	if err != nil {
		want = c.Params("tool")
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if _, err := s.storedServer(ctx, c, id); err != nil {
		return err
	}
	tools, restricted, err := s.servedTools(c, id)
	if err != nil {
		return err
	}
	if !restricted {
		stored, err := s.control.StoredTools(ctx, id)
		if err != nil {
			return serverFailed(c, "list tools of", id, err)
		}
		tools = stored[id]
	}
	for i, t := range tools {
		if t.Name == want || t.OriginalName == want || fmt.Sprint(t.ID) == want {
			schema := view.Raw(t.InputSchema)
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			return c.JSON(toolDetailView{Tool: view.NewTools(tools[i : i+1])[0], InputSchema: schema, ServerID: id})
		}
	}
	return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeToolNotFound, Detail: "Tool not found: " + want}
}
