package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/loadgen"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// TestMain lets the test binary be the Go floor's process, as the program is (main).
func TestMain(m *testing.M) {
	if serve, listen, target, ok := floorCommand(os.Args[1:]); ok {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := serve(ctx, listen, target); err != nil {
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// TestFloorsPassCalls: an MCP session through each floor reaches the backend's echo tool, both ways (the call's
// SSE answer comes back through the proxy), and the floor's process is stopped with the peer.
func TestFloorsPassCalls(t *testing.T) {
	backend := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	t.Cleanup(hs.Close)
	url := hs.URL + "/mcp"

	for _, floor := range floors() {
		t.Run(floor.name, func(t *testing.T) {
			if floor.name == floorHAProxy {
				peertest.HAProxyBinary(t) // skipped without it (failed under CI)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o := options{scratch: t.TempDir()}
			sess, stop, err := startPeer(ctx, o, floor, url, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if err := checkMCPEcho(ctx, sess, "echo"); err != nil {
				t.Fatal(err)
			}
			call := loadgen.MCPCaller(sess, "echo", echoMessage)
			if res := loadgen.Closed(call, 4, 40, 30*time.Second, 10*time.Second); res.Errs != 0 || len(res.Lat) != 40 {
				t.Fatalf("40 calls by 4 callers through %s: %d answered, %d errors (%v)", floor.name, len(res.Lat), res.Errs, res.LastErr)
			}
		})
	}
}

func TestFloorCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{reverseProxyCommand, "127.0.0.1:1", "http://127.0.0.1:2/mcp"}, true},
		{[]string{fastProxyCommand, "127.0.0.1:1", "http://127.0.0.1:2/mcp"}, true},
		{[]string{reverseProxyCommand, " ", "http://x"}, false},
		{[]string{fastProxyCommand, "127.0.0.1:1"}, false},
		{[]string{"-rounds", "1", "x"}, false},
		{nil, false},
	} {
		if _, _, _, ok := floorCommand(tc.args); ok != tc.ok {
			t.Errorf("floorCommand(%q) = %v, want %v", tc.args, ok, tc.ok)
		}
	}
	for _, serve := range []func(context.Context, string, string) error{serveReverseProxy, serveFastProxy} {
		if err := serve(context.Background(), "127.0.0.1:0", "ftp://x"); err == nil || !strings.Contains(err.Error(), "http://") {
			t.Fatalf("a target that is not http:// is refused: %v", err)
		}
	}
}
