package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// fastBackend is a go-sdk backend whose tools echo, report progress, block until cancelled (telling the test when
// they start and when their context ends), and one a curation filter hides.
func fastBackend(t testing.TB) (url string, started, cancelled chan struct{}) {
	started, cancelled = make(chan struct{}, 1), make(chan struct{}, 1)
	srv := mcp.NewServer(&mcp.Implementation{Name: "fast", Version: "1"}, nil)
	schema := json.RawMessage(`{"type":"object"}`)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: schema}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(r.Params.Arguments)}}}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "hidden_echo", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hidden"}}}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "progress", InputSchema: schema}, func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if tok := r.Params.GetProgressToken(); tok != nil {
			_ = r.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2})
			time.Sleep(200 * time.Millisecond) // the notification is on its way before the result
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "progressed"}}}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "block", InputSchema: schema}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			cancelled <- struct{}{}
		case <-time.After(60 * time.Second):
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "unblocked"}}}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL, started, cancelled
}

// TestFastCallKeepsBehaviours: a 2025-11-25 client's tools/call of a backend tool on /mcp is served by the fast
// path (counted), with the same answer as the go-sdk path; a backend's roots/list and log messages reach the
// client during a fast call, and the client's cancellation cancels the backend's call; a call with a progress
// token, a canonical name, a hidden (curated) or unknown tool, or from a client that declared sampling goes to the
// go-sdk path, which answers as before.
func TestFastCallKeepsBehaviours(t *testing.T) {
	r := newRig(t)
	url, started, cancelled := fastBackend(t)
	r.register(t, "fb", map[string]any{"base_url": url}, persistence.TransportHTTP)
	askerURL, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": askerURL}, persistence.TransportHTTP)
	waitFor(t, "tools routable", func() bool {
		_, a := r.sys.Routes().Tool("fb.block")
		_, b := r.sys.Routes().Tool("asker.roots")
		return a && b
	})
	endpoint := r.mux.URL + "/mcp"
	plain := connect(t, &mcp.StreamableClientTransport{Endpoint: endpoint}) // roots declared (the go-sdk's default)
	waitFor(t, "fb__echo listed", func() bool { return slices.Contains(plain.toolNames(t), "fb__echo") })

	var mu sync.Mutex
	var logs []string
	rooted := mcp.NewClient(&mcp.Implementation{Name: "rooted", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			logs = append(logs, req.Params.Data.(string))
			mu.Unlock()
		},
	})
	rooted.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})
	sampler := mcp.NewClient(&mcp.Implementation{Name: "sampler", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hello"}}, nil
		},
	})
	open := func(c *mcp.Client) *mcp.ClientSession {
		s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	rootedSess, samplerSess := open(rooted), open(sampler)
	if err := rootedSess.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	call := func(t *testing.T, s *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return s.CallTool(ctx, p)
	}
	echoArgs := map[string]any{"a": 1}
	for _, tc := range []struct {
		name string
		sess *mcp.ClientSession
		p    *mcp.CallToolParams
		fast bool
		want string // in the text, or in the error
	}{
		{"alias of a backend tool", plain.sess, &mcp.CallToolParams{Name: "fb__echo", Arguments: echoArgs}, true, `echo {"a":1}`},
		{"client with sampling", samplerSess, &mcp.CallToolParams{Name: "fb__echo", Arguments: echoArgs}, false, `echo {"a":1}`},
		{"progress token", plain.sess, &mcp.CallToolParams{Name: "fb__progress", Meta: mcp.Meta{"progressToken": "p1"}}, false, "progressed"},
		{"canonical name", plain.sess, &mcp.CallToolParams{Name: "fb.echo", Arguments: echoArgs}, false, `echo {"a":1}`},
		{"unknown tool", plain.sess, &mcp.CallToolParams{Name: "fb__nope"}, false, "fb__nope"},
		{"roots relayed on the call's stream", rootedSess, &mcp.CallToolParams{Name: "asker__roots"}, true, "roots:file:///work/project"},
		{"sampling of a client that declared none", plain.sess, &mcp.CallToolParams{Name: "asker__sample"}, true, "method not found"},
		{"log relayed on the call's stream", rootedSess, &mcp.CallToolParams{Name: "asker__slowlog"}, true, "logged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mcpserver.FastCalls(r.endpoint)
			res, err := call(t, tc.sess, tc.p)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = text(res)
				if tc.want != "fb__nope" && res.Meta["metadata"] == nil {
					t.Errorf("no routing metadata in the result's _meta: %v", res.Meta)
				}
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("answer %q, want %q in it", got, tc.want)
			}
			if fast := mcpserver.FastCalls(r.endpoint) > before; fast != tc.fast {
				t.Fatalf("served on the fast path: %v, want %v", fast, tc.fast)
			}
		})
	}
	waitFor(t, "the backend's log message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(logs, "working on it")
	})
	waitFor(t, "the progress call's notification", func() bool { return slices.Contains(plain.progressSeen(), 1) })

	t.Run("cancellation reaches the backend", func(t *testing.T) {
		before := mcpserver.FastCalls(r.endpoint)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := plain.sess.CallTool(ctx, &mcp.CallToolParams{Name: "fb__block"})
			done <- err
		}()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the call did not reach the backend")
		}
		if mcpserver.FastCalls(r.endpoint) == before {
			t.Fatal("the call did not take the fast path")
		}
		cancel() // the go-sdk client sends notifications/cancelled
		select {
		case <-cancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("the client's cancellation did not reach the backend")
		}
		<-done
	})

	t.Run("curation hides a tool from the fast path too", func(t *testing.T) {
		if res, err := call(t, plain.sess, &mcp.CallToolParams{Name: "fb__hidden_echo"}); err != nil || res.IsError {
			t.Fatalf("before the filter: %v %v", err, res)
		}
		res, err := call(t, plain.sess, &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: map[string]any{
			"action": "set_filter", "server_id": "fb", "settings": map[string]any{"mode": "deny", "patterns": []string{"hidden_*"}}}})
		if err != nil || res.IsError {
			t.Fatalf("set_filter: %v %s", err, text(res))
		}
		waitFor(t, "hidden_echo hidden", func() bool { return !slices.Contains(plain.toolNames(t), "fb__hidden_echo") })
		before := mcpserver.FastCalls(r.endpoint)
		res, err = call(t, plain.sess, &mcp.CallToolParams{Name: "fb__hidden_echo"})
		if err == nil && !res.IsError {
			t.Fatalf("a hidden tool was called: %s", text(res))
		}
		if mcpserver.FastCalls(r.endpoint) != before {
			t.Fatal("a hidden tool's call took the fast path")
		}
	})
}

// progressSeen is what the client's progress handler received.
func (c *client) progressSeen() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.progress)
}

// TestFastCallAuth: with tokens, a session's fast calls are rate-limited per client like every call; a POST of
// another token with the session's id is refused by the go-sdk's session binding (403), and one to the loopback
// listener under another Host by its DNS rebinding check (403), neither served.
func TestFastCallAuth(t *testing.T) {
	r := newAuthRig(t, auth.NewLimiter(0.01, 3))
	c := r.connect(t, clientToken, false)
	waitFor(t, "back__echo listed", func() bool { return slices.Contains(c.toolNames(t), "back__echo") })
	raw := func(token string, host ...string) (int, string) {
		body := `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"back__echo","arguments":{"q":"a"}}}`
		req, _ := http.NewRequest(http.MethodPost, r.url+"/mcp", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.sess.ID())
		req.Header.Set("Mcp-Protocol-Version", actors.ProtocolVersion)
		req.Header.Set("Authorization", "Bearer "+token)
		if len(host) > 0 {
			req.Host = host[0]
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	n := func() uint64 { return mcpserver.FastCalls(r.ep) }

	before := n()
	// Answered as the go-sdk answers: one SSE event, the id as sent.
	if code, body := raw(clientToken); code != http.StatusOK || !strings.HasPrefix(body, `event: message`+"\ndata: "+`{"jsonrpc":"2.0","id":77,"result":`) {
		t.Fatalf("the session's own token: %d %s", code, body)
	}
	if n() != before+1 {
		t.Fatal("the session's own raw call did not take the fast path")
	}
	if code, body := raw(adminToken); code != http.StatusForbidden {
		t.Fatalf("another token on the session: %d %s", code, body)
	}
	if code, body := raw(clientToken, "rebound.example"); code != http.StatusForbidden {
		t.Fatalf("a loopback listener reached under another host name (DNS rebinding): %d %s", code, body)
	}
	if n() != before+1 {
		t.Fatal("another token's or another host's call took the fast path")
	}
	for i := 0; i < 2; i++ { // the burst is 3: the raw call was the first
		if res := callTool(t, c, "back__echo", nil); res.IsError {
			t.Fatalf("call %d: %s", i, text(res))
		}
	}
	res := callTool(t, c, "back__echo", nil)
	if !res.IsError || !strings.Contains(text(res), apierror.CodeRateLimited) {
		t.Fatalf("past the burst: %s", text(res))
	}
	if n() != before+4 {
		t.Fatalf("fast calls %d, want %d", n()-before, 4)
	}
}
