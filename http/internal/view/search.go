package view

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
)

// SearchTool is one tool of a search answer (system-contract.md).
type SearchTool struct {
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

// MatchedSkill is one skill a hierarchical search matched.
type MatchedSkill struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Score       float64 `json:"score"`
	ToolCount   int     `json:"tool_count"`
}

// Search answers POST /api/v1/search and search_aggregated_tools.
type Search struct {
	Query         string         `json:"query"`
	Tools         []SearchTool   `json:"tools"`
	MatchedSkills []MatchedSkill `json:"matched_skills"`
	Metadata      map[string]any `json:"metadata"`
}

// NewSearch renders the answer to search r, which took took.
func NewSearch(r gateway.SearchRequest, res gateway.SearchResponse, took time.Duration) Search {
	out := Search{Query: r.Query, Tools: []SearchTool{}, MatchedSkills: []MatchedSkill{}}
	for _, h := range res.Tools {
		skills := h.Tool.SkillIDs
		if skills == nil {
			skills = []string{}
		}
		v := SearchTool{ID: strconv.FormatInt(h.Tool.ID, 10), DBID: h.Tool.ID, Type: "tool", Name: h.Tool.Name,
			Alias: h.Tool.Alias, OriginalName: h.Tool.OriginalName, Description: h.Tool.Description, Score: h.Score, SkillIDs: skills,
			PrimarySkillID: h.Tool.PrimarySkillID, IsClassified: h.Tool.IsClassified,
			SourceServer: apierror.ServerRef{ID: h.Server.ID, Name: h.Server.Name, Status: h.Server.Status}}
		if r.IncludeSchemas {
			v.InputSchema = h.Tool.InputSchema
		}
		out.Tools = append(out.Tools, v)
	}
	for _, m := range res.MatchedSkills {
		out.MatchedSkills = append(out.MatchedSkills, MatchedSkill{ID: m.Skill.ID, Name: m.Skill.Name,
			Description: m.Skill.Description, Score: m.Score, ToolCount: m.ToolCount})
	}
	out.Metadata = map[string]any{
		"strategy_used":         res.StrategyUsed,
		"fallback":              res.Fallback,
		"servers_searched":      res.ServersSearched,
		"external_tools_count":  res.ToolsSearched,
		"total_tools_searched":  res.ToolsSearched,
		"total_time_ms":         apierror.Ms(took),
		"item_type":             r.ItemType,
		"tool_threshold":        r.ToolThreshold,
		"skill_threshold":       r.SkillThreshold,
		"include_external":      r.IncludeExternal,
		"server_filter_applied": len(r.ServerFilter) > 0,
	}
	return out
}
