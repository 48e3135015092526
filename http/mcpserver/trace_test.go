package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
)

// headerClient sends header on every request.
type headerClient struct{ header string }

func (h headerClient) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.header != "" {
		r = r.Clone(r.Context())
		r.Header.Set("traceparent", h.header)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraceThroughCallPath: with tracing on, a tools/call through /mcp, the gateway and the server's actor to a
// streamable HTTP backend is one trace continuing the client's (from the request's _meta, or else from its HTTP
// header): the /mcp server span, gateway.call below it and the backend's client span below that, whose context the
// backend receives as its traceparent header and in _meta. A tool result with isError marks the three spans
// tool_error. (The same path exported to a real Jaeger: cmd/aggregator's TestTraceThroughJaeger.)
func TestTraceThroughCallPath(t *testing.T) {
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

	var mu sync.Mutex
	var gotHeader, gotMeta string
	backend := mcp.NewServer(&mcp.Implementation{Name: "backend", Version: "1"}, nil)
	record := func(r *mcp.CallToolRequest) {
		mu.Lock()
		defer mu.Unlock()
		gotMeta, _ = r.Params.Meta["traceparent"].(string)
		gotHeader = r.Extra.Header.Get("traceparent")
	}
	backend.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(r)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	backend.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(r)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	t.Cleanup(hs.Close)
	r := newRig(t)
	r.register(t, "be", map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	waitFor(t, "be routable", func() bool { _, ok := r.sys.Routes().Tool("be.fail"); return ok })

	const tid, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const tp0 = "00-" + tid + "-" + parent + "-01"
	for _, tc := range []struct {
		name, tool     string
		header, meta   string
		wantToolError  bool
		wantParentSpan string
	}{
		{"context in _meta", "be__echo", "00-" + tid + "-1111111111111111-01", tp0, false, parent},
		{"context in the HTTP header", "be__echo", tp0, "", false, parent},
		{"tool error", "be__fail", "", tp0, true, parent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
			sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp",
				HTTPClient: &http.Client{Transport: headerClient{tc.header}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			params := &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}}
			if tc.meta != "" {
				params.Meta = mcp.Meta{"traceparent": tc.meta}
			}
			before := len(rec.Ended())
			res, err := sess.CallTool(context.Background(), params)
			if err != nil || res.IsError != tc.wantToolError {
				t.Fatalf("call: %v %+v", err, res)
			}
			spans := rec.Ended()[before:]
			find := func(name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
				t.Helper()
				for _, s := range spans {
					if s.Name() == name && s.SpanKind() == kind && s.SpanContext().TraceID().String() == tid {
						return s
					}
				}
				t.Fatalf("no %v span %q in trace %s", kind, name, tid)
				return nil
			}
			in := find("tools/call "+tc.tool, trace.SpanKindServer)
			gw := find("gateway.call", trace.SpanKindInternal)
			cs := find("tools/call "+tc.tool[len("be__"):], trace.SpanKindClient)
			// The wait in the server actor's mailbox, from the gateway's send to the actor's turn.
			if mb := find("server_actor.mailbox", trace.SpanKindInternal); mb.Parent().SpanID() != gw.SpanContext().SpanID() ||
				mb.StartTime().Before(gw.StartTime()) || mb.EndTime().After(cs.StartTime()) {
				t.Errorf("mailbox span: parent %v (want the gateway's %v), %v to %v (gateway from %v, backend call from %v)",
					mb.Parent().SpanID(), gw.SpanContext().SpanID(), mb.StartTime(), mb.EndTime(), gw.StartTime(), cs.StartTime())
			}
			if in.Parent().SpanID().String() != tc.wantParentSpan || gw.Parent().SpanID() != in.SpanContext().SpanID() ||
				cs.Parent().SpanID() != gw.SpanContext().SpanID() {
				t.Errorf("parent links: /mcp <- %v, gateway <- %v (want %v), client <- %v (want %v)", in.Parent().SpanID(),
					gw.Parent().SpanID(), in.SpanContext().SpanID(), cs.Parent().SpanID(), gw.SpanContext().SpanID())
			}
			want := "00-" + tid + "-" + cs.SpanContext().SpanID().String() + "-01"
			mu.Lock()
			h, m := gotHeader, gotMeta
			mu.Unlock()
			if h != want || m != want {
				t.Errorf("backend got header %q, _meta %q; want %q", h, m, want)
			}
			for _, s := range []sdktrace.ReadOnlySpan{in, gw, cs} {
				failed := s.Status().Code == codes.Error
				var errType string
				for _, kv := range s.Attributes() {
					if kv.Key == "error.type" {
						errType = kv.Value.Emit()
					}
				}
				if failed != tc.wantToolError || tc.wantToolError && errType != telemetry.ToolErrorType {
					t.Errorf("%s: status %v error.type %q", s.Name(), s.Status(), errType)
				}
			}
		})
	}
}
