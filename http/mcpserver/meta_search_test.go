package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
)

// weatherBackend is an in-process go-sdk server whose two tools answer with their own name.
func weatherBackend(t *testing.T, city string) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "weather-" + city, Version: "1"}, nil)
	for _, tl := range []struct{ name, desc string }{
		{"forecast", "Get the weather forecast for " + city + ": temperature, rain, snow and wind"},
		{"alerts", "Severe weather alerts, storms and heat warnings for " + city},
	} {
		srv.AddTool(&mcp.Tool{Name: tl.name, Description: tl.desc, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: city + " " + tl.name}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestSearchToolFollowsTheCatalogue: search_aggregated_tools' description, as a go-sdk client lists it, names what
// the catalogue holds (tool and server counts, the servers, the main skills) and follows servers coming and going,
// announced by tools/list_changed and throttled in a burst of registrations; its results carry the alias to call,
// and calling it works.
func TestSearchToolFollowsTheCatalogue(t *testing.T) {
	ctx := context.Background()
	emb := embed.NewHashed(0)
	builtin, err := classify.NewBuiltin(ctx, emb, classify.DefaultTaxonomy(),
		func(t classify.Tool) string { return embed.ToolText(t.Name, t.Description, t.InputSchema) })
	if err != nil {
		t.Fatal(err)
	}
	st, sys := startSystem(t, actors.Deps{Config: actors.DefaultConfig(), Classifier: builtin,
		Search: &actors.SearchDeps{Embedder: emb, Skills: builtin.SkillSpace}})
	ep := mcpserver.New(sys, st, mcpserver.Options{SearchFirst: true})
	t.Cleanup(ep.Close)
	hs := httptest.NewServer(ep.StreamableHandler())
	t.Cleanup(hs.Close)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL})
	describe := func() string {
		for tool, err := range c.sess.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if tool.Name == "search_aggregated_tools" {
				return tool.Description
			}
		}
		t.Fatal("search_aggregated_tools not listed")
		return ""
	}
	if d := describe(); !strings.Contains(d, "No tools are connected yet") {
		t.Fatalf("description of an empty catalogue: %q", d)
	}

	cities := []string{"paris", "oslo", "lima", "rome", "kyiv", "quito"}
	ids := map[string]string{}
	start := time.Now()
	for _, city := range cities {
		raw, _ := json.Marshal(map[string]string{"base_url": weatherBackend(t, city)})
		srv, err := sys.Register(ctx, actors.RegisterRequest{Name: city, TransportType: persistence.TransportHTTP,
			ConnectionConfig: raw, AutoConnect: true})
		if err != nil {
			t.Fatal(err)
		}
		ids[city] = srv.ID
		// One server after the other, each routable before the next: every step changes the description, so
		// without the throttle each would be its own notification (the go-sdk only merges changes 10 ms apart).
		want := 2 * len(ids)
		waitFor(t, city+"'s tools routable", func() bool { return len(sys.Routes().Callable()) == want })
	}
	// On a loaded CI machine (every package's tests at once under -race) the description once had not reached
	// this within waitFor's 30 s, and what it showed was not recorded: this wait is longer and says what it saw.
	var d string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(30 * time.Millisecond) {
		d = describe()
		if strings.Contains(d, "12 tools of 6 servers") && strings.Contains(d, "Main skills: Weather (") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the description never named the whole catalogue: %q", d)
		}
	}
	elapsed := time.Since(start)
	for _, city := range cities {
		if !strings.Contains(d, city+" (2)") {
			t.Errorf("description does not name server %s: %q", city, d)
		}
	}
	changed := 0
	waitFor(t, "notifications/tools/list_changed", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		changed = c.changed
		return changed > 0
	})
	// At most one update per second (describeEvery), the first at once: a burst is not one notification per server.
	if most := int(elapsed/time.Second) + 2; changed == 0 || changed > most {
		t.Errorf("%d tools/list_changed notifications in %v, want 1..%d", changed, elapsed, most)
	}

	res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: "search_aggregated_tools",
		Arguments: map[string]any{"query": "weather forecast for oslo"}})
	if err != nil || res.IsError {
		t.Fatalf("search: %v %s", err, text(res))
	}
	var out struct {
		Data struct {
			Tools []struct {
				Name  string `json:"name"`
				Alias string `json:"alias"`
			} `json:"tools"`
			Metadata map[string]any `json:"metadata"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(text(res)), &out); err != nil || len(out.Data.Tools) == 0 {
		t.Fatalf("search answer %s: %v", text(res), err)
	}
	top := out.Data.Tools[0]
	if top.Name != "oslo.forecast" || top.Alias != "oslo__forecast" || out.Data.Metadata["strategy_used"] != "hierarchical" {
		t.Fatalf("top hit %+v (%v), want oslo.forecast with alias oslo__forecast", top, out.Data.Metadata)
	}
	called, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: top.Alias, Arguments: map[string]any{}})
	if err != nil || called.IsError || text(called) != "oslo forecast" {
		t.Fatalf("calling the alias %s: %v %s", top.Alias, err, text(called))
	}

	for _, city := range cities[1:] {
		if err := sys.Remove(ctx, ids[city]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the description follows the removals", func() bool {
		d = describe()
		return strings.Contains(d, "2 tools of 1 servers: paris (2)")
	})
	if strings.Contains(d, fmt.Sprintf("%s (2)", "oslo")) {
		t.Errorf("removed server still described: %q", d)
	}
}
