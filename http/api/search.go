package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/strictjson"
)

// Defaults of POST /api/v1/search where the contract gives only examples. Engine and skill scores are calibrated
// to 0..1: random text scores under 0.25, a skill 1.5 standard deviations above the query's mean scores 0.5.
const (
	DefaultSearchLimit     = 10
	MaxSearchLimit         = 100
	DefaultSkillThreshold  = 0.4
	DefaultToolThreshold   = 0.25
	maxSearchQueryLength   = 2000
	maxSearchServerFilters = 100
)

// ValidateSearch reads a POST /api/v1/search body (system-contract.md "Extended Search API"); every field but
// query is optional. The MCP endpoint's search_aggregated_tools uses the same rules.
func ValidateSearch(body []byte) (actors.SearchRequest, []FieldError) {
	r := actors.SearchRequest{ItemType: "tool", IncludeExternal: true, Limit: DefaultSearchLimit,
		SkillThreshold: DefaultSkillThreshold, ToolThreshold: DefaultToolThreshold, Strategy: actors.StrategyHierarchical}
	v := newValidator(nil)
	members, ok := v.Object(body)
	if !ok {
		return r, v.Errors()
	}
	fields := v.Index(members, bodyAt())
	known := map[string]bool{"query": true, "item_type": true, "include_external": true, "server_filter": true, "limit": true,
		"skill_threshold": true, "tool_threshold": true, "include_schemas": true, "strategy": true}
	for _, m := range members {
		if !known[m.Key] {
			v.Add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}
	present := func(k string) (json.RawMessage, bool) {
		raw, ok := fields[k]
		return raw, ok && strictjson.KindOf(raw) != strictjson.KindNull
	}
	if raw, ok := present("query"); !ok {
		v.Add(FieldMissing, "Field required", bodyAt("query"))
	} else if q, ok := v.String(raw, bodyAt("query")); ok {
		switch {
		case len(q) == 0 || isBlank(q):
			v.Add(FieldValueError, "query must not be empty", bodyAt("query"))
		case len(q) > maxSearchQueryLength:
			v.Add(FieldValueError, fmt.Sprintf("query must be at most %d characters", maxSearchQueryLength), bodyAt("query"))
		}
		r.Query = q
	}
	oneOf := func(k string, allowed ...string) (string, bool) {
		raw, ok := present(k)
		if !ok {
			return "", false
		}
		s, ok := v.String(raw, bodyAt(k))
		if !ok {
			return "", false
		}
		for _, a := range allowed {
			if s == a {
				return s, true
			}
		}
		v.Add(FieldValueError, fmt.Sprintf("%s must be one of %v", k, allowed), bodyAt(k))
		return "", false
	}
	if s, ok := oneOf("item_type", "tool", "skill"); ok {
		r.ItemType = s
	}
	if s, ok := oneOf("strategy", actors.StrategyHierarchical, actors.StrategyDirect); ok {
		r.Strategy = s
	}
	for _, k := range []string{"include_external", "include_schemas"} {
		if raw, ok := present(k); ok {
			if b, ok := v.Bool(raw, bodyAt(k)); ok {
				if k == "include_external" {
					r.IncludeExternal = b
				} else {
					r.IncludeSchemas = b
				}
			}
		}
	}
	if raw, ok := present("server_filter"); ok {
		if names, ok := v.StringList(raw, bodyAt("server_filter")); ok {
			if len(names) > maxSearchServerFilters {
				v.Add(FieldValueError, fmt.Sprintf("server_filter lists at most %d servers", maxSearchServerFilters), bodyAt("server_filter"))
			}
			r.ServerFilter = names
		}
	}
	if raw, ok := present("limit"); ok {
		n, err := strconv.Atoi(string(raw))
		if strictjson.KindOf(raw) != strictjson.KindNumber || err != nil {
			v.Add(FieldTypeError, "limit must be an integer", bodyAt("limit"))
		} else if n < 1 || n > MaxSearchLimit {
			v.Add(FieldValueError, fmt.Sprintf("limit must be between 1 and %d", MaxSearchLimit), bodyAt("limit"))
		} else {
			r.Limit = n
		}
	}
	for _, k := range []string{"skill_threshold", "tool_threshold"} {
		if raw, ok := present(k); ok {
			f, err := strconv.ParseFloat(string(raw), 64)
			if strictjson.KindOf(raw) != strictjson.KindNumber || err != nil {
				v.Add(FieldTypeError, k+" must be a number", bodyAt(k))
			} else if f < 0 || f > 1 {
				v.Add(FieldValueError, k+" must be between 0 and 1", bodyAt(k))
			} else if k == "skill_threshold" {
				r.SkillThreshold = f
			} else {
				r.ToolThreshold = f
			}
		}
	}
	if v.Count() > 0 {
		return actors.SearchRequest{}, v.Errors()
	}
	return r, nil
}

func isBlank(s string) bool {
	for _, c := range s {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// searchToolView is one tool of a search answer (system-contract.md).
type searchToolView struct {
	ID             string             `json:"id"`
	DBID           int64              `json:"db_id"`
	Type           string             `json:"type"`
	Name           string             `json:"name"`
	Alias          string             `json:"alias"` // the name to call on the aggregator's MCP endpoint
	OriginalName   string             `json:"original_name"`
	Description    string             `json:"description"`
	Score          float64            `json:"score"`
	SkillIDs       []string           `json:"skill_ids"`
	PrimarySkillID *string            `json:"primary_skill_id"`
	IsClassified   bool               `json:"is_classified"`
	SourceServer   apierror.ServerRef `json:"source_server"`
	InputSchema    json.RawMessage    `json:"input_schema,omitempty"`
}

type matchedSkillView struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Score       float64 `json:"score"`
	ToolCount   int     `json:"tool_count"`
}

type searchView struct {
	Query         string             `json:"query"`
	Tools         []searchToolView   `json:"tools"`
	MatchedSkills []matchedSkillView `json:"matched_skills"`
	Metadata      map[string]any     `json:"metadata"`
}

// SearchJSON renders a search answer in the contract's shape (shared with search_aggregated_tools).
func SearchJSON(r actors.SearchRequest, res actors.SearchResponse, took time.Duration) any {
	out := searchView{Query: r.Query, Tools: []searchToolView{}, MatchedSkills: []matchedSkillView{}}
	for _, h := range res.Tools {
		skills := h.Tool.SkillIDs
		if skills == nil {
			skills = []string{}
		}
		v := searchToolView{ID: strconv.FormatInt(h.Tool.ID, 10), DBID: h.Tool.ID, Type: "tool", Name: h.Tool.Name,
			Alias: h.Tool.Alias, OriginalName: h.Tool.OriginalName, Description: h.Tool.Description, Score: h.Score, SkillIDs: skills,
			PrimarySkillID: h.Tool.PrimarySkillID, IsClassified: h.Tool.IsClassified,
			SourceServer: apierror.ServerRef{ID: h.Server.ID, Name: h.Server.Name, Status: h.Server.Status}}
		if r.IncludeSchemas {
			v.InputSchema = h.Tool.InputSchema
		}
		out.Tools = append(out.Tools, v)
	}
	for _, m := range res.MatchedSkills {
		out.MatchedSkills = append(out.MatchedSkills, matchedSkillView{ID: m.Skill.ID, Name: m.Skill.Name,
			Description: m.Skill.Description, Score: m.Score, ToolCount: m.ToolCount})
	}
	out.Metadata = map[string]any{
		"strategy_used":         res.StrategyUsed,
		"fallback":              res.Fallback,
		"servers_searched":      res.ServersSearched,
		"external_tools_count":  res.ToolsSearched,
		"total_tools_searched":  res.ToolsSearched,
		"total_time_ms":         ms(took),
		"item_type":             r.ItemType,
		"tool_threshold":        r.ToolThreshold,
		"skill_threshold":       r.SkillThreshold,
		"include_external":      r.IncludeExternal,
		"server_filter_applied": len(r.ServerFilter) > 0,
	}
	return out
}

// POST /api/v1/search: hybrid tool search over the connected servers (AG-US2, BR-009).
func (s *server) searchTools(c *fiber.Ctx) error {
	start := time.Now()
	body, err := jsonBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	req, ferrs := ValidateSearch(body)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	res, err := s.control.Search(ctx, req)
	if err != nil {
		return mapError(fmt.Errorf("search: %w", err), subject{})
	}
	return c.JSON(SearchJSON(req, res, time.Since(start)))
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
		return apierror.Validation([]FieldError{{Loc: []any{"query", "include_embedding"}, Msg: "include_embedding must be true or false", Type: FieldTypeError}})
	}
	skills := s.control.Skills()
	out := make([]skillView, len(skills))
	for i, sk := range skills {
		out[i] = skillView{ID: sk.ID, Name: sk.Name, Description: sk.Description, ToolCount: sk.ToolCount, EmbeddingDimension: len(sk.Embedding)}
		if withVec {
			out[i].Embedding = sk.Embedding
		}
	}
	return c.JSON(fiber.Map{"skills": out, "total": len(out)})
}
