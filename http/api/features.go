package api

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/persistence"
)

// The admin view of what a server offers besides tools (issue 14): GET /servers/{id}/prompts and
// /servers/{id}/resources list the stored prompts, resources and resource templates the way /tools lists tools,
// each with the name or URI the aggregated MCP endpoint exposes it under (its alias, or a rewritten URI where two
// servers list the same one). A client token bound to profiles gets those of its profiles' servers only.

// featureView is one stored prompt, resource or resource template.
type featureView struct {
	Kind string `json:"kind"`
	// Name is the backend's: a prompt's name, a resource's URI or a template's URI template.
	Name string `json:"name"`
	// Exposed is what /mcp lists it as; empty when the server has not been routed yet.
	Exposed    string          `json:"exposed_as"`
	Definition json.RawMessage `json:"definition"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

type featureListView struct {
	Items []featureView `json:"items"`
	Total int           `json:"total"`
}

// GET /servers/{id}/prompts
func (s *server) listServerPrompts(c *fiber.Ctx) error {
	return s.listServerFeatures(c, persistence.FeaturePrompt)
}

// GET /servers/{id}/resources: resources, then resource templates.
func (s *server) listServerResources(c *fiber.Ctx) error {
	return s.listServerFeatures(c, persistence.FeatureResource, persistence.FeatureResourceTemplate)
}

func (s *server) listServerFeatures(c *fiber.Ctx, kinds ...string) error {
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
	all, err := s.store.ListFeatures(ctx, id)
	if err != nil {
		return serverFailed(c, "list features of", id, err)
	}
	// A client token bound to profiles sees the prompts and resources of its profiles' servers only (as on /mcp):
	// of another server, an empty list, as /servers/{id}/tools gives it.
	sc, err := s.scopeOf(c, "")
	if err != nil {
		return err
	}
	if in := s.control.Routes().ServersIn(sc); in != nil && !in[id] {
		all = nil
	}
	exposed := map[[2]string]string{}
	prompts, resources, templates := s.control.Routes().ServerFeatures(id)
	for _, p := range prompts {
		exposed[[2]string{persistence.FeaturePrompt, p.Name}] = p.Alias
	}
	for _, r := range resources {
		exposed[[2]string{persistence.FeatureResource, r.Key}] = r.Exposed
	}
	for _, r := range templates {
		exposed[[2]string{persistence.FeatureResourceTemplate, r.Key}] = r.Exposed
	}
	out := featureListView{Items: []featureView{}}
	for _, kind := range kinds {
		for _, f := range all {
			if f.Kind != kind {
				continue
			}
			if out.Total >= offset && len(out.Items) < limit {
				out.Items = append(out.Items, featureView{Kind: f.Kind, Name: f.Key, Exposed: exposed[[2]string{f.Kind, f.Key}],
					Definition: f.Definition, UpdatedAt: f.UpdatedAt})
			}
			out.Total++
		}
	}
	return c.JSON(out)
}
