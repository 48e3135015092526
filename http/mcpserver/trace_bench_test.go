package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// countingExporter drops the spans it is given, counting them.
type countingExporter struct{ n atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}
func (e *countingExporter) Shutdown(context.Context) error { return nil }

// BenchmarkCallPathTracing is BenchmarkCallPath's call through /mcp (protocol ActorsProtocolVersion) with tracing
// off (OpenTelemetry's no-op provider, as the daemon runs without OTEL_EXPORTER_OTLP_ENDPOINT) and on, sampling
// every call or 1 % of them (parentbased_traceidratio, the client sends no traceparent). On, spans go through the
// SDK's batch processor to an exporter that drops them: the figure is the daemon's cost of making and batching the
// spans (three per sampled call: /mcp, gateway.call and the backend's client span), not the export's network
// traffic. The tracer provider is
// OpenTelemetry's global one, set per sub-benchmark.
func BenchmarkCallPathTracing(b *testing.B) {
	backend := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":true}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	b.Cleanup(hs.Close)
	m := metrics.New(nil)
	r := newRigWith(b, actors.Deps{Config: actors.DefaultConfig(), Metrics: m}, mcpserver.Options{Metrics: m})
	r.register(b, "echo", map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	waitFor(b, "echo routable", func() bool { _, ok := r.sys.Routes().Tool("echo.echo"); return ok })

	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	b.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	args := map[string]any{"message": "hello"}
	const want = `{"message":"hello"}`
	for _, s := range []struct {
		name  string
		ratio float64 // < 0: off
	}{{"off", -1}, {"sampled-1pct", 0.01}, {"sampled-100pct", 1}} {
		exp := &countingExporter{}
		var tp trace.TracerProvider = noop.NewTracerProvider()
		var sdk *sdktrace.TracerProvider
		if s.ratio >= 0 {
			var err error
			sdk, err = telemetry.NewProvider(context.Background(), exp, telemetry.Process{Version: "bench"},
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.ratio))))
			if err != nil {
				b.Fatal(err)
			}
			tp = sdk
		}
		otel.SetTracerProvider(tp)
		if s.ratio >= 0 {
			otel.SetTextMapPropagator(telemetry.Propagator())
		} else {
			otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		}
		cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			b.Fatal(err)
		}
		params := &mcp.CallToolParams{Name: "echo__echo", Arguments: args}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := sess.CallTool(context.Background(), params)
				if err != nil || res.IsError || text(res) != want {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
		sess.Close()
		if sdk != nil {
			_ = sdk.Shutdown(context.Background())
			if s.ratio == 1 && exp.n.Load() == 0 {
				b.Fatalf("%s: no span exported", s.name)
			}
		}
	}
}
