package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/internal/telemetry/telemetrytest"
)

// lockedBuffer is a log sink safe for the handler's goroutines.
type lockedBuffer struct{ syncbuf.Buffer }

// accessLines are the access lines logged, decoded.
func (l *lockedBuffer) accessLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "http request" {
			out = append(out, m)
		}
	}
	return out
}

// traceHeader sends a traceparent header on every request.
type traceHeader string

func (h traceHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", string(h))
	return http.DefaultTransport.RoundTrip(r)
}

// TestAccessLogTraced: with tracing on, each request to the MCP listener is a server span "{method} {route}"
// continuing the caller's traceparent header, and its access line carries that span's trace_id and span_id; the
// MCP request's own span (telemetry.ServerMiddleware) is its child; a 5xx answer fails the span. Off, the line has
// neither and the handler sees the caller's headers unchanged.
func TestAccessLogTraced(t *testing.T) {
	const tid, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const tp = "00-" + tid + "-" + parent + "-01"
	route := func(p string) string {
		if p == "/mcp" {
			return "/mcp"
		}
		return "unmatched"
	}
	var logs lockedBuffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&logs, nil)))

	t.Run("off", func(t *testing.T) {
		var seen string
		h := AccessLog(logger, "mcp", route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = r.Header.Get("traceparent")
		}))
		req := httptest.NewRequest("GET", "/elsewhere", nil)
		req.Header.Set("traceparent", tp)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if seen != tp {
			t.Errorf("the handler saw traceparent %q, want the caller's", seen)
		}
		lines := logs.accessLines(t)
		if l := lines[len(lines)-1]; l["trace_id"] != nil || l["span_id"] != nil {
			t.Errorf("tracing off, the access line has trace ids: %v", l)
		}
	})

	rec := telemetrytest.Record(t)
	srv := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	srv.AddReceivingMiddleware(telemetry.ServerMiddleware)
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", sdk)
	mux.HandleFunc("/broken", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	hs := httptest.NewServer(AccessLog(logger, "mcp", route, mux))
	t.Cleanup(hs.Close)

	t.Run("mcp call", func(t *testing.T) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
		sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp",
			HTTPClient: &http.Client{Transport: traceHeader(tp)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := len(rec.Ended())
		if _, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		sess.Close()
		// The client may have its answer before the request's handler returned (and its span ended): wait for it.
		var call, in sdktrace.ReadOnlySpan
		for deadline := time.Now().Add(5 * time.Second); in == nil; time.Sleep(10 * time.Millisecond) {
			httpSpans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended()[before:] {
				switch {
				case s.Name() == "POST /mcp" && s.SpanKind() == trace.SpanKindServer:
					httpSpans[s.SpanContext().SpanID()] = s
				case s.Name() == "tools/call echo":
					call = s
				}
			}
			if call != nil {
				in = httpSpans[call.Parent().SpanID()]
			}
			if in == nil && time.Now().After(deadline) {
				t.Fatalf("no tool call span (%v) below a POST /mcp span", call != nil)
			}
		}
		if in.Parent().SpanID().String() != parent || in.SpanContext().TraceID().String() != tid {
			t.Errorf("POST /mcp continues %v/%v, want the caller's %s/%s", in.SpanContext().TraceID(), in.Parent().SpanID(), tid, parent)
		}
		if telemetrytest.Attr(in, "http.route") != "/mcp" || telemetrytest.Attr(in, "http.response.status_code") != "200" {
			t.Errorf("POST /mcp attributes %v", in.Attributes())
		}
		// The line is written just after the span ends.
		for deadline, found := time.Now().Add(5*time.Second), false; !found; time.Sleep(10 * time.Millisecond) {
			for _, l := range logs.accessLines(t) {
				if l["span_id"] == in.SpanContext().SpanID().String() {
					found = l["trace_id"] == tid && l["route"] == "/mcp"
				}
			}
			if !found && time.Now().After(deadline) {
				t.Fatal("no access line with the span's trace_id and span_id")
			}
		}
	})

	t.Run("5xx", func(t *testing.T) {
		before := len(rec.Ended())
		resp, err := http.Get(hs.URL + "/broken")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		spans := rec.Ended()[before:]
		if len(spans) != 1 || spans[0].Name() != "GET unmatched" || spans[0].Status().Code != codes.Error ||
			telemetrytest.Attr(spans[0], "error.type") != "500" {
			t.Fatalf("spans %v, want one failed GET unmatched", spans)
		}
		lines := logs.accessLines(t)
		if l := lines[len(lines)-1]; l["trace_id"] != spans[0].SpanContext().TraceID().String() {
			t.Errorf("the line's trace_id %v, want the span's", l["trace_id"])
		}
	})
}
