package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
)

// Audit events (system-contract.md, "Audit Logging"): one record after every successful admin operation, from the
// REST API and from the MCP meta-tools alike.
const (
	AuditServerRegistered   = "server.registered"
	AuditServerUpdated      = "server.updated"
	AuditServerConnected    = "server.connected" // a connect was requested (it completes in the background)
	AuditServerDisconnected = "server.disconnected"
	AuditServerRemoved      = "server.removed"
	AuditToolsRefreshed     = "server.tools_refreshed"
)

// auditTimeout bounds the write of one audit record.
const auditTimeout = 5 * time.Second

// RecordAudit stores one audit record. The operation it describes has already happened, so a failed write is
// logged, not returned; it runs detached from the request's cancellation so a client hanging up cannot lose it.
// Details must never hold connection_config or anything secret.
func RecordAudit(ctx context.Context, store persistence.Store, log *slog.Logger, r persistence.AuditRecord) {
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now()
	}
	r.Timestamp = r.Timestamp.UTC()
	if r.Actor == "" {
		r.Actor = anonymousActor
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := store.InsertAudit(c, r); err != nil && log != nil {
		log.LogAttrs(ctx, slog.LevelError, "audit record not stored", slog.String("event", r.Event),
			slog.Any("server_id", r.ServerID), slog.String("actor", r.Actor), slog.Any("error", err))
	}
}

// AuditDetails encodes small details of an audit record (nil stays nil).
func AuditDetails(d map[string]any) json.RawMessage {
	if len(d) == 0 {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}

// audit records an admin operation of a REST request: its actor, client IP and the app's clock.
func (s *server) audit(c *fiber.Ctx, event, serverID, serverName string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	details["via"] = "rest"
	r := persistence.AuditRecord{Event: event, Actor: actorOf(c), IPAddress: c.IP(), Details: AuditDetails(details),
		Timestamp: s.cfg.Now()}
	if serverID != "" {
		r.ServerID = &serverID
	}
	if serverName != "" {
		r.ServerName = &serverName
	}
	RecordAudit(c.UserContext(), s.store, s.log, r)
}

// serverName finds a server's name for the audit log: from the routing table, else the store ("" if unknown).
func (s *server) serverName(ctx context.Context, id string) string {
	if e, ok := s.control.Routes().Server(id); ok {
		return e.Name
	}
	if srv, err := s.store.GetServer(ctx, id); err == nil {
		return srv.Name
	}
	return ""
}

type auditRecordView struct {
	ID         int64           `json:"id"`
	Event      string          `json:"event"`
	ServerID   *string         `json:"server_id"`
	ServerName *string         `json:"server_name"`
	Actor      string          `json:"actor"`
	IPAddress  string          `json:"ip_address"`
	Timestamp  string          `json:"timestamp"`
	Details    json.RawMessage `json:"details"`
}

type auditListView struct {
	Records []auditRecordView `json:"records"`
	Total   int               `json:"total"`
	Limit   int               `json:"limit"`
	Offset  int               `json:"offset"`
}

// GET /audit?limit=&offset=: the audit log, newest first (admin scope).
func (s *server) listAudit(c *fiber.Ctx) error {
	v := newValidator(nil)
	limit := queryInt(c, v, "limit", defaultLimit, 1, maxLimit)
	offset := queryInt(c, v, "offset", 0, 0, maxOffset)
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	recs, total, err := s.store.ListAudit(ctx, limit, offset)
	if err != nil {
		return mapError(fmt.Errorf("list audit: %w", err), subject{})
	}
	out := auditListView{Records: make([]auditRecordView, 0, len(recs)), Total: total, Limit: limit, Offset: offset}
	for _, r := range recs {
		out.Records = append(out.Records, auditRecordView{ID: r.ID, Event: r.Event, ServerID: r.ServerID,
			ServerName: r.ServerName, Actor: r.Actor, IPAddress: r.IPAddress, Timestamp: formatTime(r.Timestamp),
			Details: rawOrNull(r.Details)})
	}
	return c.JSON(out)
}

// patchDetails names the fields a PATCH changed (never their values: connection_config may hold secrets), and the
// previous name of a rename.
func patchDetails(p persistence.ServerPatch, previousName string) map[string]any {
	var fields []string
	if p.Name != nil {
		fields = append(fields, "name")
	}
	if p.Description != nil {
		fields = append(fields, "description")
	}
	if p.ConnectionConfig != nil {
		fields = append(fields, "connection_config")
	}
	if p.HealthCheckURL != nil || p.ClearHealthCheckURL {
		fields = append(fields, "health_check_url")
	}
	d := map[string]any{"fields": fields}
	if p.Name != nil && *p.Name != previousName {
		d["previous_name"] = previousName
	}
	return d
}
