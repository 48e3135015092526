// Package view renders the JSON answers of system-contract.md that more than one front end gives: a server as
// listed and in detail (its connection_config and health_check_url masked, connconfig.Mask), a tool, and a search
// answer. REST (http/api) answers with them and so do the MCP meta-tools (http/mcpserver), so a server or a search
// reads the same on both. Nullable fields are pointers so absent values are null, never omitted; timestamps are
// RFC 3339 in UTC with a Z.
package view

import (
	"cmp"
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// Server is a server in lists (and the base of ServerDetail).
type Server struct {
	ID              string  `json:"id"`
	Name            string  `json:"name"`
	Description     *string `json:"description"`
	TransportType   string  `json:"transport_type"`
	Status          string  `json:"status"`
	HealthCheckURL  *string `json:"health_check_url"`
	ToolCount       int     `json:"tool_count"`
	LastHealthCheck *string `json:"last_health_check"`
	RegisteredAt    string  `json:"registered_at"`
	ConnectedAt     *string `json:"connected_at"`
}

// NewServer is s as GET /servers and list_mcp_servers list it.
func NewServer(s persistence.Server) Server {
	return Server{
		ID:              s.ID,
		Name:            s.Name,
		Description:     nonEmpty(s.Description),
		TransportType:   s.TransportType,
		Status:          s.Status,
		HealthCheckURL:  maskedURL(nonEmpty(s.HealthCheckURL)),
		ToolCount:       s.ToolCount,
		LastHealthCheck: TimePtr(s.LastHealthCheck),
		RegisteredAt:    Time(s.RegisteredAt),
		ConnectedAt:     TimePtr(s.ConnectedAt),
	}
}

// ServerDetail answers GET /servers/{id}, the 201 of POST /servers, PATCH, add_mcp_server and get_server_status.
type ServerDetail struct {
	Server
	ConnectionConfig     json.RawMessage `json:"connection_config"`
	ErrorMessage         *string         `json:"error_message"`
	UpdatedAt            string          `json:"updated_at"`
	AutoConnect          bool            `json:"auto_connect"`
	ConsecutiveFailures  int             `json:"consecutive_failures"`
	HealthResponseTimeMs *float64        `json:"health_response_time_ms"`
	// CredentialMode is "shared" or "per_user"; UserCredential (null for shared) says where each caller's
	// secret goes. Neither holds a secret.
	CredentialMode string                          `json:"credential_mode"`
	UserCredential *persistence.UserCredentialSlot `json:"user_credential"`
}

// NewServerDetail shows connection_config as written with its secrets masked (connconfig.Mask): ${VAR}
// references appear as written, never resolved.
func NewServerDetail(s persistence.Server) ServerDetail {
	return ServerDetail{
		Server:               NewServer(s),
		ConnectionConfig:     connconfig.Mask(s.ConnectionConfig),
		ErrorMessage:         s.ErrorMessage,
		UpdatedAt:            Time(s.UpdatedAt),
		AutoConnect:          s.AutoConnect,
		ConsecutiveFailures:  s.ConsecutiveFailures,
		HealthResponseTimeMs: s.HealthResponseMs,
		CredentialMode:       cmp.Or(s.CredentialMode, persistence.CredentialShared),
		UserCredential:       s.UserCredential,
	}
}

// Tool is a tool of a server (GET /servers/{id}/tools, include_tools).
type Tool struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	OriginalName   string   `json:"original_name"`
	Description    string   `json:"description"`
	SkillIDs       []string `json:"skill_ids"`
	PrimarySkillID *string  `json:"primary_skill_id"`
	IsClassified   bool     `json:"is_classified"`
	DiscoveredAt   string   `json:"discovered_at"`
}

// NewTools shows tools in order; skill_ids is [] rather than null.
func NewTools(tools []persistence.Tool) []Tool {
	out := make([]Tool, 0, len(tools))
	for _, t := range tools {
		skills := t.SkillIDs
		if skills == nil {
			skills = []string{}
		}
		out = append(out, Tool{
			ID:             strconv.FormatInt(t.ID, 10),
			Name:           t.Name,
			OriginalName:   t.OriginalName,
			Description:    t.Description,
			SkillIDs:       skills,
			PrimarySkillID: t.PrimarySkillID,
			IsClassified:   t.IsClassified,
			DiscoveredAt:   Time(t.DiscoveredAt),
		})
	}
	return out
}

// Time is a timestamp as every answer shows it: RFC 3339 in UTC with a Z.
func Time(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// TimePtr is Time for an optional timestamp (nil stays null).
func TimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := Time(*t)
	return &s
}

// Raw keeps stored JSON as it is, or null when it is absent or (should never happen) not JSON, which would
// otherwise fail the whole answer.
func Raw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	return raw
}

// nonEmpty makes an empty optional string null, so "no description" has one spelling.
func nonEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

// maskedURL is connconfig.MaskURL for an optional URL.
func maskedURL(u *string) *string {
	if u == nil {
		return nil
	}
	m := connconfig.MaskURL(*u)
	return &m
}
