package backend

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/persistence"
)

// TestTraceContextHeaders: a request of an SSE or HTTP session made within a span carries the span's W3C trace
// context (traceparent, tracestate) as headers; one without a span carries none. The propagator is
// OpenTelemetry's global one, which the daemon sets when tracing is on (internal/telemetry).
func TestTraceContextHeaders(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	rec := newRecorder(t)
	for _, transport := range []string{persistence.TransportHTTP, persistence.TransportSSE} {
		for _, tc := range []struct {
			name       string
			ctx        context.Context
			parent, st string
		}{
			{"in a span", trace.ContextWithSpanContext(context.Background(), sc), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x"},
			{"no span", context.Background(), "", ""},
		} {
			t.Run(transport+"/"+tc.name, func(t *testing.T) {
				key := "base_url"
				if transport == persistence.TransportSSE {
					key = "url"
				}
				cfg, _ := json.Marshal(map[string]any{key: rec.srv.URL + "/mcp"})
				b, err := Dial(persistence.Server{TransportType: transport, ConnectionConfig: cfg},
					Options{Env: func(string) (string, bool) { return "", false }, Outbound: NewOutbound(OutboundConfig{}, "instance-a")})
				if err != nil {
					t.Fatal(err)
				}
				req, _ := http.NewRequestWithContext(tc.ctx, http.MethodPost, rec.srv.URL+"/mcp", nil)
				resp, err := b.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := rec.headers()
				h := got[len(got)-1]
				if h.Get("traceparent") != tc.parent || h.Get("tracestate") != tc.st {
					t.Errorf("traceparent %q tracestate %q, want %q %q", h.Get("traceparent"), h.Get("tracestate"), tc.parent, tc.st)
				}
				if h.Get(HopHeader) != "instance-a" {
					t.Errorf("hop header %q", h.Get(HopHeader))
				}
			})
		}
	}
}
