package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkCallPath is one tools/call of an echo tool that does no work (the tool of cmd/mcp-echo-backend: the raw
// handler form, no schema validation) by a go-sdk client over streamable HTTP on loopback, in one process: straight
// to the backend ("direct"), and through /mcp, the gateway and the server's actor, by a client of each protocol
// revision. Everything runs in the benchmark's process, so allocs/op and B/op count the client's and the backend's
// share too: the aggregator's own share of a call is a path's figure minus direct's. Those counts do not move with
// the machine's load, where the wall time does (read ns/op only on a quiet machine).
func BenchmarkCallPath(b *testing.B) {
	backend := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":true}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	b.Cleanup(hs.Close)

	// With metrics, as the daemon runs: ours, and protoactor's instruments when MCP_AGGREGATOR_ACTOR_METRICS=true
	// asks for them (off by default, as in the daemon).
	m := metrics.New(nil)
	deps := actors.Deps{Config: actors.DefaultConfig(), Metrics: m}
	if os.Getenv("MCP_AGGREGATOR_ACTOR_METRICS") == "true" {
		meters, err := m.ActorMeterProvider()
		if err != nil {
			b.Fatal(err)
		}
		otel.SetMeterProvider(meters)
		deps.MeterProvider = meters
	}
	r := newRigWith(b, deps, mcpserver.Options{Metrics: m})
	r.register(b, "echo", map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	waitFor(b, "echo routable", func() bool { _, ok := r.sys.Routes().Tool("echo.echo"); return ok })

	args := map[string]any{"message": "hello"}
	const want = `{"message":"hello"}`
	for _, p := range []struct{ name, url, tool, version string }{
		{"direct", hs.URL, "echo", actors.ProtocolVersion},
		{"mcp/" + actors.ProtocolVersion, r.mux.URL + "/mcp", "echo__echo", actors.ProtocolVersion},
		{"mcp/" + mcpserver.ModernProtocol, r.mux.URL + "/mcp", "echo__echo", mcpserver.ModernProtocol},
	} {
		cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: p.version})
		if err != nil {
			b.Fatal(err)
		}
		params := &mcp.CallToolParams{Name: p.tool, Arguments: args}
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			before, n := mcpserver.FastCalls(r.endpoint), 0
			cpu := processCPU(b)
			for b.Loop() {
				res, err := sess.CallTool(context.Background(), params)
				if err != nil || res.IsError || text(res) != want {
					b.Fatalf("%s: %v %+v", p.tool, err, res)
				}
				n++
			}
			// The process's CPU time (user and system, every goroutine: client, daemon and backend) per call: unlike
			// ns/op it counts what a call costs the machine, not how long one caller waits, and it moves far less with
			// the machine's load. The daemon's CPU per call is a path's figure minus direct's.
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(n), "cpu-ns/op")
			// The share of the calls the endpoint's fast path served (fastcall.go, fastcall_modern.go).
			b.ReportMetric(float64(mcpserver.FastCalls(r.endpoint)-before)/float64(n), "fast/op")
		})
		sess.Close()
	}
}

// processCPU is the CPU time the process has used so far (user and system), in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
