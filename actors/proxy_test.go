package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// proxyBackend is an in-process go-sdk MCP server over streamable HTTP whose tools exercise what a proxy session
// forwards: progress and log notifications right before a result, and sampling back to the client.
func proxyBackend(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "proxy-backend", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Message string `json:"message"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Message}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "chatty"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Steps int `json:"steps"`
	}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= in.Steps; i++ {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: float64(in.Steps)})
		}
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "done"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{res.Content}}, nil, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// proxyRig is an actor system on an embedded store with servers registered for proxy tests.
type proxyRig struct {
	t   *testing.T
	sys *actors.System
}

func newProxyRig(t *testing.T) *proxyRig {
	t.Helper()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	cfg := actors.DefaultConfig()
	cfg.ConnectionTimeout = 20 * time.Second
	cfg.RequestTimeout = 20 * time.Second
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg})
	if err != nil {
		t.Fatalf("start actors: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sys.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		st.Close()
	})
	return &proxyRig{t: t, sys: sys}
}

// add registers a server and, when auto, waits until the routing table shows it CONNECTED.
func (r *proxyRig) add(name, transport string, cfg map[string]any, auto bool) persistence.Server {
	r.t.Helper()
	raw, _ := json.Marshal(cfg)
	s, err := r.sys.Register(context.Background(), actors.RegisterRequest{Name: name, TransportType: transport, ConnectionConfig: raw, AutoConnect: auto})
	if err != nil {
		r.t.Fatalf("register %s: %v", name, err)
	}
	want := persistence.StatusDisconnected
	if auto {
		want = persistence.StatusConnected
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if e, ok := r.sys.Routes().Server(s.ID); ok && e.Status == want {
			return s
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("server %s not %s", name, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *proxyRig) open(name string, opts actors.ProxyOptions) *actors.ProxySession {
	r.t.Helper()
	p, err := r.sys.OpenProxySession(context.Background(), name, opts)
	if err != nil {
		r.t.Fatalf("open proxy session on %s: %v", name, err)
	}
	r.t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestOpenProxySessionRefusals(t *testing.T) {
	r := newProxyRig(t)
	url := proxyBackend(t)
	r.add("on", persistence.TransportHTTP, map[string]any{"base_url": url}, true)
	r.add("off", persistence.TransportHTTP, map[string]any{"base_url": url}, false)
	r.open("on", actors.ProxyOptions{MaxSessions: 1})

	tests := []struct {
		name, server string
		max          int
		check        func(error) bool
	}{
		{"unknown name", "nope", 0, func(err error) bool { return errors.Is(err, persistence.ErrNotFound) }},
		{"not connected", "off", 0, func(err error) bool {
			var ue *routing.UnavailableError
			return errors.As(err, &ue) && ue.Server.Name == "off" && ue.Server.Status == persistence.StatusDisconnected
		}},
		{"cap reached", "on", 1, func(err error) bool { return errors.Is(err, actors.ErrProxyLimit) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := r.sys.OpenProxySession(context.Background(), tc.server, actors.ProxyOptions{MaxSessions: tc.max})
			if err == nil {
				_ = p.Close()
				t.Fatal("opened")
			}
			if !tc.check(err) {
				t.Fatalf("wrong error: %v", err)
			}
		})
	}
}

// TestProxySessionForwards: requests reach the backend; its notifications reach the handlers before the result
// of the request they belong to; its sampling request is answered by the CreateMessage handler.
func TestProxySessionForwards(t *testing.T) {
	r := newProxyRig(t)
	r.add("backend", persistence.TransportHTTP, map[string]any{"base_url": proxyBackend(t)}, true)
	var progress, logs atomic.Int32
	closed := make(chan error, 1)
	p := r.open("backend", actors.ProxyOptions{
		ClientInfo:   &mcp.Implementation{Name: "downstream", Version: "9"},
		Capabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
		Handlers: actors.ProxyHandlers{
			Progress: func(context.Context, *mcp.ProgressNotificationParams) {
				time.Sleep(2 * time.Millisecond) // a slow downstream write must not let the result overtake it
				progress.Add(1)
			},
			Log: func(context.Context, *mcp.LoggingMessageParams) { logs.Add(1) },
			CreateMessage: func(_ context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
				return &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "sampled"}}}, nil
			},
			Closed: func(err error) { closed <- err },
		},
	})
	if got := p.InitializeResult().ServerInfo.Name; got != "proxy-backend" {
		t.Fatalf("server info %q", got)
	}
	ctx := context.Background()
	tools, err := p.ListTools(ctx)
	if err != nil || len(tools) != 3 {
		t.Fatalf("list tools: %v %d", err, len(tools))
	}
	if err := p.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatalf("set level: %v", err)
	}
	for i := range 5 {
		params := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{"steps": 5}}
		params.SetProgressToken(fmt.Sprintf("t%d", i))
		if _, err := p.CallTool(ctx, params); err != nil {
			t.Fatalf("call: %v", err)
		}
		if n, l := progress.Load(), logs.Load(); n != int32(5*(i+1)) || l != int32(i+1) {
			t.Fatalf("after call %d: %d progress and %d log notifications handled before the result, want %d and %d", i, n, l, 5*(i+1), i+1)
		}
	}
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "sample"})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "sampled" {
		t.Fatalf("sample: %v %+v", err, res)
	}
	// Concurrent requests do not wait for each other.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprint("m", i)
			res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
			if err != nil || res.Content[0].(*mcp.TextContent).Text != msg {
				t.Errorf("echo %s: %v %+v", msg, err, res)
			}
		}()
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Closed handler not called")
	}
	if _, err := p.ListTools(ctx); !errors.Is(err, actors.ErrProxyClosed) {
		t.Fatalf("request after close: %v", err)
	}
}

// TestProxySessionEndsWithItsServer: a proxy session ends when its server is disconnected or removed.
func TestProxySessionEndsWithItsServer(t *testing.T) {
	for _, how := range []string{"disconnect", "remove"} {
		t.Run(how, func(t *testing.T) {
			r := newProxyRig(t)
			s := r.add("backend", persistence.TransportHTTP, map[string]any{"base_url": proxyBackend(t)}, true)
			closed := make(chan error, 1)
			p := r.open("backend", actors.ProxyOptions{Handlers: actors.ProxyHandlers{Closed: func(err error) { closed <- err }}})
			var err error
			if how == "disconnect" {
				_, err = r.sys.Disconnect(context.Background(), s.ID, false)
			} else {
				err = r.sys.Remove(context.Background(), s.ID)
			}
			if err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			select {
			case err := <-closed:
				if err == nil {
					t.Error("Closed without a reason")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("proxy session still open")
			}
			if _, err := p.ListTools(context.Background()); !errors.Is(err, actors.ErrProxyClosed) {
				t.Fatalf("request after %s: %v", how, err)
			}
		})
	}
}

// TestProxySessionOwnsItsChildProcess: over stdio each proxy session runs its own child process, which Close ends;
// removing the server ends the rest.
func TestProxySessionOwnsItsChildProcess(t *testing.T) {
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("marker-proxy-actor-%d", time.Now().UnixNano())
	r := newProxyRig(t)
	s := r.add("every", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, true)
	count := func() int { return len(peertest.ProcessesWithArg(marker)) }
	a := r.open("every", actors.ProxyOptions{})
	r.open("every", actors.ProxyOptions{})
	if n := count(); n != 3 {
		t.Fatalf("%d processes, want 3", n)
	}
	tools, err := a.ListTools(context.Background())
	if err != nil || !slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == "echo" }) {
		t.Fatalf("list tools over stdio: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d processes after Close, want 2", n)
	}
	if err := r.sys.Remove(context.Background(), s.ID); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if pids := peertest.ProcessesWithArg(marker); len(pids) != 0 {
		t.Fatalf("processes left after Remove: %v", pids)
	}
}
