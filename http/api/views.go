package api

import (
	"encoding/json"

	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/persistence"
)

// The JSON answers of system-contract.md that only REST gives (a server, a tool and a search answer are package
// view's, shared with the MCP meta-tools). Nullable fields are pointers so absent values are null, never omitted;
// timestamps are RFC 3339 in UTC with a Z (view.Time).

// serverWithToolsView is a list entry when include_tools is set: tools is always present, [] when none.
type serverWithToolsView struct {
	view.Server
	Tools []view.Tool `json:"tools"`
}

type serverListView struct {
	Servers any `json:"servers"`
	Total   int `json:"total"`
	Limit   int `json:"limit"`
	Offset  int `json:"offset"`
}

type toolListView struct {
	Tools        []view.Tool `json:"tools"`
	Total        int         `json:"total"`
	Classified   int         `json:"classified"`
	Unclassified int         `json:"unclassified"`
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
	Cluster *healthCluster `json:"cluster,omitempty"`
	Issues  []string       `json:"issues,omitempty"`
}

// healthCluster is this node's place in its cluster (only on a cluster node).
type healthCluster struct {
	Node    string `json:"node"`
	Members int    `json:"members"`
	Joined  bool   `json:"joined"`
}

func newHistoryEventView(e persistence.HistoryEvent) historyEventView {
	return historyEventView{
		ID:        e.ID,
		EventType: e.EventType,
		Details:   view.Raw(e.Details),
		Timestamp: view.Time(e.Timestamp),
	}
}
