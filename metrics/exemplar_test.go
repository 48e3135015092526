package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// scrape reads the registry as Prometheus does (OpenMetrics, the format with exemplars).
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", ct)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestExemplars: a request or call observed within a sampled span puts an exemplar naming that span (trace_id,
// span_id) on its latency bucket; an unsampled span or none (tracing off) leaves none.
func TestExemplars(t *testing.T) {
	spanCtx := func(flags trace.TraceFlags, tid, sid string) context.Context {
		t.Helper()
		traceID, err := trace.TraceIDFromHex(tid)
		if err != nil {
			t.Fatal(err)
		}
		spanID, err := trace.SpanIDFromHex(sid)
		if err != nil {
			t.Fatal(err)
		}
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: traceID, SpanID: spanID, TraceFlags: flags}))
	}
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		want    bool
		observe func(m *Metrics, ctx context.Context)
		series  string // the start of the bucket line that carries it
	}{
		{"http sampled", spanCtx(trace.FlagsSampled, tid, sid), true,
			func(m *Metrics, ctx context.Context) {
				m.HTTP(ctx, "rest", "/api/v1/tools/call", "POST", 200, 3*time.Millisecond)
			},
			`mcp_aggregator_http_request_duration_seconds_bucket{listener="rest",route="/api/v1/tools/call",le="0.005"}`},
		{"routing sampled", spanCtx(trace.FlagsSampled, tid, sid), true,
			func(m *Metrics, ctx context.Context) { m.Routing(ctx, 300*time.Microsecond) },
			`mcp_aggregator_routing_duration_seconds_bucket{le="0.0005"}`},
		{"wrapped handler", spanCtx(trace.FlagsSampled, tid, sid), true,
			func(m *Metrics, ctx context.Context) {
				h := m.WrapHTTP("mcp", "/mcp", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/mcp", nil).WithContext(ctx))
			},
			`mcp_aggregator_http_request_duration_seconds_bucket{listener="mcp",route="/mcp",le=`},
		{"unsampled", spanCtx(0, tid, sid), false,
			func(m *Metrics, ctx context.Context) { m.Routing(ctx, 300*time.Microsecond) }, ""},
		{"no span", context.Background(), false,
			func(m *Metrics, ctx context.Context) { m.HTTP(ctx, "rest", "/x", "GET", 200, time.Millisecond) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(nil)
			tc.observe(m, tc.ctx)
			body := scrape(t, m)
			var line string
			for _, l := range strings.Split(body, "\n") {
				if strings.Contains(l, " # {") {
					line = l
				}
			}
			if !tc.want {
				if line != "" {
					t.Fatalf("an exemplar without a sampled span: %s", line)
				}
				return
			}
			_, ex, _ := strings.Cut(line, " # {")
			if !strings.HasPrefix(line, tc.series) || !strings.Contains(ex, `trace_id="`+tid+`"`) || !strings.Contains(ex, `span_id="`+sid+`"`) {
				t.Fatalf("exemplar line %q, want %s... with trace_id %s, span_id %s", line, tc.series, tid, sid)
			}
		})
	}
}
