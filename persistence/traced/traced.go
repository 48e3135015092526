// Package traced makes an OpenTelemetry span of every write to a persistence.Store: a client span per write, named
// after the operation (CreateServer, RecordTransition, InsertAudit, ...), with db.system.name (postgresql or
// sqlite), db.operation.name and, where the write names one, the server's id (aggregator.server.id). A failed
// write sets error.type (not_found, already_exists, lease_lost, ...) and the span's status, with the error
// recorded. Reads pass through untraced.
//
// A write inside a traced request is a child of the request's span; one the daemon makes on its own (a state
// transition, a health record, an audit line written after the request) starts a trace of its own, except the
// periodic housekeeping (lease renewal, node heartbeat), which is traced only inside a trace, so that a cluster's
// idle nodes do not send a trace every few seconds.
//
// The daemon wraps its store only when tracing is on (cmd/aggregator): off, it runs on the plain store and the
// wrapper costs nothing.
package traced

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
)

// Store is a persistence.Store whose writes make spans. Every read is the inner store's (embedded).
type Store struct {
	persistence.Store
	system attribute.KeyValue
}

// Wrap returns inner with its writes traced through OpenTelemetry's global tracer provider.
func Wrap(inner persistence.Store) *Store {
	system := semconv.DBSystemNameKey.String(inner.Kind())
	switch inner.Kind() {
	case "postgres":
		system = semconv.DBSystemNamePostgreSQL
	case "sqlite":
		system = semconv.DBSystemNameSQLite
	}
	return &Store{Store: inner, system: system}
}

// Inner is the wrapped store (persistence.FeedOf looks through it).
func (s *Store) Inner() persistence.Store { return s.Store }

// write starts the span of one write; end records its outcome. housekeeping: only inside a trace.
func (s *Store) write(ctx context.Context, op, serverID string, housekeeping bool) (context.Context, func(error)) {
	if housekeeping && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, func(error) {}
	}
	ctx, span := telemetry.Tracer().Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		attrs := []attribute.KeyValue{s.system, semconv.DBOperationNameKey.String(op)}
		if serverID != "" {
			attrs = append(attrs, telemetry.ServerIDKey.String(serverID))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, func(err error) {
		if err != nil {
			telemetry.Fail(span, err, ErrorType(err))
		}
		span.End()
	}
}

// ErrorType is the error.type of a failed write: the kind of the store's sentinel errors, timeout or cancelled,
// else _OTHER.
func ErrorType(err error) string {
	for _, k := range []struct {
		err  error
		kind string
	}{
		{persistence.ErrNotFound, "not_found"}, {persistence.ErrAlreadyExists, "already_exists"},
		{persistence.ErrUnavailable, "unavailable"}, {persistence.ErrLeaseHeld, "lease_held"},
		{persistence.ErrLeaseLost, "lease_lost"}, {persistence.ErrLimitReached, "limit_reached"},
		{persistence.ErrKeyReused, "key_reused"}, {persistence.ErrChanged, "changed"},
		{context.DeadlineExceeded, "timeout"}, {context.Canceled, "cancelled"},
	} {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "_OTHER"
}

// optional is the server id a nullable column holds ("" for nil).
func optional(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}

func (s *Store) CreateServer(ctx context.Context, srv *persistence.Server, max int) (err error) {
	ctx, end := s.write(ctx, "CreateServer", srv.ID, false)
	defer func() { end(err) }()
	err = s.Store.CreateServer(ctx, srv, max)
	if err == nil {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.ServerIDKey.String(srv.ID))
	}
	return err
}

func (s *Store) CreateServerIdempotent(ctx context.Context, srv *persistence.Server, max int, k persistence.IdempotencyKey) (replayed bool, err error) {
	ctx, end := s.write(ctx, "CreateServerIdempotent", srv.ID, false)
	defer func() { end(err) }()
	replayed, err = s.Store.CreateServerIdempotent(ctx, srv, max, k)
	if err == nil {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.ServerIDKey.String(srv.ID), attribute.Bool("aggregator.idempotent_replay", replayed))
	}
	return replayed, err
}

func (s *Store) UpdateServer(ctx context.Context, id string, p persistence.ServerPatch) (_ persistence.Server, err error) {
	ctx, end := s.write(ctx, "UpdateServer", id, false)
	defer func() { end(err) }()
	return s.Store.UpdateServer(ctx, id, p)
}

func (s *Store) SetAutoConnect(ctx context.Context, id string, on bool) (err error) {
	ctx, end := s.write(ctx, "SetAutoConnect", id, false)
	defer func() { end(err) }()
	return s.Store.SetAutoConnect(ctx, id, on)
}

func (s *Store) RecordTransition(ctx context.Context, t persistence.Transition) (err error) {
	ctx, end := s.write(ctx, "RecordTransition", t.ServerID, false)
	defer func() { end(err) }()
	return s.Store.RecordTransition(ctx, t)
}

func (s *Store) RecordHealth(ctx context.Context, h persistence.HealthRecord) (err error) {
	ctx, end := s.write(ctx, "RecordHealth", h.ServerID, false)
	defer func() { end(err) }()
	return s.Store.RecordHealth(ctx, h)
}

func (s *Store) DeleteServer(ctx context.Context, id string) (err error) {
	ctx, end := s.write(ctx, "DeleteServer", id, false)
	defer func() { end(err) }()
	return s.Store.DeleteServer(ctx, id)
}

func (s *Store) ReplaceServerTools(ctx context.Context, serverID string, defs []persistence.ToolDef, fence *persistence.Lease) (_ persistence.ToolDiff, err error) {
	ctx, end := s.write(ctx, "ReplaceServerTools", serverID, false)
	defer func() { end(err) }()
	return s.Store.ReplaceServerTools(ctx, serverID, defs, fence)
}

func (s *Store) SetToolClassification(ctx context.Context, id int64, c persistence.ToolClassification) (err error) {
	ctx, end := s.write(ctx, "SetToolClassification", "", false)
	defer func() { end(err) }()
	return s.Store.SetToolClassification(ctx, id, c)
}

func (s *Store) ReplaceServerFeatures(ctx context.Context, serverID string, defs []persistence.FeatureDef, fence *persistence.Lease) (err error) {
	ctx, end := s.write(ctx, "ReplaceServerFeatures", serverID, false)
	defer func() { end(err) }()
	return s.Store.ReplaceServerFeatures(ctx, serverID, defs, fence)
}

func (s *Store) AcquireLease(ctx context.Context, serverID, owner string, ttl time.Duration) (_ persistence.Lease, err error) {
	ctx, end := s.write(ctx, "AcquireLease", serverID, false)
	defer func() { end(err) }()
	return s.Store.AcquireLease(ctx, serverID, owner, ttl)
}

func (s *Store) TakeOverLease(ctx context.Context, serverID, owner, from string, ttl time.Duration) (_ persistence.Lease, err error) {
	ctx, end := s.write(ctx, "TakeOverLease", serverID, false)
	defer func() { end(err) }()
	return s.Store.TakeOverLease(ctx, serverID, owner, from, ttl)
}

func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) (_ []persistence.Lease, err error) {
	ctx, end := s.write(ctx, "RenewLeases", "", true)
	defer func() { end(err) }()
	return s.Store.RenewLeases(ctx, owner, ttl)
}

func (s *Store) ReleaseLease(ctx context.Context, l persistence.Lease) (err error) {
	ctx, end := s.write(ctx, "ReleaseLease", l.ServerID, false)
	defer func() { end(err) }()
	return s.Store.ReleaseLease(ctx, l)
}

func (s *Store) ReleaseOwnerLeases(ctx context.Context, owner string) (_ int, err error) {
	ctx, end := s.write(ctx, "ReleaseOwnerLeases", "", false)
	defer func() { end(err) }()
	return s.Store.ReleaseOwnerLeases(ctx, owner)
}

func (s *Store) Heartbeat(ctx context.Context, n persistence.Node) (err error) {
	ctx, end := s.write(ctx, "Heartbeat", "", true)
	defer func() { end(err) }()
	return s.Store.Heartbeat(ctx, n)
}

func (s *Store) RemoveNode(ctx context.Context, id string) (err error) {
	ctx, end := s.write(ctx, "RemoveNode", "", false)
	defer func() { end(err) }()
	return s.Store.RemoveNode(ctx, id)
}

func (s *Store) InsertAudit(ctx context.Context, r persistence.AuditRecord) (err error) {
	ctx, end := s.write(ctx, "InsertAudit", optional(r.ServerID), false)
	defer func() { end(err) }()
	return s.Store.InsertAudit(ctx, r)
}

func (s *Store) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (_ persistence.Server, err error) {
	ctx, end := s.write(ctx, "SetToolPolicy", serverID, false)
	defer func() { end(err) }()
	return s.Store.SetToolPolicy(ctx, serverID, p)
}

func (s *Store) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (_ persistence.ToolOverride, err error) {
	ctx, end := s.write(ctx, "PutToolOverride", o.ServerID, false)
	defer func() { end(err) }()
	return s.Store.PutToolOverride(ctx, o)
}

func (s *Store) DeleteToolOverride(ctx context.Context, serverID, originalName string) (err error) {
	ctx, end := s.write(ctx, "DeleteToolOverride", serverID, false)
	defer func() { end(err) }()
	return s.Store.DeleteToolOverride(ctx, serverID, originalName)
}

func (s *Store) SaveToolPins(ctx context.Context, serverID string, expect int64, pins []persistence.ToolPin, fence *persistence.Lease) (err error) {
	ctx, end := s.write(ctx, "SaveToolPins", serverID, false)
	defer func() { end(err) }()
	return s.Store.SaveToolPins(ctx, serverID, expect, pins, fence)
}

func (s *Store) ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, expectHash string) (_ persistence.ToolPin, err error) {
	ctx, end := s.write(ctx, "ResolveToolChange", serverID, false)
	defer func() { end(err) }()
	return s.Store.ResolveToolChange(ctx, serverID, originalName, approve, expectHash)
}

func (s *Store) PutProfile(ctx context.Context, p persistence.Profile) (_ persistence.Profile, _ bool, err error) {
	ctx, end := s.write(ctx, "PutProfile", "", false)
	defer func() { end(err) }()
	return s.Store.PutProfile(ctx, p)
}

func (s *Store) DeleteProfile(ctx context.Context, name string) (err error) {
	ctx, end := s.write(ctx, "DeleteProfile", "", false)
	defer func() { end(err) }()
	return s.Store.DeleteProfile(ctx, name)
}

func (s *Store) PutAccessPolicy(ctx context.Context, doc json.RawMessage) (_ persistence.AccessPolicy, err error) {
	ctx, end := s.write(ctx, "PutAccessPolicy", "", false)
	defer func() { end(err) }()
	return s.Store.PutAccessPolicy(ctx, doc)
}

func (s *Store) PutUserSecret(ctx context.Context, u persistence.UserSecret) (_ persistence.UserSecret, _ bool, err error) {
	ctx, end := s.write(ctx, "PutUserSecret", u.ServerID, false)
	defer func() { end(err) }()
	return s.Store.PutUserSecret(ctx, u)
}

func (s *Store) DeleteUserSecret(ctx context.Context, serverID, subject string) (err error) {
	ctx, end := s.write(ctx, "DeleteUserSecret", serverID, false)
	defer func() { end(err) }()
	return s.Store.DeleteUserSecret(ctx, serverID, subject)
}

func (s *Store) CreateOAuthFlow(ctx context.Context, f persistence.OAuthFlow, perSubject, total int, now time.Time) (err error) {
	ctx, end := s.write(ctx, "CreateOAuthFlow", f.ServerID, false)
	defer func() { end(err) }()
	return s.Store.CreateOAuthFlow(ctx, f, perSubject, total, now)
}

func (s *Store) ReturnOAuthFlow(ctx context.Context, state string, code []byte, iss, errText string, now time.Time) (err error) {
	ctx, end := s.write(ctx, "ReturnOAuthFlow", "", false)
	defer func() { end(err) }()
	return s.Store.ReturnOAuthFlow(ctx, state, code, iss, errText, now)
}

func (s *Store) TakeOAuthFlow(ctx context.Context, state, subject string, now time.Time) (_ persistence.OAuthFlow, err error) {
	ctx, end := s.write(ctx, "TakeOAuthFlow", "", false)
	defer func() { end(err) }()
	return s.Store.TakeOAuthFlow(ctx, state, subject, now)
}

func (s *Store) PutOAuthClient(ctx context.Context, c persistence.OAuthClient) (err error) {
	ctx, end := s.write(ctx, "PutOAuthClient", c.ServerID, false)
	defer func() { end(err) }()
	return s.Store.PutOAuthClient(ctx, c)
}

func (s *Store) DeleteOAuthClient(ctx context.Context, serverID, issuer string) (err error) {
	ctx, end := s.write(ctx, "DeleteOAuthClient", serverID, false)
	defer func() { end(err) }()
	return s.Store.DeleteOAuthClient(ctx, serverID, issuer)
}
