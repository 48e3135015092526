package actors_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// TestMaxToolsPerServer: a server listing more tools than MaxToolsPerServer keeps the first ones in listing order
// (1,000+ are supported; the cap is configurable).
func TestMaxToolsPerServer(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxToolsPerServer = 1100
	r := newRig(t, cfg)
	_, url := manyTools(t, 1250)
	s := r.register("capped", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	waitRoutes(t, r.sys, 60*time.Second, "the first 1100 tools", func(rt *routing.RouteTable) bool {
		return hasTool("capped.tool_0000")(rt) && hasTool("capped.tool_1099")(rt)
	})
	if hasTool("capped.tool_1100")(r.sys.Routes()) || hasTool("capped.tool_1249")(r.sys.Routes()) {
		t.Fatal("tools past the cap were kept")
	}
	if got, _ := r.store.GetServer(context.Background(), s.ID); got.ToolCount != 1100 {
		t.Fatalf("tool_count %d, want the cap 1100", got.ToolCount)
	}
	if actors.DefaultConfig().MaxToolsPerServer != 5000 {
		t.Fatal("default cap is 5000")
	}
}
