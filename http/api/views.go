package api

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// The JSON answers of system-contract.md. Nullable fields are pointers so absent values are null, never omitted;
// timestamps are RFC 3339 in UTC with a Z.

// serverView is a server in lists (and the base of the detail).
type serverView struct {
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

// serverWithToolsView is a list entry when include_tools is set: tools is always present, [] when none.
type serverWithToolsView struct {
	serverView
	Tools []toolView `json:"tools"`
}

// serverDetailView answers GET /servers/{id}, the 201 of POST /servers and PATCH.
type serverDetailView struct {
	serverView
	ConnectionConfig     json.RawMessage `json:"connection_config"`
	ErrorMessage         *string         `json:"error_message"`
	UpdatedAt            string          `json:"updated_at"`
	AutoConnect          bool            `json:"auto_connect"`
	ConsecutiveFailures  int             `json:"consecutive_failures"`
	HealthResponseTimeMs *float64        `json:"health_response_time_ms"`
}

type serverListView struct {
	Servers any `json:"servers"`
	Total   int `json:"total"`
	Limit   int `json:"limit"`
	Offset  int `json:"offset"`
}

type toolView struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	OriginalName   string   `json:"original_name"`
	Description    string   `json:"description"`
	SkillIDs       []string `json:"skill_ids"`
	PrimarySkillID *string  `json:"primary_skill_id"`
	IsClassified   bool     `json:"is_classified"`
	DiscoveredAt   string   `json:"discovered_at"`
}

type toolListView struct {
	Tools        []toolView `json:"tools"`
	Total        int        `json:"total"`
	Classified   int        `json:"classified"`
	Unclassified int        `json:"unclassified"`
}

type historyEventView struct {
	ID        int64           `json:"id"`
	EventType string          `json:"event_type"`
	Details   json.RawMessage `json:"details"`
	Timestamp string          `json:"timestamp"`
}

type historyView struct {
	ServerID string             `json:"server_id"`
	History  []historyEventView `json:"history"`
	Limit    int                `json:"limit"`
}

type stateView struct {
	TotalServers               int     `json:"total_servers"`
	ConnectedServers           int     `json:"connected_servers"`
	DisconnectedServers        int     `json:"disconnected_servers"`
	ErrorServers               int     `json:"error_servers"`
	ConnectingServers          int     `json:"connecting_servers"`
	DegradedServers            int     `json:"degraded_servers"`
	TotalTools                 int     `json:"total_tools"`
	ClassifiedTools            int     `json:"classified_tools"`
	UnclassifiedTools          int     `json:"unclassified_tools"`
	LastSync                   *string `json:"last_sync"`
	HealthCheckIntervalSeconds int64   `json:"health_check_interval_seconds"`
	UptimeSeconds              int64   `json:"uptime_seconds"`
}

type healthChecks struct {
	Database string `json:"database"`
	Qdrant   string `json:"qdrant"`
	Sessions string `json:"sessions"`
}

type healthServers struct {
	Total     int `json:"total"`
	Connected int `json:"connected"`
	Error     int `json:"error"`
}

type healthView struct {
	Status  string         `json:"status"`
	Checks  healthChecks   `json:"checks"`
	Servers *healthServers `json:"servers,omitempty"`
	Issues  []string       `json:"issues,omitempty"`
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

func formatTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := formatTime(*t)
	return &s
}

// nonEmpty makes an empty optional string null, so "no description" has one spelling.
func nonEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

// rawOrNull keeps stored JSON as it is, or null when it is absent or (should never happen) not JSON, which would
// otherwise fail the whole answer.
func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	return raw
}

func newServerView(s persistence.Server) serverView {
	return serverView{
		ID:              s.ID,
		Name:            s.Name,
		Description:     nonEmpty(s.Description),
		TransportType:   s.TransportType,
		Status:          s.Status,
		HealthCheckURL:  maskedURL(nonEmpty(s.HealthCheckURL)),
		ToolCount:       s.ToolCount,
		LastHealthCheck: formatTimePtr(s.LastHealthCheck),
		RegisteredAt:    formatTime(s.RegisteredAt),
		ConnectedAt:     formatTimePtr(s.ConnectedAt),
	}
}

// maskedURL is connconfig.MaskURL for an optional URL.
func maskedURL(u *string) *string {
	if u == nil {
		return nil
	}
	m := connconfig.MaskURL(*u)
	return &m
}

// newServerDetailView shows connection_config as written with its secrets masked (connconfig.Mask): ${VAR} references
// appear as written, never resolved.
func newServerDetailView(s persistence.Server) serverDetailView {
	return serverDetailView{
		serverView:           newServerView(s),
		ConnectionConfig:     connconfig.Mask(s.ConnectionConfig),
		ErrorMessage:         s.ErrorMessage,
		UpdatedAt:            formatTime(s.UpdatedAt),
		AutoConnect:          s.AutoConnect,
		ConsecutiveFailures:  s.ConsecutiveFailures,
		HealthResponseTimeMs: s.HealthResponseMs,
	}
}

func newToolView(t persistence.Tool) toolView {
	skills := t.SkillIDs
	if skills == nil {
		skills = []string{}
	}
	return toolView{
		ID:             strconv.FormatInt(t.ID, 10),
		Name:           t.Name,
		OriginalName:   t.OriginalName,
		Description:    t.Description,
		SkillIDs:       skills,
		PrimarySkillID: t.PrimarySkillID,
		IsClassified:   t.IsClassified,
		DiscoveredAt:   formatTime(t.DiscoveredAt),
	}
}

func newToolViews(tools []persistence.Tool) []toolView {
	out := make([]toolView, 0, len(tools))
	for _, t := range tools {
		out = append(out, newToolView(t))
	}
	return out
}

func newHistoryEventView(e persistence.HistoryEvent) historyEventView {
	return historyEventView{
		ID:        e.ID,
		EventType: e.EventType,
		Details:   rawOrNull(e.Details),
		Timestamp: formatTime(e.Timestamp),
	}
}

// ServerDetailJSON is a server as GET /servers/{id} shows it, for the other front ends (the MCP meta-tools), so that
// both speak one shape.
func ServerDetailJSON(s persistence.Server) any { return newServerDetailView(s) }

// ServerSummaryJSON is a server as GET /servers lists it.
func ServerSummaryJSON(s persistence.Server) any { return newServerView(s) }
