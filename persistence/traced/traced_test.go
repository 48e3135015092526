package traced_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/internal/telemetry/telemetrytest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	"github.com/mcpgw/aggregator/persistence/storetest"
	"github.com/mcpgw/aggregator/persistence/traced"
)

func openSQLite(t testing.TB) persistence.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aggregator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestConformance: the traced store is the store: the shared conformance suite passes through it, spans recorded.
func TestConformance(t *testing.T) {
	telemetrytest.Record(t)
	storetest.Run(t, func(t *testing.T) persistence.Store { return traced.Wrap(openSQLite(t)) })
}

func newServer(name string) *persistence.Server {
	return &persistence.Server{Name: name, TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"true"}`), Status: persistence.StatusDisconnected}
}

// TestWritesMakeSpans: each write inside a traced request is a client span below the request's span, named after
// the operation, with db.system.name, db.operation.name and the server's id when the write names one; reads make
// none.
func TestWritesMakeSpans(t *testing.T) {
	rec := telemetrytest.Record(t)
	ctx := context.Background()
	s := traced.Wrap(openSQLite(t))
	ctx, root := telemetry.Tracer().Start(ctx, "request")
	srv := newServer("alpha")
	if err := s.CreateServer(ctx, srv, 0); err != nil {
		t.Fatal(err)
	}
	id := srv.ID
	lease, err := s.AcquireLease(ctx, id, "node-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	name := "alpha2"
	writes := []struct {
		op       string
		serverID string // the span's aggregator.server.id
		do       func() error
	}{
		{"UpdateServer", id, func() error { _, err := s.UpdateServer(ctx, id, persistence.ServerPatch{Name: &name}); return err }},
		{"SetAutoConnect", id, func() error { return s.SetAutoConnect(ctx, id, false) }},
		{"RecordTransition", id, func() error {
			return s.RecordTransition(ctx, persistence.Transition{ServerID: id, From: persistence.StatusDisconnected,
				To: persistence.StatusConnecting, At: time.Now(), Fence: &lease})
		}},
		{"RecordHealth", id, func() error {
			return s.RecordHealth(ctx, persistence.HealthRecord{ServerID: id, CheckedAt: time.Now()})
		}},
		{"ReplaceServerTools", id, func() error {
			_, err := s.ReplaceServerTools(ctx, id, []persistence.ToolDef{{OriginalName: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}}, &lease)
			return err
		}},
		{"SaveToolPins", id, func() error { return s.SaveToolPins(ctx, id, 0, nil, nil) }},
		{"PutToolOverride", id, func() error {
			d := "described"
			_, err := s.PutToolOverride(ctx, persistence.ToolOverride{ServerID: id, OriginalName: "echo", Description: &d})
			return err
		}},
		{"DeleteToolOverride", id, func() error { return s.DeleteToolOverride(ctx, id, "echo") }},
		{"PutProfile", "", func() error {
			_, _, err := s.PutProfile(ctx, persistence.Profile{Name: "p"})
			return err
		}},
		{"PutAccessPolicy", "", func() error { _, err := s.PutAccessPolicy(ctx, json.RawMessage(`{"rules":[]}`)); return err }},
		{"PutUserSecret", id, func() error {
			_, _, err := s.PutUserSecret(ctx, persistence.UserSecret{ServerID: id, Subject: "token:a", Secret: []byte(`{"sealed":"x"}`)})
			return err
		}},
		{"DeleteUserSecret", id, func() error { return s.DeleteUserSecret(ctx, id, "token:a") }},
		{"CreateOAuthFlow", id, func() error {
			return s.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: "st", ServerID: id, Subject: "token:a",
				Data: []byte(`{"sealed":"x"}`), ExpiresAt: time.Now().Add(time.Minute)}, 0, 0, time.Now())
		}},
		{"ReturnOAuthFlow", "", func() error { return s.ReturnOAuthFlow(ctx, "st", []byte(`"c"`), "", "", time.Now()) }},
		{"TakeOAuthFlow", "", func() error { _, err := s.TakeOAuthFlow(ctx, "st", "token:a", time.Now()); return err }},
		{"PutOAuthClient", id, func() error {
			return s.PutOAuthClient(ctx, persistence.OAuthClient{ServerID: id, Issuer: "https://as.example", Data: []byte(`{"sealed":"x"}`)})
		}},
		{"DeleteOAuthClient", id, func() error { return s.DeleteOAuthClient(ctx, id, "https://as.example") }},
		{"InsertAudit", id, func() error {
			return s.InsertAudit(ctx, persistence.AuditRecord{Event: "server.updated", ServerID: &id, Actor: "admin", Timestamp: time.Now()})
		}},
		{"Heartbeat", "", func() error { return s.Heartbeat(ctx, persistence.Node{ID: "node-a", Address: "http://127.0.0.1:1"}) }},
		{"RenewLeases", "", func() error { _, err := s.RenewLeases(ctx, "node-a", time.Minute); return err }},
		{"ReleaseLease", id, func() error { return s.ReleaseLease(ctx, lease) }},
		{"DeleteServer", id, func() error { return s.DeleteServer(ctx, id) }},
	}
	for _, w := range writes {
		if err := w.do(); err != nil {
			t.Fatalf("%s: %v", w.op, err)
		}
	}
	// Reads are not traced.
	if _, _, err := s.ListServers(ctx, persistence.ListServersFilter{}); err != nil {
		t.Fatal(err)
	}
	root.End()
	parent := root.SpanContext()

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		if sp.Name() != "request" {
			spans[sp.Name()] = sp
		}
	}
	want := append([]struct {
		op       string
		serverID string
		do       func() error
	}{{"CreateServer", id, nil}, {"AcquireLease", id, nil}}, writes...)
	for _, w := range want {
		t.Run(w.op, func(t *testing.T) {
			sp, ok := spans[w.op]
			if !ok {
				t.Fatalf("no span %q", w.op)
			}
			delete(spans, w.op)
			if sp.SpanKind() != trace.SpanKindClient || sp.Parent().SpanID() != parent.SpanID() || sp.SpanContext().TraceID() != parent.TraceID() {
				t.Errorf("kind %v, parent %v: want a client span below the request's %v", sp.SpanKind(), sp.Parent().SpanID(), parent.SpanID())
			}
			for k, v := range map[string]string{"db.system.name": "sqlite", "db.operation.name": w.op, "aggregator.server.id": w.serverID} {
				if got := telemetrytest.Attr(sp, attribute.Key(k)); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if sp.Status().Code != codes.Unset {
				t.Errorf("status %v, want unset", sp.Status())
			}
		})
	}
	for name := range spans {
		t.Errorf("unexpected span %q (reads are not traced)", name)
	}
}

// TestFailedWrite: a write the store refuses marks its span failed: status Error with the error's text, the error
// recorded as an exception event, and error.type the kind of the store's error.
func TestFailedWrite(t *testing.T) {
	rec := telemetrytest.Record(t)
	s := traced.Wrap(openSQLite(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name, op, errType string
		do                func() error
	}{
		{"unknown server", "DeleteServer", "not_found", func() error { return s.DeleteServer(ctx, "00000000-0000-0000-0000-000000000001") }},
		{"taken name", "CreateServer", "already_exists", func() error {
			if err := s.CreateServer(ctx, newServer("twice"), 0); err != nil {
				return err
			}
			return s.CreateServer(ctx, newServer("twice"), 0)
		}},
		{"limit", "CreateServer", "limit_reached", func() error { return s.CreateServer(ctx, newServer("third"), 1) }},
		{"cancelled", "InsertAudit", "cancelled", func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return s.InsertAudit(c, persistence.AuditRecord{Event: "server.updated", Actor: "a", Timestamp: time.Now()})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); err == nil {
				t.Fatal("the write succeeded")
			}
			spans := telemetrytest.Named(rec, tc.op)
			if len(spans) == 0 {
				t.Fatalf("no span %s", tc.op)
			}
			sp := spans[len(spans)-1]
			if sp.Status().Code != codes.Error || sp.Status().Description == "" {
				t.Errorf("status %+v, want Error with the error's text", sp.Status())
			}
			if got := telemetrytest.Attr(sp, "error.type"); got != tc.errType {
				t.Errorf("error.type %q, want %q", got, tc.errType)
			}
			if len(sp.Events()) == 0 || sp.Events()[0].Name != "exception" {
				t.Errorf("events %v, want the error recorded", sp.Events())
			}
		})
	}
}

// TestOutsideATrace: a write the daemon makes on its own (no span in its context) starts a trace; the periodic
// housekeeping (lease renewal, heartbeat) is traced only inside one.
func TestOutsideATrace(t *testing.T) {
	rec := telemetrytest.Record(t)
	s := traced.Wrap(openSQLite(t))
	ctx := context.Background()
	srv := newServer("solo")
	if err := s.CreateServer(ctx, srv, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordHealth(ctx, persistence.HealthRecord{ServerID: srv.ID, CheckedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, persistence.Node{ID: "n", Address: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewLeases(ctx, "n", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"CreateServer", "RecordHealth"} {
		spans := telemetrytest.Named(rec, op)
		if len(spans) != 1 || spans[0].Parent().IsValid() {
			t.Errorf("%s: %d spans, want one root span", op, len(spans))
		}
	}
	for _, op := range []string{"Heartbeat", "RenewLeases"} {
		if n := len(telemetrytest.Named(rec, op)); n != 0 {
			t.Errorf("%s outside a trace made %d spans, want none", op, n)
		}
	}
}

// feedStore is a store that is also a Feed.
type feedStore struct {
	persistence.Store
	persistence.Feed
}

// TestFeedThroughWrapper: the wrapper hides no Feed: persistence.FeedOf finds the inner store's.
func TestFeedThroughWrapper(t *testing.T) {
	inner := &feedStore{Store: openSQLite(t)}
	f, ok := persistence.FeedOf(traced.Wrap(inner))
	if !ok || f != persistence.Feed(inner) {
		t.Fatalf("FeedOf(traced) = %v, %v; want the inner store", f, ok)
	}
}
