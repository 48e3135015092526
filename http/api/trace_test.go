package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/internal/telemetry/telemetrytest"
)

// TestRequestSpan: with tracing on, each request is a server span named after its method and route pattern (never
// the raw path), continuing the caller's traceparent header, with the status; a 5xx marks it failed.
func TestRequestSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(telemetry.Propagator())
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	for _, tc := range []struct {
		name, method, path, body string
		panics                   string
		wantName, wantStatus     string
		failed                   bool
	}{
		{"not found", "GET", "/api/v1/aggregator/servers/nope", "", "", "GET /api/v1/aggregator/servers/:id", "404", false},
		{"list", "GET", "/api/v1/aggregator/servers", "", "", "GET /api/v1/aggregator/servers", "200", false},
		{"panic", "POST", "/api/v1/aggregator/servers", sseBody, "boom", "POST /api/v1/aggregator/servers", "500", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.control.panics = tc.panics
			before := len(rec.Ended())
			r := e.do(t, tc.method, tc.path, tc.body, "traceparent: 00-"+traceID+"-"+parent+"-01")
			if got := r.status; got == 0 {
				t.Fatal("no answer")
			}
			var span sdktrace.ReadOnlySpan
			for _, s := range rec.Ended()[before:] {
				if s.SpanKind() == trace.SpanKindServer {
					span = s
				}
			}
			if span == nil {
				t.Fatal("no server span")
			}
			attrs := map[string]string{}
			for _, kv := range span.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if span.Name() != tc.wantName || attrs["http.response.status_code"] != tc.wantStatus || attrs["http.route"] != tc.wantName[len(tc.method)+1:] {
				t.Errorf("span %q %v; want %q status %s", span.Name(), attrs, tc.wantName, tc.wantStatus)
			}
			if span.SpanContext().TraceID().String() != traceID || span.Parent().SpanID().String() != parent {
				t.Errorf("span does not continue the header's trace: %v parent %v", span.SpanContext().TraceID(), span.Parent().SpanID())
			}
			if (span.Status().Code == codes.Error) != tc.failed || tc.failed && attrs["error.type"] != tc.wantStatus {
				t.Errorf("status %v error.type %q", span.Status(), attrs["error.type"])
			}
		})
	}
}

// TestProbesAreNotTraced: probes and metrics scrapes (every few seconds from an orchestrator and Prometheus) make no
// span, on the REST listener as on the MCP listener (AccessLog); they would each be a trace of their own.
func TestProbesAreNotTraced(t *testing.T) {
	rec := telemetrytest.Record(t)
	e := newEnv(t)
	mcpListener := AccessLog(nil, "mcp", func(string) string { return "probe" }, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/api/v1/aggregator/health", "/livez", "/readyz", "/metrics"} {
		t.Run(path, func(t *testing.T) {
			before := len(rec.Ended())
			e.do(t, "GET", path, "")
			mcpListener.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
			if spans := rec.Ended()[before:]; len(spans) != 0 {
				t.Errorf("%d spans, first %q", len(spans), spans[0].Name())
			}
		})
	}
	// A request beside them is traced (the recorder works).
	before := len(rec.Ended())
	mcpListener.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/mcp", nil))
	if len(rec.Ended()) != before+1 {
		t.Error("the MCP listener's request made no span")
	}
}
