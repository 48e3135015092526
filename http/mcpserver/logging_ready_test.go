package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
)

// TestBackendLogsReachACallMadeAtConnect: a go-sdk backend sends no log message before its client set a level, and
// the aggregator sets it when the session opens; a call made the moment the server's tools are routable (CONNECTED)
// has its log messages relayed, even from a backend slow to answer logging/setLevel.
func TestBackendLogsReachACallMadeAtConnect(t *testing.T) {
	r := newRig(t)
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow-level", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "log", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "working on it"})
		time.Sleep(100 * time.Millisecond) // the message is handled before the result (see roundtrip_test)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "logged"}}}, nil
	})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "logging/setLevel" {
				time.Sleep(time.Second)
			}
			return next(ctx, method, req)
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	var mu sync.Mutex
	var logs []string
	cl := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			logs = append(logs, req.Params.Data.(string))
			mu.Unlock()
		},
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	if err := sess.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	r.register(t, "slowlevel", map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := r.sys.Routes().Tool("slowlevel.log"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slowlevel's tool never routable")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "slowlevel__log", Arguments: map[string]any{}})
	if err != nil || text(res) != "logged" {
		t.Fatalf("call: %v %v", res, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), logs...)
		mu.Unlock()
		if len(got) > 0 && got[len(got)-1] == "working on it" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend's log message of a call made at CONNECTED never reached the client (got %q)", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
