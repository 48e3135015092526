package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// record installs a tracer provider that records every span, and the W3C propagator, as OpenTelemetry's globals
// for the test (restored after it). Tests that call it do not run in parallel.
func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	return rec
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestReadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{"nothing set: off", nil, Config{}, ""},
		{"endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			Config{Enabled: true, Endpoint: "http://127.0.0.1:4318"}, ""},
		{"traces endpoint wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"},
			Config{Enabled: true, Endpoint: "http://b:4318/v1/traces"}, ""},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}, Config{}, ""},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"}, Config{}, ""},
		{"exporter otlp without endpoint: off", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, Config{}, ""},
		{"unknown exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, Config{}, "only otlp"},
		{"grpc protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, Config{}, "http/protobuf"},
		{"http/protobuf protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			Config{Enabled: true, Endpoint: "http://a:4318"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadConfig(env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ReadConfig = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestSetupOff: without an endpoint Setup installs nothing: the global provider's spans do not record and no
// trace context is written.
func TestSetupOff(t *testing.T) {
	tr, err := Setup(context.Background(), env(nil), Process{})
	if err != nil || tr.Enabled() {
		t.Fatalf("Setup = %v, %v; want off", tr.Enabled(), err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, span := Tracer().Start(context.Background(), "x")
	if span.IsRecording() {
		t.Fatal("a span records with tracing off")
	}
	if m := Inject(context.Background()); m != nil {
		t.Fatalf("Inject without a span = %v", m)
	}
}

// TestResourceFromEnv: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the defaults.
func TestResourceFromEnv(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "gw-east")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,service.version=override")
	res, err := Resource(context.Background(), Process{Version: "1.2.3", InstanceID: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[attribute.Key]string{}
	for _, kv := range res.Attributes() {
		got[kv.Key] = kv.Value.Emit()
	}
	for k, want := range map[attribute.Key]string{"service.name": "gw-east", "service.instance.id": "node-1",
		"deployment.environment.name": "test", "service.version": "override"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
}

func TestInjectExtract(t *testing.T) {
	record(t)
	ctx, span := Tracer().Start(context.Background(), "parent")
	defer span.End()
	m := Inject(ctx)
	if !strings.HasPrefix(m[TraceparentKey], "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()) {
		t.Fatalf("Inject = %v", m)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), m))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("Extract = %+v", got)
	}
	if Extract(ctx, nil) != ctx {
		t.Fatal("Extract of nothing changed the context")
	}
}

// backendServer is a go-sdk MCP server with a tool "echo" (its _meta back as text) and a tool "broken"
// (isError), served over streamable HTTP; headers receives each request's traceparent header.
func backendServer(t *testing.T, headers chan<- string) *httptest.Server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b, _ := json.Marshal(r.Params.Meta)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "broken", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}}}, nil
		})
	srv.AddReceivingMiddleware(ServerMiddleware)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headers != nil && r.Method == http.MethodPost {
			select {
			case headers <- r.Header.Get(TraceparentKey):
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs
}

// headerInjector puts the request context's trace context in the HTTP headers (what actors/backend's transport
// does for a backend session).
type headerInjector struct{}

func (headerInjector) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	otel.GetTextMapPropagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t *testing.T, url string, mw ...mcp.Middleware) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	c.AddSendingMiddleware(mw...)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: headerInjector{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

func find(spans []sdktrace.ReadOnlySpan, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name && s.SpanKind() == kind {
			return s
		}
	}
	return nil
}

// TestClientAndServerMiddleware: a traced call goes out with a client span whose context travels in the
// request's _meta and HTTP header; the backend's server span continues it, with the MCP attributes; a tool result
// with isError marks both spans tool_error; a request outside any trace makes no client span and carries nothing.
func TestClientAndServerMiddleware(t *testing.T) {
	rec := record(t)
	headers := make(chan string, 16)
	hs := backendServer(t, headers)
	cs := connect(t, hs.URL, ClientMiddleware("backend", "srv-1"))
	for len(headers) > 0 {
		<-headers // the handshake's (untraced: no header)
	}

	ctx, root := Tracer().Start(context.Background(), "root")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	client := find(rec.Ended(), "tools/call echo", trace.SpanKindClient)
	if client == nil {
		t.Fatalf("no client span; spans: %v", names(rec.Ended()))
	}
	if client.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatal("the client span is not the root's child")
	}
	server := find(rec.Ended(), "tools/call echo", trace.SpanKindServer)
	if server == nil || server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Fatalf("the backend's server span does not continue the client span: %v", server)
	}
	a := attrs(client)
	for k, want := range map[attribute.Key]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
		"gen_ai.operation.name": "execute_tool", "aggregator.server.name": "backend", "aggregator.server.id": "srv-1"} {
		if a[k] != want {
			t.Errorf("client span %s = %q, want %q", k, a[k], want)
		}
	}
	if a["mcp.session.id"] == "" || attrs(server)["mcp.session.id"] != a["mcp.session.id"] {
		t.Errorf("session ids: client %q, server %q", a["mcp.session.id"], attrs(server)["mcp.session.id"])
	}
	wantParent := "00-" + client.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if got := <-headers; got != wantParent {
		t.Errorf("traceparent header = %q, want %q", got, wantParent)
	}
	var meta map[string]any
	_ = json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &meta)
	if meta[TraceparentKey] != wantParent {
		t.Errorf("_meta = %v, want traceparent %q", meta, wantParent)
	}

	// isError: tool_error on both sides.
	ctx, root = Tracer().Start(context.Background(), "root2")
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "broken", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	root.End()
	n := 0
	for _, s := range rec.Ended() {
		if s.Name() == "tools/call broken" {
			n++
			if s.Status().Code != codes.Error || attrs(s)["error.type"] != ToolErrorType {
				t.Errorf("%v span of a tool error: status %v, error.type %q", s.SpanKind(), s.Status(), attrs(s)["error.type"])
			}
		}
	}
	if n != 2 {
		t.Errorf("%d spans of the failed call, want a client and a server span", n)
	}

	// Outside a trace: no client span, nothing carried (the backend's own span is a new root).
	for len(headers) > 0 {
		<-headers
	}
	before := len(rec.Ended())
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-headers; got != "" {
		t.Errorf("untraced call sent traceparent %q", got)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; strings.Contains(text, TraceparentKey) {
		t.Errorf("untraced call carried _meta %s", text)
	}
	for _, s := range rec.Ended()[before:] {
		if s.SpanKind() == trace.SpanKindClient {
			t.Errorf("client span %q outside a trace", s.Name())
		}
	}
}

// TestServerMiddlewareHeader: a request without _meta trace context continues the trace of its HTTP headers.
func TestServerMiddlewareHeader(t *testing.T) {
	rec := record(t)
	hs := backendServer(t, nil)
	cs := connect(t, hs.URL) // no client middleware: only the header carries the context
	ctx, root := Tracer().Start(context.Background(), "caller")
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	root.End()
	s := find(rec.Ended(), "tools/call echo", trace.SpanKindServer)
	if s == nil || s.Parent().SpanID() != root.SpanContext().SpanID() || !s.Parent().IsRemote() {
		t.Fatalf("server span does not continue the header's context: %v", s)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name()+"/"+s.SpanKind().String())
	}
	return out
}

func TestLogHandler(t *testing.T) {
	record(t)
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	log.Info("no span")
	ctx, span := Tracer().Start(context.Background(), "s")
	log.InfoContext(ctx, "in span")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if _, ok := first["trace_id"]; ok {
		t.Errorf("a record without a span has trace_id: %s", lines[0])
	}
	if second["trace_id"] != span.SpanContext().TraceID().String() || second["span_id"] != span.SpanContext().SpanID().String() || second["component"] != "x" {
		t.Errorf("record in a span: %s", lines[1])
	}
}

// TestRequestsWithoutParams: a request sent without params (a ping, a tools/call or prompts/get with none) has a
// nil pointer as its params; both middlewares pass it on without touching it (a call on it would crash the
// daemon), and still make its span.
func TestRequestsWithoutParams(t *testing.T) {
	rec := record(t)
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return &mcp.CallToolResult{}, nil }
	ctx, parent := Tracer().Start(context.Background(), "parent")
	defer parent.End()
	for _, tc := range []struct {
		method string
		req    mcp.Request
	}{
		{"ping", &mcp.ServerRequest[*mcp.PingParams]{}},
		{"tools/call", &mcp.CallToolRequest{}},
		{"prompts/get", &mcp.GetPromptRequest{}},
		{"resources/read", &mcp.ReadResourceRequest{}},
	} {
		t.Run(tc.method, func(t *testing.T) {
			before := len(rec.Ended())
			if _, err := ServerMiddleware(next)(context.Background(), tc.method, tc.req); err != nil {
				t.Fatal(err)
			}
			if _, err := ClientMiddleware("s", "id")(next)(ctx, tc.method, tc.req); err != nil {
				t.Fatal(err)
			}
			if _, err := Forward(ctx, "s", "id", tc.method, tc.req.GetParams(), func(context.Context) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			}); err != nil {
				t.Fatal(err)
			}
			want := 3
			if tc.method == "ping" {
				want = 1 // the client side makes no span of a ping
			}
			if got := len(rec.Ended()) - before; got != want {
				t.Errorf("%d spans, want %d", got, want)
			}
		})
	}
}
