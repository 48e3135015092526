package api

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
)

// POST /api/v1/search: hybrid tool search over the connected servers (AG-US2, BR-009).
func (s *server) searchTools(c *fiber.Ctx) error {
	start := time.Now()
	req, err := checkedBody(c, s.cfg.MaxBodyBytes, validate.Search)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	req, res, err := s.gw.Search(ctx, identityOf(c), req, s.bound(c))
	if err != nil {
		return mapError(err, subject{})
	}
	return c.JSON(view.NewSearch(req, res, time.Since(start)))
}

type skillView struct {
	ID                 string    `json:"id"`
	Name               string    `json:"name"`
	Description        string    `json:"description"`
	ToolCount          int       `json:"tool_count"`
	EmbeddingDimension int       `json:"embedding_dimension"`
	Embedding          []float32 `json:"embedding,omitempty"`
}

// GET /api/v1/skills: the skills taxonomy; ?include_embedding=true adds each skill's current vector.
func (s *server) listSkills(c *fiber.Ctx) error {
	withVec := false
	switch c.Query("include_embedding") {
	case "", "false", "0":
	case "true", "1":
		withVec = true
	default:
		return apierror.Validation([]apierror.FieldError{{Loc: []any{"query", "include_embedding"}, Msg: "include_embedding must be true or false", Type: apierror.FieldTypeError}})
	}
	skills := s.control.Skills()
	count := s.visibleSkillCounts(c)
	out := make([]skillView, len(skills))
	for i, sk := range skills {
		out[i] = skillView{ID: sk.ID, Name: sk.Name, Description: sk.Description, ToolCount: sk.ToolCount, EmbeddingDimension: len(sk.Embedding)}
		if count != nil {
			out[i].ToolCount = count[sk.ID]
		}
		if withVec {
			out[i].Embedding = sk.Embedding
		}
	}
	return c.JSON(fiber.Map{"skills": out, "total": len(out)})
}

// visibleSkillCounts counts, by skill, the tools the caller may see, when it may not see every tool (a client
// token bound to profiles, or an access policy with rules): a hidden tool is not counted. nil when the caller sees
// every tool (the taxonomy's own counts stand).
func (s *server) visibleSkillCounts(c *fiber.Ctx) map[string]int {
	rt := s.control.Routes()
	id := identityOf(c)
	sc := gateway.Bound(rt, id)
	keep := s.gw.ListFilter(c.UserContext(), id, rt)
	if sc == nil && keep == nil {
		return nil
	}
	count := map[string]int{}
	all := rt.Entries()
	for i := range all {
		if e := &all[i]; rt.Has(sc, e) && (keep == nil || keep(e)) {
			for _, sk := range e.SkillIDs {
				count[sk]++
			}
		}
	}
	return count
}
