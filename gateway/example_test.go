package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// Register a backend MCP server and call its tool through the use-case layer: the same steps REST's POST /servers
// and POST /api/v1/tools/call, and the MCP endpoint's add_mcp_server and tool calls, take. The backend is a real
// go-sdk server over streamable HTTP, the actor system and its store are the daemon's own.
func Example() {
	ctx := context.Background()

	// A backend with one tool.
	backend := mcp.NewServer(&mcp.Implementation{Name: "weather", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "forecast", Description: "Tomorrow's weather in a city",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ City string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Sunny in " + in.City}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	defer hs.Close()

	// The actor system over a store, and the gateway over the actor system.
	dir, _ := os.MkdirTemp("", "gateway-example")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "aggregator.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	system, err := actors.Start(ctx, actors.Deps{Config: actors.DefaultConfig(), Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = system.Shutdown(c)
	}()
	gw := gateway.New(system, gateway.Options{})

	// Register it; the gateway answers at once, the server connects meanwhile.
	cfg, _ := json.Marshal(map[string]any{"base_url": hs.URL, "allow_insecure_http": true})
	srv, _, err := gw.Register(ctx, gateway.RegisterRequest{Name: "weather", TransportType: persistence.TransportHTTP,
		ConnectionConfig: cfg, AutoConnect: true}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("registered", srv.Name)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, ok := gw.Routes().Tool("weather.forecast"); ok {
			break
		}
	}

	// Call its tool by its namespaced name; the result is the backend's, as the server's actor encoded it.
	res, err := gw.Call(ctx, gateway.CallRequest{Name: "weather.forecast", Arguments: json.RawMessage(`{"city":"Oslo"}`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("routed to", res.Call.Route.ServerName, "as", res.Call.Route.Tool)
	fmt.Println(string(res.Reply.ResultJson))

	// Output:
	// registered weather
	// routed to weather as forecast
	// {"content":[{"type":"text","text":"Sunny in Oslo"}]}
}
