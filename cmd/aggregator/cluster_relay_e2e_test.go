package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// askingBackend is a go-sdk streamable HTTP backend whose tool "ask" asks its client for a name (elicitation).
func askingBackend(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action + ":" + fmt.Sprint(res.Content["name"])}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestClusterRelayAcrossNodes: a client connected to one node calls a tool of a server whose session lives on the
// other node; the backend's elicitation crosses back to the calling client (the relay actor's PID travels in the
// call, RelayRequest/RelayReply are protobuf), and the answer reaches the backend. Both protocol revisions: a
// 2025-11-25 client is asked on its session, a 2026-07-28 client by round trip.
func TestClusterRelayAcrossNodes(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i])}
	})
	if code, body := nodes[0].do("POST", "/servers", map[string]any{"name": "asker", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": askingBackend(t), "allow_insecure_http": true}}); code != 201 {
		t.Fatalf("register: %d %v", code, body)
	}
	var caller *clusterNode
	waitFor(t, 30*time.Second, "one node holding asker's session", func() bool {
		for i, n := range nodes {
			if s, ok := n.backendSessions(t); ok && s["asker"] {
				caller = nodes[1-i]
				return true
			}
		}
		return false
	})
	waitFor(t, 30*time.Second, "asker CONNECTED as the other node sees it", func() bool { return caller.statuses(t)["asker"] == "CONNECTED" })
	for _, version := range []string{actors.ProtocolVersion, "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cl := mcp.NewClient(&mcp.Implementation{Name: "far", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "far-" + version}}, nil
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sess, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: caller.mcp + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			var got string
			waitFor(t, 20*time.Second, "the tool on the caller's endpoint", func() bool {
				res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}})
				if err != nil || len(res.Content) == 0 {
					return false
				}
				got = res.Content[0].(*mcp.TextContent).Text
				return !res.IsError
			})
			if got != "accept:far-"+version {
				t.Fatalf("elicitation across nodes: %q", got)
			}
		})
	}
}
