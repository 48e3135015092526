package telemetry

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkCallTracing is the tracing work of one routed tools/call without the call itself: the /mcp request's
// server span (ServerMiddleware), the gateway's span, the trace context into the call message and out of it on the
// server actor's side (Inject, Extract), the backend request's client span with the context into its _meta
// (ClientMiddleware) and into its HTTP headers. Off is OpenTelemetry's no-op provider, as the daemon runs without
// an endpoint; on, spans go through the batch processor to an exporter that drops them.
func BenchmarkCallTracing(b *testing.B) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	b.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	// The scaffold allocates nothing per call: one result, one backend request (whose _meta ClientMiddleware
	// replaces with a copy each time), one header map.
	result, header := &mcp.CallToolResult{}, http.Header{}
	breq := &mcp.ServerRequest[*mcp.CallToolParams]{Params: &mcp.CallToolParams{Name: "echo", Meta: mcp.Meta{"request_id": "r"}}}
	backend := ClientMiddleware("echo", "id-1")(func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		if trace.SpanContextFromContext(ctx).IsValid() {
			otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(header))
		}
		return result, nil
	})
	inbound := ServerMiddleware(func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		if On() {
			var span trace.Span
			ctx, span = Tracer().Start(ctx, "gateway.call")
			defer span.End()
		}
		actx := Extract(context.Background(), Inject(ctx))
		return backend(actx, "tools/call", breq)
	})
	for _, s := range []struct {
		name  string
		ratio float64 // < 0: off
	}{{"off", -1}, {"sampled-1pct", 0.01}, {"sampled-100pct", 1}} {
		if s.ratio < 0 {
			otel.SetTracerProvider(noop.NewTracerProvider())
			otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		} else {
			tp, err := NewProvider(context.Background(), discard{}, Process{Version: "bench"},
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.ratio))))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			otel.SetTracerProvider(tp)
			otel.SetTextMapPropagator(Propagator())
		}
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "echo__echo"}}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inbound(context.Background(), "tools/call", req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
