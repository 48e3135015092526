package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/rankeval"
	"github.com/mcpgw/aggregator/persistence"
)

// fixtureBackend serves n real tool definitions of the development sets (LiveMCPBench and BFCL, cycled from
// offset, names made unique), as a go-sdk streamable HTTP server.
func fixtureBackend(b *testing.B, tools []rankeval.Tool, offset, n int) string {
	b.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1"}, nil)
	for i := range n {
		tl := tools[(offset+i)%len(tools)]
		var schema any = map[string]any{"type": "object"}
		if len(tl.InputSchema) > 0 && string(tl.InputSchema) != "null" {
			var m map[string]any
			if json.Unmarshal(tl.InputSchema, &m) == nil && m["type"] == "object" {
				schema = m
			}
		}
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("%s_%d", tl.Name, offset+i), Description: tl.Description, InputSchema: schema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	b.Cleanup(hs.Close)
	return hs.URL
}

// BenchmarkToolsList10k is tools/list through /mcp by a go-sdk client at 10,000 real tool definitions (10 servers of
// 1,000, cycled from both development sets), with the default budget of 20,000 tokens and without one (_meta hint
// 0: every page). It reports the tokens, tools and bytes one listing serves.
func BenchmarkToolsList10k(b *testing.B) {
	const servers, perServer = 10, 1000
	var tools []rankeval.Tool
	for _, set := range []string{"livemcpbench", "bfcl"} {
		tools = append(tools, rankeval.Load(b, set).Tools...)
	}
	r := newRig(b, mcpserver.Options{})
	for s := range servers {
		// One server at a time, and again when a busy machine's ask timed out before the registration was stored.
		name := fmt.Sprintf("s%02d", s)
		raw, _ := json.Marshal(map[string]any{"base_url": fixtureBackend(b, tools, s*perServer, perServer)})
		waitLong(b, name+" registered", func() bool {
			if _, err := r.sys.Register(context.Background(), actors.RegisterRequest{Name: name, TransportType: persistence.TransportHTTP,
				ConnectionConfig: raw, AutoConnect: true}); err == nil {
				return true
			}
			_, err := r.store.GetServerByName(context.Background(), name)
			return err == nil
		})
		waitLong(b, name+"'s tools routable", func() bool { total, _ := r.sys.Routes().ToolCounts(); return total == (s+1)*perServer })
	}
	waitLong(b, "10,000 tools routable", func() bool { total, _ := r.sys.Routes().ToolCounts(); return total == servers*perServer })
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	list := func(meta mcp.Meta) []*mcp.Tool {
		var all []*mcp.Tool
		cursor := ""
		for {
			res, err := s.ListTools(context.Background(), &mcp.ListToolsParams{Meta: meta, Cursor: cursor})
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, res.Tools...)
			if res.NextCursor == "" {
				return all
			}
			cursor = res.NextCursor
		}
	}
	waitLong(b, "every tool exposed", func() bool { return len(list(mcp.Meta{mcpserver.TokenBudgetMetaKey: 0})) >= servers*perServer })
	for _, tc := range []struct {
		name string
		meta mcp.Meta
	}{{"budget-on", nil}, {"budget-off", mcp.Meta{mcpserver.TokenBudgetMetaKey: 0}}} {
		b.Run(tc.name, func(b *testing.B) {
			var got []*mcp.Tool
			for b.Loop() {
				got = list(tc.meta)
			}
			raw, _ := json.Marshal(got)
			b.ReportMetric(float64(listedTokens(got)), "tokens")
			b.ReportMetric(float64(len(got)), "tools")
			b.ReportMetric(float64(len(raw)), "json-bytes")
		})
	}
}

// waitLong is waitFor with room for registering 10,000 tools on a busy machine.
func waitLong(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Second)
	}
}
