package notifyorder_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/notifyorder"
)

// chattyServer has one tool, "chatty", that sends steps progress notifications and a log message, then answers.
func chattyServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "chatty"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Steps int `json:"steps"`
	}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= in.Steps; i++ {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
				Progress: float64(i), Total: float64(in.Steps)})
		}
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "done"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	return srv
}

// transports connect a client to a fresh chatty server; gate (nil: none) is put under the client's transport.
var transports = map[string]func(t *testing.T, g *notifyorder.Gate) mcp.Transport{
	"in-memory": func(t *testing.T, g *notifyorder.Gate) mcp.Transport {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := chattyServer().Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatalf("server connect: %v", err)
		}
		t.Cleanup(func() { _ = ss.Close() })
		if g == nil {
			return ct
		}
		return g.Transport(ct)
	},
	"streamable HTTP": func(t *testing.T, g *notifyorder.Gate) mcp.Transport {
		srv := chattyServer()
		ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(ts.Close)
		hc := &http.Client{}
		if g != nil {
			hc.Transport = g.RoundTripper(nil)
		}
		return &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc}
	},
	"SSE": func(t *testing.T, g *notifyorder.Gate) mcp.Transport {
		srv := chattyServer()
		ts := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(ts.Close)
		hc := &http.Client{}
		if g != nil {
			hc.Transport = g.RoundTripper(nil)
		}
		return &mcp.SSEClientTransport{Endpoint: ts.URL, HTTPClient: hc}
	},
}

// session connects a client whose progress and log handlers are slow (as a downstream write can be) and count
// what they handled.
func session(t *testing.T, tr mcp.Transport, g *notifyorder.Gate) (cs *mcp.ClientSession, progress, logs *atomic.Int32) {
	t.Helper()
	progress, logs = &atomic.Int32{}, &atomic.Int32{}
	client := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			time.Sleep(2 * time.Millisecond)
			progress.Add(1)
		},
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) {
			time.Sleep(2 * time.Millisecond)
			logs.Add(1)
		},
	})
	if g != nil {
		client.AddReceivingMiddleware(g.Middleware)
	}
	// The version the aggregator pins (actors.ProtocolVersion): logging/setLevel is per session there.
	cs, err := client.Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatalf("set level: %v", err)
	}
	return cs, progress, logs
}

// call runs chatty with a progress token and reports whether every notification of the call had been handled
// when the call returned.
func call(t *testing.T, cs *mcp.ClientSession, i int, progress, logs *atomic.Int32) bool {
	t.Helper()
	const steps = 5
	params := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{"steps": steps}}
	params.SetProgressToken(fmt.Sprintf("t%d", i))
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatalf("call %d: %v", i, err)
	}
	return progress.Load() == int32(steps*(i+1)) && logs.Load() == int32(i+1)
}

// TestGateKeepsOrder: with the gate, every notification a backend sent before a result has been handled when the
// call returns, over every kind of transport.
func TestGateKeepsOrder(t *testing.T) {
	for name, connect := range transports {
		t.Run(name, func(t *testing.T) {
			stopping, stop := context.WithCancel(context.Background())
			defer stop()
			g := notifyorder.New(stopping)
			cs, progress, logs := session(t, connect(t, g), g)
			for i := range 5 {
				if !call(t, cs, i, progress, logs) {
					t.Fatalf("after call %d: %d progress and %d log notifications handled, want %d and %d",
						i, progress.Load(), logs.Load(), 5*(i+1), i+1)
				}
			}
		})
	}
}

// TestGoSDKReordersWithoutGate is the reason the package exists: without the gate, the go-sdk client returns a call
// before it has handled the notifications sent before the result, over every kind of transport. When this test
// fails, the go-sdk keeps the order itself and the gate can go.
func TestGoSDKReordersWithoutGate(t *testing.T) {
	for name, connect := range transports {
		t.Run(name, func(t *testing.T) {
			cs, progress, logs := session(t, connect(t, nil), nil)
			overtaken := 0
			for i := range 10 {
				if !call(t, cs, i, progress, logs) {
					overtaken++
				}
				// Let the handlers catch up, so the next call starts from a known count.
				deadline := time.Now().Add(5 * time.Second)
				for (progress.Load() != int32(5*(i+1)) || logs.Load() != int32(i+1)) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			if overtaken == 0 {
				t.Fatal("no result overtook its notifications in 10 calls: check whether the go-sdk now keeps the order")
			}
			t.Logf("%d of 10 results overtook their notifications", overtaken)
		})
	}
}
