package api

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/persistence"
)

// audit records an admin operation of a REST request: its actor, client IP and the app's clock.
func (s *server) audit(c *fiber.Ctx, event, serverID, serverName string, details map[string]any) {
	audit.Record(c.UserContext(), s.store, s.log, audit.Entry{Event: event, Actor: actorOf(c), IP: c.IP(), Via: "rest",
		ServerID: serverID, ServerName: serverName, Details: details, At: s.cfg.Now()})
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
	limit, offset, err := pageQuery(c)
	if err != nil {
		return err
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
			ServerName: r.ServerName, Actor: r.Actor, IPAddress: r.IPAddress, Timestamp: view.Time(r.Timestamp),
			Details: view.Raw(r.Details)})
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
	if p.Credential != nil {
		fields = append(fields, "credential_mode")
	}
	d := map[string]any{"fields": fields}
	if p.Credential != nil {
		d["credential_mode"] = p.Credential.Mode
	}
	if p.Name != nil && *p.Name != previousName {
		d["previous_name"] = previousName
	}
	return d
}
