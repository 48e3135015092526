package gateway_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/telemetry"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestCallSpan: with tracing on, a call is a gateway.call span, child of the caller's, with the tool asked, the
// server and the resolved tool; a failure sets error.type (the contract's code, route_error, forbidden) and the
// Error status. The actor is asked within the span (its context carries it).
func TestCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	deny := policyFunc(func(_ context.Context, caller auth.Identity, _ routing.Route) error {
		if caller.Name == "mallory" {
			return gateway.ErrDenied
		}
		return nil
	})
	for _, tc := range []struct {
		name, tool, caller string
		reply              *pb.CallToolReply
		askErr             error
		errType            string // "" succeeded
		server             string
	}{
		{"ok", "alpha.echo", "", nil, nil, "", "alpha"},
		{"unknown tool", "alpha.nope", "", nil, nil, "route_error", ""},
		{"denied", "alpha.echo", "mallory", nil, nil, "forbidden", ""},
		{"backend error", "alpha.echo", "", &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerUnavailable, Message: "down"}}, nil, errcode.ServerUnavailable, "alpha"},
		{"ask failed", "alpha.echo", "", nil, errors.New("gone"), "_OTHER", "alpha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			if tc.reply != nil {
				f.reply = tc.reply
			}
			f.err = tc.askErr
			g := gateway.New(f, gateway.Options{Policy: deny})
			ctx, parent := telemetry.Tracer().Start(context.Background(), "inbound")
			_, err := g.Call(ctx, gateway.CallRequest{Name: tc.tool, Caller: auth.Identity{Name: tc.caller}})
			parent.End()
			if (err != nil) != (tc.errType != "") {
				t.Fatalf("Call: %v", err)
			}
			var span sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "gateway.call" && s.Parent().SpanID() == parent.SpanContext().SpanID() {
					span = s
				}
			}
			if span == nil {
				t.Fatal("no gateway.call span below the caller's")
			}
			got := map[string]string{}
			for _, kv := range span.Attributes() {
				got[string(kv.Key)] = kv.Value.Emit()
			}
			if got["gen_ai.tool.name"] != tc.tool || got["aggregator.server.name"] != tc.server || got["error.type"] != tc.errType {
				t.Errorf("attributes %v; want tool %q server %q error.type %q", got, tc.tool, tc.server, tc.errType)
			}
			if failed := span.Status().Code == codes.Error; failed != (tc.errType != "") {
				t.Errorf("status %v", span.Status())
			}
		})
	}
}
