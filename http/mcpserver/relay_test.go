package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// relayBackend is a go-sdk backend whose tools ask their client (elicitation, sampling, roots), log, or wait.
func relayBackend(t testing.TB) (url string, free func()) {
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	noInput := &mcp.Tool{InputSchema: map[string]any{"type": "object"}}
	tool := func(name string, h mcp.ToolHandler) {
		t := *noInput
		t.Name = name
		srv.AddTool(&t, h)
	}
	answer := func(s string, err error) (*mcp.CallToolResult, error) {
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}, nil
	}
	tool("ask", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return answer("", err)
		}
		return answer(res.Action+":"+res.Content["name"].(string), nil)
	})
	tool("sample", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		if err != nil {
			return answer("", err)
		}
		return answer("sampled:"+res.Content.(*mcp.TextContent).Text, nil)
	})
	tool("roots", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return answer("", err)
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return answer("roots:"+strings.Join(uris, ","), nil)
	})
	tool("log", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "working on it"})
		return answer("logged", nil)
	})
	tool("slowlog", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "working on it"})
		time.Sleep(100 * time.Millisecond) // the message is handled before the result (see roundtrip_test)
		return answer("logged", nil)
	})
	tool("wait", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return answer("waited", nil)
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	return hs.URL, free
}

// TestRelayToTheCallingClient: a backend's elicitation, sampling, roots/list and log messages during a call reach the client
// that made the call, and its answer goes back; a client without the capability gets the backend an MCP error
// (never a hang); with two calls in flight on the shared session the backend gets an error, not another client.
func TestRelayToTheCallingClient(t *testing.T) {
	r := newRig(t)
	url, free := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker's tools", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })

	var mu sync.Mutex
	var logs []string
	capable := mcp.NewClient(&mcp.Implementation{Name: "capable", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ann"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hello"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			logs = append(logs, req.Params.Data.(string))
			mu.Unlock()
		},
	})
	capable.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})
	plain := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "1"}, nil) // roots (the go-sdk's default), none listed
	bare := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	open := func(c *mcp.Client, transport mcp.Transport) *mcp.ClientSession {
		s, err := c.Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	call := func(s *mcp.ClientSession, name string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return text(res)
	}
	for _, transport := range []mcp.Transport{&mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.SSEClientTransport{Endpoint: r.mux.URL + "/sse"}} {
		c := open(capable, transport)
		if err := c.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		if got := call(c, "asker__ask"); got != "accept:ann" {
			t.Fatalf("elicitation through /mcp: %q", got)
		}
		if got := call(c, "asker__roots"); got != "roots:file:///work/project" {
			t.Fatalf("roots/list through /mcp: %q", got)
		}
		if got := call(c, "asker__sample"); got != "sampled:hello" {
			t.Fatalf("sampling through /mcp: %q", got)
		}
		if got := call(c, "asker__log"); got != "logged" {
			t.Fatalf("log call: %q", got)
		}
		waitFor(t, "the backend's log message at the client", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(logs) > 0 && logs[len(logs)-1] == "working on it"
		})
		mu.Lock()
		logs = nil
		mu.Unlock()
	}

	// A client that did not declare elicitation: the backend's request is refused at once with -32601.
	p := open(plain, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	if got := call(p, "asker__ask"); !strings.Contains(got, "method not found") {
		t.Fatalf("elicitation for a client without the capability: %q", got)
	}
	if got := call(p, "asker__roots"); got != "roots:" {
		t.Fatalf("roots/list for a client with no roots: %q", got)
	}
	b := open(bare, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	if got := call(b, "asker__roots"); !strings.Contains(got, "method not found") {
		t.Fatalf("roots/list for a client without the capability: %q", got)
	}

	// Two calls in flight, of two clients: the backend has sent requests to its client, so each of these clients'
	// calls runs on a backend session of its own, and the backend's request reaches the client whose call it is.
	c := open(capable, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	waiting := make(chan string, 1)
	go func() { waiting <- call(p, "asker__wait") }()
	waitFor(t, "the waiting call in flight", func() bool {
		st, err := r.sys.Status(context.Background(), r.sys.Routes().Servers()[0].ID)
		return err == nil && st.PendingRequests >= 1
	})
	if got := call(c, "asker__ask"); got != "accept:ann" {
		t.Fatalf("elicitation during two calls of two clients: %q", got)
	}
	free()
	if got := <-waiting; got != "waited" {
		t.Fatalf("waiting call: %q", got)
	}
}

// TestRelayFromStdioBackend: server-everything over stdio asks for sampling and elicitation during its trigger
// tools; the calling client answers through /mcp.
func TestRelayFromStdioBackend(t *testing.T) {
	r := newRig(t)
	cmd, args := peertest.EverythingStdio(t)
	r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	waitFor(t, "server-everything's trigger tools", func() bool {
		_, s := r.sys.Routes().Tool("every.trigger-sampling-request")
		_, e := r.sys.Routes().Tool("every.trigger-elicitation-request")
		return s && e
	})
	cl := mcp.NewClient(&mcp.Implementation{Name: "capable", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "sampled-by-client"}}, nil
		},
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "every__trigger-sampling-request", Arguments: map[string]any{"prompt": "hi", "maxTokens": 5}})
	if err != nil || res.IsError || !strings.Contains(text(res), "sampled-by-client") {
		t.Fatalf("sampling through a stdio backend: %v %q", err, text(res))
	}
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "every__trigger-elicitation-request", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(strings.ToLower(text(res)), "decline") {
		t.Fatalf("elicitation through a stdio backend: %v %q", err, text(res))
	}
}

// TestRelayEachClientItsOwnSession: server-everything (stdio) asks its client for sampling, elicitation and roots
// during its trigger tools, and caches the roots it was given per session. Once it has sent a request, each client
// that can answer gets a backend session of its own: with three clients calling concurrently, none of the backend's
// requests is refused for want of attribution, each reaches the client whose call caused it, and no client is
// served another's roots.
func TestRelayEachClientItsOwnSession(t *testing.T) {
	r := newRig(t)
	cmd, args := peertest.EverythingStdio(t)
	r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	waitFor(t, "server-everything's trigger tools", func() bool {
		_, s := r.sys.Routes().Tool("every.trigger-sampling-request")
		_, e := r.sys.Routes().Tool("every.trigger-elicitation-request")
		_, g := r.sys.Routes().Tool("every.get-roots-list")
		return s && e && g
	})
	const clients, rounds = 3, 6 // 54 calls at once: below MCP_AGGREGATOR_MAX_CALLS_PER_SERVER (64)
	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		me := fmt.Sprintf("client-%d", i)
		cl := mcp.NewClient(&mcp.Implementation{Name: me, Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "name-of-" + me}}, nil
			},
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled-by-" + me}}, nil
			},
		})
		cl.AddRoots(&mcp.Root{URI: "file:///roots/" + me, Name: me})
		s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sessions[i] = s
	}
	call := func(s *mcp.ClientSession, tool string, args map[string]any) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", fmt.Errorf("tool error: %s", text(res))
		}
		return text(res), nil
	}
	// What each call must show: the answer of the client that made it, and no other client's.
	checks := []struct {
		tool string
		args map[string]any
		want func(me string) string
	}{
		{"every__trigger-sampling-request", map[string]any{"prompt": "hi", "maxTokens": 5}, func(me string) string { return "sampled-by-" + me }},
		{"every__trigger-elicitation-request", map[string]any{}, func(me string) string { return "- Name: name-of-" + me }},
		{"every__get-roots-list", map[string]any{}, func(me string) string { return "file:///roots/" + me }},
	}
	var mu sync.Mutex
	var failures []string
	calls := 0
	run := func(i int, tool string, args map[string]any, want string) {
		got, err := call(sessions[i], tool, args)
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("client-%d %s: %v", i, tool, err))
		case !strings.Contains(got, want):
			failures = append(failures, fmt.Sprintf("client-%d %s: want %q in %q", i, tool, want, got))
		default:
			for j := 0; j < clients; j++ {
				if other := fmt.Sprintf("client-%d", j); j != i && strings.Contains(got, other) {
					failures = append(failures, fmt.Sprintf("client-%d %s: another client's answer in %q", i, tool, got))
				}
			}
		}
	}
	// The backend shows it sends requests (its roots request 350 ms after initialize, or this lone call's).
	run(0, "every__get-roots-list", map[string]any{}, "file:///roots/client-0")
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		for round := 0; round < rounds; round++ {
			for _, c := range checks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					run(i, c.tool, c.args, c.want(fmt.Sprintf("client-%d", i)))
				}()
			}
		}
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed or crossed clients:\n%s", len(failures), calls, strings.Join(failures, "\n"))
	}
}
