package mcpproxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/telemetry/telemetrytest"
	"github.com/mcpgw/aggregator/persistence"
)

// tracedBackend is a streamable HTTP backend with a tool echo (and fail, a tool error) and a prompt greet that
// record the traceparent of each request's _meta and of the HTTP request that carried it ("header:" first).
func tracedBackend(t *testing.T) (url string, metas func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	record := func(m mcp.Meta, extra *mcp.RequestExtra) {
		tp, _ := m["traceparent"].(string)
		mu.Lock()
		seen = append(seen, tp, "header:"+extra.Header.Get("traceparent"))
		mu.Unlock()
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(r.Params.Meta, r.Extra)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(r.Params.Meta, r.Extra)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := r.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?", RequestedSchema: map[string]any{"type": "object"}})
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil
		})
	srv.AddPrompt(&mcp.Prompt{Name: "greet"}, func(_ context.Context, r *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		record(r.Params.Meta, r.Extra)
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestProxyTraced: with tracing on, each request to /mcp/servers/{name} is a server span continuing the client's
// trace (from _meta), and a request the proxy forwards (tools/call, prompts/get) is a client span below it whose
// context the backend receives in _meta, in place of the client's; a tool result with isError marks both failed.
func TestProxyTraced(t *testing.T) {
	rec := telemetrytest.Record(t)
	url, metas := tracedBackend(t)
	r := newRig(t, mcpproxy.Options{})
	r.register("traced", persistence.TransportHTTP, map[string]any{"base_url": url})
	cs := r.connect("traced", nil)

	const tid, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	meta := mcp.Meta{"traceparent": "00-" + tid + "-" + parent + "-01"}
	for _, tc := range []struct {
		name, in, out string // the server span's and the client span's names
		do            func() error
		toolError     bool
	}{
		{"tools/call", "tools/call echo", "tools/call echo", func() error {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}, Meta: meta})
			return err
		}, false},
		{"tool error", "tools/call fail", "tools/call fail", func() error {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}, Meta: meta})
			return err
		}, true},
		{"prompts/get", "prompts/get greet", "prompts/get greet", func() error {
			_, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "greet", Meta: meta})
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, seenBefore := len(rec.Ended()), len(metas())
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			var in, out sdktrace.ReadOnlySpan
			for _, s := range rec.Ended()[before:] {
				if s.SpanContext().TraceID().String() != tid {
					continue
				}
				switch {
				case s.Name() == tc.in && s.SpanKind() == trace.SpanKindServer:
					in = s
				case s.Name() == tc.out && s.SpanKind() == trace.SpanKindClient:
					out = s
				}
			}
			if in == nil || out == nil {
				t.Fatalf("spans in trace %s: server %v, client %v", tid, in != nil, out != nil)
			}
			if in.Parent().SpanID().String() != parent || out.Parent().SpanID() != in.SpanContext().SpanID() {
				t.Errorf("parents: server span <- %v (want the client's %s), client span <- %v (want %v)",
					in.Parent().SpanID(), parent, out.Parent().SpanID(), in.SpanContext().SpanID())
			}
			if in.Attributes() == nil || telemetrytest.Attr(in, "mcp.session.id") != cs.ID() {
				t.Errorf("server span mcp.session.id %q, want %q", telemetrytest.Attr(in, "mcp.session.id"), cs.ID())
			}
			if got := telemetrytest.Attr(out, "aggregator.server.name"); got != "traced" {
				t.Errorf("client span aggregator.server.name %q", got)
			}
			seen := metas()
			want := "00-" + tid + "-" + out.SpanContext().SpanID().String() + "-01"
			// Only _meta: the proxy's upstream session (actors' proxy actor) sends its HTTP requests without the
			// call's context, so no traceparent header (README, Traces).
			if len(seen) != seenBefore+2 || seen[len(seen)-2] != want {
				t.Errorf("the backend's traceparents (_meta, header) %v, want %q in _meta", seen[seenBefore:], want)
			}
			for _, s := range []sdktrace.ReadOnlySpan{in, out} {
				if failed := s.Status().Code == codes.Error; failed != tc.toolError {
					t.Errorf("%v span status %v, want failed: %v", s.SpanKind(), s.Status(), tc.toolError)
				}
			}
		})
	}
}

// TestProxyRelayTraced: a backend's request to the client during a traced call through the per-server endpoint
// (here an elicitation) is a client span below the call's server span, with the client's session id.
func TestProxyRelayTraced(t *testing.T) {
	rec := telemetrytest.Record(t)
	url, _ := tracedBackend(t)
	r := newRig(t, mcpproxy.Options{})
	r.register("traced", persistence.TransportHTTP, map[string]any{"base_url": url})
	cs := r.connect("traced", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	const tid, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{},
		Meta: mcp.Meta{"traceparent": "00-" + tid + "-" + parent + "-01"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	var in, relayed sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == "tools/call ask" && s.SpanKind() == trace.SpanKindServer:
			in = s
		case s.Name() == "elicitation/create":
			relayed = s
		}
	}
	if in == nil || relayed == nil {
		t.Fatalf("spans: server %v, relayed %v", in != nil, relayed != nil)
	}
	if relayed.Parent().SpanID() != in.SpanContext().SpanID() || relayed.SpanKind() != trace.SpanKindClient {
		t.Errorf("the relayed request: %v span below %v, want a client span below the call's %v", relayed.SpanKind(),
			relayed.Parent().SpanID(), in.SpanContext().SpanID())
	}
	if got := telemetrytest.Attr(relayed, "mcp.session.id"); got != cs.ID() {
		t.Errorf("mcp.session.id %q, want %q", got, cs.ID())
	}
}
