package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// BenchmarkSystemSearch10k measures System.Search, the path of POST /api/v1/search and search_aggregated_tools,
// over about 10,000 real tool definitions: the 527 LiveMCPBench tools served by 19 go-sdk backends, discovered,
// stored and indexed by the daemon's own actors; the 94 LiveMCPBench tasks are the queries.
func BenchmarkSystemSearch10k(b *testing.B) {
	set := loadQualitySet(b, "livemcpbench", 1, foldMaxTools, "")
	tools, queries := set.tools, set.queries
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "agg.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cfg := actors.DefaultConfig()
	cfg.MaxServers = 100
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	}()
	const backends = 19
	for i := 0; i < backends; i++ {
		srv := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1"}, nil)
		for _, t := range tools {
			schema := t.InputSchema
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			srv.AddTool(&mcp.Tool{Name: t.Server + "_" + t.Name, Description: t.Description, InputSchema: schema},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{}, nil
				})
		}
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		defer hs.Close()
		raw, _ := json.Marshal(map[string]string{"base_url": hs.URL})
		if _, err := sys.Register(context.Background(), actors.RegisterRequest{Name: fmt.Sprintf("fixture-%02d", i),
			TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true}); err != nil {
			b.Fatal(err)
		}
	}
	want := backends * len(tools)
	start := time.Now()
	for {
		total, _ := sys.Routes().ToolCounts()
		res, err := sys.Search(context.Background(), actors.SearchRequest{Query: queries[0].Query, IncludeExternal: true,
			Limit: 10, Strategy: actors.StrategyDirect})
		if total >= want && err == nil && res.ServersSearched == backends && res.ToolsSearched >= want && sys.IndexedTools() >= want {
			break
		}
		if time.Since(start) > 3*time.Minute {
			b.Fatalf("only %d of %d tools routable", total, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.ReportMetric(float64(want), "tools")
	for _, strategy := range []string{actors.StrategyDirect, actors.StrategyHierarchical} {
		b.Run(strategy, func(b *testing.B) {
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, q := range queries {
					t0 := time.Now()
					if _, err := sys.Search(context.Background(), actors.SearchRequest{Query: q.Query, IncludeExternal: true,
						Limit: 10, Strategy: strategy, SkillThreshold: 0.4, ToolThreshold: 0.25}); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
		})
	}
}
