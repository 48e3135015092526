package mcpproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// everything returns server-everything's connection config over a transport; over stdio, marker tags its
// processes (the server's own and one per proxy session) so the test can count them.
func everything(t *testing.T, transport, marker string) map[string]any {
	t.Helper()
	if transport == persistence.TransportSTDIO {
		cmd, args := peertest.EverythingStdio(t)
		return map[string]any{"command": cmd, "args": append(args, marker)}
	}
	p := peertest.StartEverything(t, "streamableHttp")
	return map[string]any{"base_url": p.URL()}
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatalf("list tools: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// waitTool waits for a tool the backend registers after initialize (it then sends tools/list_changed, which the
// proxy must pass on).
func waitTool(t *testing.T, cs *mcp.ClientSession, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(toolNames(t, cs), name) {
		if time.Now().After(deadline) {
			t.Fatalf("tool %s never appeared through the proxy: %v", name, toolNames(t, cs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProxyServerEverything drives server-everything (stdio and streamable HTTP) through /mcp/servers/{name} with
// a go-sdk client: tools un-namespaced, echo, progress while a call runs, resources, prompts, completion, logging,
// and the backend's own requests (sampling, roots) answered by the downstream client.
func TestProxyServerEverything(t *testing.T) {
	for _, tr := range []string{persistence.TransportSTDIO, persistence.TransportHTTP} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mcpproxy.Options{})
			name := "every-" + strings.ToLower(tr)
			cfg := everything(t, tr, fmt.Sprintf("marker-proxy-%d", time.Now().UnixNano()))
			r.register(name, tr, cfg)

			var progress atomic.Int32
			var sampled atomic.Int32
			client := mcp.NewClient(&mcp.Implementation{Name: "proxy-test", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
				CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					sampled.Add(1)
					return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant",
						Content: &mcp.TextContent{Text: "sampled through the proxy"}}, nil
				},
			})
			client.AddRoots(&mcp.Root{URI: "file:///proxy-test-root", Name: "proxy-root"})
			cs := r.connectClient(name, client)
			ctx := context.Background()

			if got := cs.InitializeResult().ServerInfo.Name; !strings.Contains(got, "everything") {
				t.Errorf("server info %q is not the backend's", got)
			}
			names := toolNames(t, cs)
			if !slices.Contains(names, "echo") || !slices.Contains(names, "trigger-long-running-operation") {
				t.Fatalf("backend tools missing through the proxy: %v", names)
			}
			for _, n := range names {
				if strings.Contains(n, "__") || strings.Contains(n, ".") || strings.HasPrefix(n, name) {
					t.Errorf("tool %q is namespaced", n)
				}
			}

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi " + tr}})
			if err != nil || res.IsError || text(t, res) != "Echo: hi "+tr {
				t.Fatalf("echo: %v %+v", err, res)
			}

			// Progress reaches the client while the call runs: every notification before the result.
			params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 4}}
			params.SetProgressToken("tok-" + tr)
			start := time.Now()
			res, err = cs.CallTool(ctx, params)
			if err != nil || res.IsError {
				t.Fatalf("long running operation: %v %+v", err, res)
			}
			// The go-sdk client may hand the last notification to its handler just after the result (it does so
			// directly against the backend too), so: some while the call ran, all four soon after.
			if n := progress.Load(); n < 2 {
				t.Errorf("got %d progress notifications while the call ran, want several", n)
			}
			for deadline := time.Now().Add(2 * time.Second); progress.Load() < 4 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := progress.Load(); n != 4 {
				t.Errorf("got %d progress notifications, want 4", n)
			}
			if took := time.Since(start); took < 900*time.Millisecond {
				t.Errorf("long running operation took %v, want about 1 s", took)
			}

			var resources []*mcp.Resource
			for res, err := range cs.Resources(ctx, nil) {
				if err != nil {
					t.Fatalf("list resources: %v", err)
				}
				resources = append(resources, res)
			}
			if len(resources) == 0 {
				t.Fatal("no resources through the proxy")
			}
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources[0].URI})
			if err != nil || len(read.Contents) == 0 || read.Contents[0].URI != resources[0].URI {
				t.Fatalf("read %s: %v %+v", resources[0].URI, err, read)
			}
			for _, err := range cs.ResourceTemplates(ctx, nil) {
				if err != nil {
					t.Fatalf("list resource templates: %v", err)
				}
			}

			var prompts []string
			for p, err := range cs.Prompts(ctx, nil) {
				if err != nil {
					t.Fatalf("list prompts: %v", err)
				}
				prompts = append(prompts, p.Name)
			}
			if !slices.Contains(prompts, "simple-prompt") {
				t.Fatalf("prompts through the proxy: %v", prompts)
			}
			got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "simple-prompt"})
			if err != nil || len(got.Messages) == 0 {
				t.Fatalf("get simple-prompt: %v %+v", err, got)
			}
			comp, err := cs.Complete(ctx, &mcp.CompleteParams{
				Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"},
				Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Eng"},
			})
			if err != nil || !slices.Contains(comp.Completion.Values, "Engineering") {
				t.Fatalf("complete: %v %+v", err, comp)
			}
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatalf("set logging level: %v", err)
			}

			// The backend's requests to the client: sampling and roots/list, during a tool call.
			waitTool(t, cs, "trigger-sampling-request")
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hello"}})
			if err != nil || res.IsError || !strings.Contains(text(t, res), "sampled through the proxy") || sampled.Load() == 0 {
				t.Fatalf("sampling through the proxy: %v %+v", err, res)
			}
			waitTool(t, cs, "get-roots-list")
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get-roots-list"})
			if err != nil || !strings.Contains(text(t, res), "file:///proxy-test-root") {
				t.Fatalf("roots through the proxy: %v %+v", err, res)
			}

			// A tool the backend does not have: its own answer comes back (TypeScript: a result with isError).
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "no-such-tool"})
			if err == nil && !res.IsError {
				t.Fatalf("unknown tool answered %+v", res)
			}
		})
	}
}

// connectClient opens a session of client to the proxy endpoint of a server.
func (r *rig) connectClient(name string, client *mcp.Client) *mcp.ClientSession {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url(name), MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		r.t.Fatalf("connect to proxy of %s: %v", name, err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestProxySessionsEnd: deleting or disconnecting a stdio server closes every downstream session and leaves no
// child process behind (each proxy session ran its own); a client that ends its session ends its child process.
func TestProxySessionsEnd(t *testing.T) {
	for _, how := range []string{"remove", "disconnect", "client-close"} {
		// Serial: each case starts three Node processes, and under a loaded CI machine parallel cases slowed the
		// go-sdk client's DELETE past its own 5 s timeout.
		t.Run(how, func(t *testing.T) {
			r := newRig(t, mcpproxy.Options{})
			marker := fmt.Sprintf("marker-proxy-%s-%d", how, time.Now().UnixNano())
			srv := r.register("every-"+how, persistence.TransportSTDIO, everything(t, persistence.TransportSTDIO, marker))
			a := r.connect(srv.Name, nil)
			b := r.connect(srv.Name, nil)
			if n := len(peertest.ProcessesWithArg(marker)); n != 3 {
				t.Fatalf("%d processes, want 3 (the server's session and one per proxy session)", n)
			}
			if _, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "x"}}); err != nil {
				t.Fatalf("echo: %v", err)
			}
			var err error
			switch how {
			case "remove":
				err = r.sys.Remove(context.Background(), srv.ID)
				// Remove returns once the server actor, and its proxy children, have stopped.
				if pids := peertest.ProcessesWithArg(marker); err == nil && len(pids) != 0 {
					t.Errorf("processes left after Remove returned: %v", pids)
				}
			case "disconnect":
				_, err = r.sys.Disconnect(context.Background(), srv.ID, true)
			case "client-close":
				sid := a.ID()
				if cerr := a.Close(); cerr != nil { // DELETE: the go-sdk ends the downstream session, the proxy its upstream one
					// The go-sdk client gives its DELETE 5 s; on a loaded machine send it again, patiently.
					t.Logf("client close: %v; resending DELETE", cerr)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, r.url(srv.Name), nil)
					req.Header.Set("Mcp-Session-Id", sid)
					req.Header.Set("Mcp-Protocol-Version", actors.ProtocolVersion)
					resp, derr := http.DefaultClient.Do(req)
					cancel()
					if derr != nil {
						t.Fatalf("DELETE of the session: %v", derr)
					}
					resp.Body.Close()
				}
				waitCount(t, marker, 2, 20*time.Second)
				if _, err := b.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "y"}}); err != nil {
					t.Fatalf("the other session broke: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			start := time.Now()
			waitCount(t, marker, 0, 10*time.Second)
			t.Logf("processes gone after %v", time.Since(start))
			waitClosed(t, a, 10*time.Second)
			waitClosed(t, b, 10*time.Second)
			t.Logf("downstream sessions closed after %v", time.Since(start))
			if _, err := a.ListTools(context.Background(), nil); err == nil {
				t.Error("a closed session still answers")
			}
		})
	}
}

// waitCount waits until exactly n live processes carry marker.
func waitCount(t *testing.T, marker string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := peertest.ProcessesWithArg(marker)
		if len(pids) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes %v, want %d", len(pids), pids, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitClosed waits until a client session has noticed that the proxy closed it.
func waitClosed(t *testing.T, cs *mcp.ClientSession, within time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("the downstream session is still open %v after its server went away", within)
	}
}

// post sends one raw JSON-RPC message to the proxy.
func post(t *testing.T, url, body string, header map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h, ok := header["Host"]; ok {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp, m
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestProxyErrors checks the contract's error answers of the endpoint itself.
func TestProxyErrors(t *testing.T) {
	backend := everything(t, persistence.TransportHTTP, "")
	r := newRig(t, mcpproxy.Options{MaxSessionsPerServer: 1})
	srv := r.register("every", persistence.TransportHTTP, backend)
	raw, _ := json.Marshal(backend)
	off, err := r.sys.Register(context.Background(), actors.RegisterRequest{
		Name: "off", TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: false,
	})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	r.waitStatus(off.ID, persistence.StatusDisconnected, 5*time.Second)
	// A per_user server: a caller without a credential of their own (here the one anonymous caller) is refused.
	per, err := r.sys.Register(context.Background(), actors.RegisterRequest{
		Name: "per", TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true,
		CredentialMode: persistence.CredentialPerUser, UserCredential: &persistence.UserCredentialSlot{Header: "Authorization"},
	})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	r.waitStatus(per.ID, persistence.StatusConnected, 30*time.Second)

	first := r.connect(srv.Name, nil) // the one session the cap allows
	tests := []struct {
		name   string
		url    string
		header map[string]string
		status int
		code   string
	}{
		{"unknown server", r.url("nope"), nil, http.StatusNotFound, "SERVER_NOT_FOUND"},
		{"no server name", r.ts.URL + mcpproxy.Prefix, nil, http.StatusNotFound, "NOT_FOUND"},
		{"path below a server", r.url("every") + "/extra", nil, http.StatusNotFound, "NOT_FOUND"},
		{"server not connected", r.url("off"), nil, http.StatusServiceUnavailable, "SERVER_UNAVAILABLE"},
		{"session cap", r.url("every"), nil, http.StatusServiceUnavailable, "SERVICE_BUSY"},
		{"per_user server without the caller's credential", r.url("per"), nil, http.StatusForbidden, "CREDENTIAL_REQUIRED"},
		{"dns rebinding", r.url("every"), map[string]string{"Host": "evil.example:80"}, http.StatusForbidden, "FORBIDDEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, tc.url, initialize, tc.header)
			if resp.StatusCode != tc.status || body["error_code"] != tc.code {
				t.Fatalf("got %d %v, want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
			if _, ok := body["detail"]; !ok {
				t.Errorf("no detail in %v", body)
			}
			if tc.code == "SERVER_UNAVAILABLE" {
				s, _ := body["server"].(map[string]any)
				if s["id"] != off.ID || s["name"] != "off" || s["status"] != persistence.StatusDisconnected {
					t.Errorf("server in the answer: %v", body["server"])
				}
			}
		})
	}
	// A session id is only valid through its own server's path.
	resp, _ := post(t, r.url("off"), `{"jsonrpc":"2.0","id":2,"method":"ping"}`, map[string]string{"Mcp-Session-Id": first.ID()})
	if resp.StatusCode == http.StatusOK {
		t.Error("a session answered through another server's path")
	}
	if err := first.Ping(context.Background(), nil); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
}

// rawSession is a downstream session spoken in raw HTTP, to see the order of what arrives on a request's stream.
type rawSession struct {
	t   *testing.T
	url string
	id  string
}

// send posts one message and returns the JSON-RPC messages of the answer, in order (SSE or JSON).
func (s *rawSession) send(body string) (*http.Response, []map[string]any) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	var msgs []map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && strings.TrimSpace(data) != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					s.t.Fatalf("event %q: %v", data, err)
				}
				msgs = append(msgs, m)
			}
		}
	} else {
		var m map[string]any
		if json.NewDecoder(resp.Body).Decode(&m) == nil {
			msgs = append(msgs, m)
		}
	}
	return resp, msgs
}

// TestProxyKeepsNotificationOrder: on the stream of a tools/call, the backend's progress notifications all come
// before the result, as the backend sent them, over both transports.
func TestProxyKeepsNotificationOrder(t *testing.T) {
	for _, tr := range []string{persistence.TransportSTDIO, persistence.TransportHTTP} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mcpproxy.Options{})
			name := "order-" + strings.ToLower(tr)
			r.register(name, tr, everything(t, tr, fmt.Sprintf("marker-order-%d", time.Now().UnixNano())))
			s := &rawSession{t: t, url: r.url(name)}
			resp, _ := s.send(initialize)
			if s.id = resp.Header.Get("Mcp-Session-Id"); s.id == "" {
				t.Fatalf("no session id (status %d)", resp.StatusCode)
			}
			s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			for i := range 3 {
				_, msgs := s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"trigger-long-running-operation",`+
					`"arguments":{"duration":0.2,"steps":4},"_meta":{"progressToken":"p%d"}}}`, 10+i, i))
				var order []string
				for _, m := range msgs {
					if m["method"] == "notifications/progress" {
						order = append(order, "progress")
					} else if m["id"] != nil {
						order = append(order, "result")
					}
				}
				if want := []string{"progress", "progress", "progress", "progress", "result"}; !slices.Equal(order, want) {
					t.Fatalf("call %d: stream carried %v, want %v", i, order, want)
				}
			}
		})
	}
}

// TestProxyRateLimitsToolCalls: tool calls through /mcp/servers/{name} take tokens from the caller's bucket like
// the other front ends; past the burst they are refused with RATE_LIMITED.
func TestProxyRateLimitsToolCalls(t *testing.T) {
	r := newRig(t, mcpproxy.Options{Limiter: auth.NewLimiter(0.001, 2)})
	cmd, args := peertest.EverythingStdio(t)
	r.register("limited", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args})
	c := r.connect("limited", nil)
	var limited int
	for i := 0; i < 4; i++ {
		res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "m"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			if b, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(b), "RATE_LIMITED") {
				t.Fatalf("refused call is not RATE_LIMITED: %s", b)
			}
			limited++
		}
	}
	if limited != 2 {
		t.Fatalf("%d of 4 calls refused with a burst of 2, want 2", limited)
	}
}
