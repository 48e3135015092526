// Package audit records the admin operations of every front end (system-contract.md, "Audit Logging"): one record
// after every successful register, update, connect, disconnect, removal and tool refresh, whether it came through
// REST (http/api) or an MCP meta-tool (http/mcpserver), in one shape, so GET /audit lists them alike.
package audit

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// Events of the audit log.
const (
	ServerRegistered   = "server.registered"
	ServerUpdated      = "server.updated"
	ServerConnected    = "server.connected" // a connect was requested (it completes in the background)
	ServerDisconnected = "server.disconnected"
	ServerRemoved      = "server.removed"
	ToolsRefreshed     = "server.tools_refreshed"
	// Tool curation.
	ToolFilterUpdated   = "server.tool_filter_updated"
	PinningUpdated      = "server.pinning_updated"
	ToolOverrideSet     = "tool.override_set"
	ToolOverrideRemoved = "tool.override_removed"
	ToolChangeApproved  = "tool.change_approved"
	ToolChangeRejected  = "tool.change_rejected"
	ProfileCreated      = "profile.created"
	ProfileUpdated      = "profile.updated"
	ProfileDeleted      = "profile.deleted"
	// The access policy (issue 27).
	AccessPolicyUpdated = "policy.updated"
	// Callers' own credentials of per_user servers (issue 28); details name the subject, never the secret.
	CredentialStored  = "credential.stored"
	CredentialRemoved = "credential.removed"
	CredentialRevoked = "credential.revoked"
	// CredentialOAuthStarted: a caller started the OAuth authorization of a per_user server's backend.
	CredentialOAuthStarted = "credential.oauth_started"
)

// timeout bounds the write of one record.
const timeout = 5 * time.Second

// Entry is one admin operation to record.
type Entry struct {
	Event string
	// Actor is the token's name (auth.AnonymousName when empty), IP the client's address.
	Actor, IP string
	// Via names the front end: "rest" or "mcp".
	Via string
	// ServerID and ServerName name the server operated on, when known ("" for none).
	ServerID, ServerName string
	// Details are small facts about the operation; they must never hold connection_config or anything secret.
	Details map[string]any
	// At is when it happened (now when zero).
	At time.Time
}

// Record stores one audit record. The operation it describes has already happened, so a failed write is logged,
// not returned; it runs detached from the request's cancellation so a client hanging up cannot lose it.
func Record(ctx context.Context, store persistence.Store, log *slog.Logger, e Entry) {
	details := map[string]any{}
	for k, v := range e.Details {
		details[k] = v
	}
	details["via"] = e.Via
	r := persistence.AuditRecord{Event: e.Event, Actor: e.Actor, IPAddress: e.IP, Details: encode(details), Timestamp: e.At}
	if e.ServerID != "" {
		r.ServerID = &e.ServerID
	}
	if e.ServerName != "" {
		r.ServerName = &e.ServerName
	}
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now()
	}
	r.Timestamp = r.Timestamp.UTC()
	if r.Actor == "" {
		r.Actor = auth.AnonymousName
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := store.InsertAudit(c, r); err != nil && log != nil {
		log.LogAttrs(ctx, slog.LevelError, "audit record not stored", slog.String("event", r.Event),
			slog.Any("server_id", r.ServerID), slog.String("actor", r.Actor), slog.Any("error", err))
	}
}

// encode encodes the details (never empty: they name the front end).
func encode(d map[string]any) json.RawMessage {
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}
