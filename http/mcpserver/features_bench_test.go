package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkListFeatures50 lists prompts, resources and resource templates through /mcp with 50 backends behind it
// (go-sdk servers over streamable HTTP, each with 5 prompts, 5 resources and 2 templates): the listings are
// answered from the routing table, so the backends see no request while the loop runs (checked, and reported as
// backend-requests/op).
func BenchmarkListFeatures50(b *testing.B) {
	const servers = 50
	r := newRig(b)
	var backendLists atomic.Int64
	for i := range servers {
		srv := mcp.NewServer(&mcp.Implementation{Name: fmt.Sprintf("b%d", i), Version: "1"}, nil)
		for j := range 5 {
			srv.AddPrompt(&mcp.Prompt{Name: fmt.Sprintf("p%d", j), Description: "a prompt"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{}, nil
			})
			srv.AddResource(&mcp.Resource{URI: fmt.Sprintf("b%d://r/%d", i, j), Name: "r"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{}, nil
			})
		}
		for j := range 2 {
			srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: fmt.Sprintf("b%d://t%d/{x}", i, j), Name: "t"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{}, nil
			})
		}
		srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				switch method {
				case "prompts/list", "resources/list", "resources/templates/list":
					backendLists.Add(1)
				}
				return next(ctx, method, req)
			}
		})
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		b.Cleanup(hs.Close)
		r.register(b, fmt.Sprintf("b%d", i), map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	}
	waitFor(b, "every backend's prompts and resources routable", func() bool {
		rt := r.sys.Routes()
		return len(rt.Prompts()) == servers*5 && len(rt.Resources()) == servers*5 && len(rt.ResourceTemplates()) == servers*2
	})
	c := connectFeatures(b, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	waitFor(b, "the endpoint lists them", func() bool { return len(c.prompts(b)) == servers*5 })
	before := backendLists.Load()
	b.ResetTimer()
	for b.Loop() {
		if n := len(c.prompts(b)); n != servers*5 {
			b.Fatalf("prompts/list: %d", n)
		}
		if n := len(c.resources(b)); n != servers*5 {
			b.Fatalf("resources/list: %d", n)
		}
		if n := len(c.templates(b)); n != servers*2 {
			b.Fatalf("resources/templates/list: %d", n)
		}
	}
	b.StopTimer()
	asked := backendLists.Load() - before
	b.ReportMetric(float64(asked)/float64(b.N), "backend-requests/op")
	if asked != 0 {
		b.Fatalf("the backends were asked %d times while the endpoint listed", asked)
	}
}
