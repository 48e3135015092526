package mcpserver_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/telemetry/telemetrytest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestRelayTraced: with tracing on, a backend's elicitation, sampling and roots/list requests relayed to the
// calling client are each a client span below the call's gateway.call span (so in the /mcp request's trace),
// named after the method, with mcp.method.name and, for a client with a session, its mcp.session.id; a client
// that answers with an error marks the span failed. The same holds for a 2026-07-28 client, whose answer comes in
// its retry (the round trip).
func TestRelayTraced(t *testing.T) {
	rec := telemetrytest.Record(t)
	r := newRig(t)
	url, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker's tools", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })

	var refuse atomic.Bool // the client refuses the elicitation (set between calls)
	client := mcp.NewClient(&mcp.Implementation{Name: "capable", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if refuse.Load() {
				return nil, errors.New("no thanks")
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ann"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hello"}}, nil
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})

	for _, tc := range []struct {
		name, version, tool, method string
		refuse                      bool
	}{
		{"elicitation", actors.ProtocolVersion, "asker__ask", "elicitation/create", false},
		{"sampling", actors.ProtocolVersion, "asker__sample", "sampling/createMessage", false},
		{"roots", actors.ProtocolVersion, "asker__roots", "roots/list", false},
		{"refused elicitation", actors.ProtocolVersion, "asker__ask", "elicitation/create", true},
		{"round trip elicitation", "", "asker__ask", "elicitation/create", false},
		{"round trip sampling", "", "asker__sample", "sampling/createMessage", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"},
				&mcp.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			refuse.Store(tc.refuse)
			before := len(rec.Ended())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}})
			if err != nil || res.IsError != tc.refuse {
				t.Fatalf("call: %v %q", err, text(res))
			}
			var relayed, gw sdktrace.ReadOnlySpan
			for _, s := range rec.Ended()[before:] {
				switch {
				case s.Name() == tc.method && s.SpanKind() == trace.SpanKindClient:
					relayed = s
				case s.Name() == "gateway.call" && telemetrytest.Attr(s, "aggregator.server.name") == "asker":
					gw = s
				}
			}
			if relayed == nil || gw == nil {
				t.Fatalf("spans: relayed %v, gateway.call %v", relayed != nil, gw != nil)
			}
			if relayed.Parent().SpanID() != gw.SpanContext().SpanID() || relayed.SpanContext().TraceID() != gw.SpanContext().TraceID() {
				t.Errorf("the relayed request's parent is %v, want gateway.call %v", relayed.Parent().SpanID(), gw.SpanContext().SpanID())
			}
			if got := telemetrytest.Attr(relayed, "mcp.method.name"); got != tc.method {
				t.Errorf("mcp.method.name %q", got)
			}
			wantSession := ""
			if tc.version != "" {
				wantSession = sess.ID()
			}
			if got := telemetrytest.Attr(relayed, "mcp.session.id"); got != wantSession {
				t.Errorf("mcp.session.id %q, want %q", got, wantSession)
			}
			if failed := relayed.Status().Code == codes.Error; failed != tc.refuse {
				t.Errorf("status %v, want failed: %v", relayed.Status(), tc.refuse)
			}
			if tc.refuse && telemetrytest.Attr(relayed, "error.type") == "" {
				t.Error("a refused request has no error.type")
			}
		})
	}
}
