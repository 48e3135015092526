package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// TestRelayToken: the relay sends the first admin token (list, then file), else the first client token (list, then
// file), parsed as auth.Parse does: the token picked authenticates with the expected scope.
func TestRelayToken(t *testing.T) {
	const (
		a1 = "admin-token-number-1"
		a2 = "admin-token-number-2"
		c1 = "client-token-number-1"
		c2 = "client-token-number-2"
	)
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# comment\n\nclient fc "+c2+"\n  admin fa "+a2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clientOnly := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(clientOnly, []byte("client fc "+c2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name              string
		admin, client, fp string
		want, source      string
		scope             auth.Scope
	}{
		{name: "none"},
		{name: "admin list", admin: a1 + "," + a2, client: c1, want: a1, source: "MCP_AGGREGATOR_ADMIN_TOKENS entry 1", scope: auth.ScopeAdmin},
		{name: "named admin after a blank entry", admin: " , ops:" + a1, want: a1, source: "MCP_AGGREGATOR_ADMIN_TOKENS entry 1", scope: auth.ScopeAdmin},
		{name: "client list", client: "ci:" + c1 + ",other:" + c2, want: c1, source: "MCP_AGGREGATOR_CLIENT_TOKENS entry 1", scope: auth.ScopeClient},
		{name: "admin in the file wins over a client in the list", client: c1, fp: file, want: a2, source: "MCP_AGGREGATOR_TOKENS_FILE " + file + " line 4", scope: auth.ScopeAdmin},
		{name: "admin list wins over the file", admin: a1, fp: file, want: a1, source: "MCP_AGGREGATOR_ADMIN_TOKENS entry 1", scope: auth.ScopeAdmin},
		{name: "client list before the file's client", client: c1, fp: clientOnly, want: c1, source: "MCP_AGGREGATOR_CLIENT_TOKENS entry 1", scope: auth.ScopeClient},
		{name: "file client only", fp: clientOnly, want: c2, source: "MCP_AGGREGATOR_TOKENS_FILE " + clientOnly + " line 1", scope: auth.ScopeClient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MCP_AGGREGATOR_ADMIN_TOKENS": tc.admin, "MCP_AGGREGATOR_CLIENT_TOKENS": tc.client, "MCP_AGGREGATOR_TOKENS_FILE": tc.fp}
			got, err := relayToken(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			if got.token != tc.want || got.source != tc.source {
				t.Fatalf("got %q from %q, want %q from %q", got.token, got.source, tc.want, tc.source)
			}
			tokens, err := auth.Parse(tc.admin, tc.client, tc.fp)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if tokens.Enabled() || got.describe() != "none" {
					t.Fatalf("no token configured, yet auth on or described as %q", got.describe())
				}
				return
			}
			id, ok := tokens.Authenticate(got.token)
			if !ok || id.Scope != tc.scope {
				t.Fatalf("the token picked authenticates as %+v (%v), want scope %v", id, ok, tc.scope)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := relayToken(func(k string) (string, bool) {
		if k == "MCP_AGGREGATOR_TOKENS_FILE" {
			return missing, true
		}
		return "", false
	}); err == nil {
		t.Fatal("an unreadable tokens file gave no error")
	}
}

// nodeStore is a store of which only the nodes table is read.
type nodeStore struct {
	persistence.Store
	mu    sync.Mutex
	calls int
	list  func(call int) ([]persistence.Node, error)
}

func (s *nodeStore) ListNodes(context.Context, time.Duration) ([]persistence.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.list(s.calls)
}

func TestLiveNodes(t *testing.T) {
	now := time.Now()
	s := &nodeStore{list: func(int) ([]persistence.Node, error) {
		return []persistence.Node{
			{ID: "stdio", HeartbeatAt: now},
			{ID: "old", Address: "http://127.0.0.1:1", HeartbeatAt: now.Add(-2 * time.Second)},
			{ID: "new", Address: "http://127.0.0.1:2", HeartbeatAt: now.Add(-time.Second)},
		}, nil
	}}
	got, err := liveNodes(context.Background(), s, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "new" || got[1].ID != "old" {
		t.Fatalf("got %+v, want new then old (no node without an address)", got)
	}
}

// TestWatchNode: the relay ends once the node is missing from the live nodes; a store that cannot be read is not
// taken for a dead node.
func TestWatchNode(t *testing.T) {
	node := persistence.Node{ID: "n1", Address: "http://127.0.0.1:1"}
	s := &nodeStore{list: func(call int) ([]persistence.Node, error) {
		switch {
		case call <= 2:
			return []persistence.Node{{ID: "other"}, node}, nil
		case call <= 4:
			return nil, errors.New("store down")
		}
		return []persistence.Node{{ID: "other"}}, nil
	}}
	err := watchNode(s, node, 5*time.Millisecond, slog.New(slog.DiscardHandler))(context.Background())
	var lost *nodeLostError
	if !errors.As(err, &lost) || !strings.Contains(err.Error(), "no heartbeat") {
		t.Fatalf("got %v, want a lost node", err)
	}
	if s.calls != 5 {
		t.Fatalf("watch ended after %d reads, want 5", s.calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := watchNode(s, node, time.Hour, slog.New(slog.DiscardHandler))(ctx); err != nil {
		t.Fatalf("cancelled watch: %v", err)
	}
}

// testNode is an MCP server over legacy SSE, like the aggregated endpoint of `serve`, optionally behind a token.
type testNode struct {
	ts     *httptest.Server
	server *mcp.Server
}

func newTestNode(t *testing.T, token string) *testNode {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "node", Version: "1"}, nil)
	type msgIn struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
	})
	// roots asks the client for its roots: a request from the server, answered through the relay.
	mcp.AddTool(srv, &mcp.Tool{Name: "roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(uris, ",")}}}, nil, nil
	})
	type sizeIn struct {
		Size int `json:"size"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "big"}, func(_ context.Context, _ *mcp.CallToolRequest, in sizeIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Size)}}}, nil, nil
	})
	sse := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/livez" {
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, `{"error_code":"UNAUTHORIZED"}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/sse" {
			http.NotFound(w, r)
			return
		}
		sse.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return &testNode{ts: ts, server: srv}
}

func (n *testNode) node() persistence.Node { return persistence.Node{ID: "node-1", Address: n.ts.URL} }

// relayRun is a relay between in-memory pipes (the client's side stands for stdin/stdout) and a node.
type relayRun struct {
	clientR io.ReadCloser  // what the relay writes to stdout
	clientW io.WriteCloser // what the client writes to stdin
	ended   chan error
	cancel  context.CancelFunc
}

func startRelay(t *testing.T, n *testNode, tok relayAuth, maxBytes int) *relayRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	local, err := (&mcp.IOTransport{Reader: stdinR, Writer: stdoutW, MaxLineLength: maxBytes}).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := dialNode(ctx, n.node(), tok, maxBytes, 10*time.Second, "/sse")
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	r := &relayRun{clientR: stdoutR, clientW: stdinW, ended: make(chan error, 1), cancel: cancel}
	go func() { r.ended <- relay(ctx, local, remote, n.node(), nil, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		stdinW.Close()
		stdoutR.Close()
	})
	return r
}

func (r *relayRun) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.ended:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not end")
	}
	return nil
}

func (r *relayRun) client(t *testing.T, ctx context.Context, opts *mcp.ClientOptions) (*mcp.Client, *mcp.ClientSession) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "1"}, opts)
	c.AddRoots(&mcp.Root{URI: "file:///work/project"})
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: r.clientR, Writer: r.clientW}, nil)
	if err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	return c, cs
}

// callText calls a tool and returns the text of a successful result.
func callText(t *testing.T, ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) string {
	t.Helper()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	tc, ok := mcpTextOf(res)
	if res.IsError || !ok {
		t.Fatalf("call result: %+v (text %q)", res, tc)
	}
	return tc
}

// mcpTextOf is the text of a result's first content, if it is text.
func mcpTextOf(res *mcp.CallToolResult) (string, bool) {
	if len(res.Content) == 0 {
		return "", false
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", false
	}
	return tc.Text, true
}

// TestRelayPassesMessagesBothWays: through the relay a client calls tools, answers the server's own requests
// (roots/list during a call) and gets its notifications (tools/list_changed); when it leaves, the relay ends
// cleanly. With a token, the node sees it on every request.
func TestRelayPassesMessagesBothWays(t *testing.T) {
	for _, token := range []string{"", "relay-token-0123456789"} {
		t.Run(fmt.Sprintf("token=%v", token != ""), func(t *testing.T) {
			n := newTestNode(t, token)
			r := startRelay(t, n, relayAuth{token: token, source: "test"}, 1<<20)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			changed := make(chan struct{}, 4)
			_, cs := r.client(t, ctx, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				changed <- struct{}{}
			}})
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}}); got != "Echo: hi" {
				t.Fatalf("echo: %q", got)
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "roots"}); got != "file:///work/project" {
				t.Fatalf("roots asked by the server: %q", got)
			}
			n.server.AddTool(&mcp.Tool{Name: "late", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatal("no tools/list_changed through the relay")
			}
			// Calls in parallel keep their ids apart.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprint(i)}})
					if err != nil || res.Content[0].(*mcp.TextContent).Text != fmt.Sprintf("Echo: %d", i) {
						t.Errorf("parallel call %d: %v %v", i, res, err)
					}
				}()
			}
			wg.Wait()
			cs.Close()
			if err := r.end(t); err != nil {
				t.Fatalf("the client left: relay ended with %v, want nil", err)
			}
		})
	}
}

// rawLines writes JSON-RPC lines to the relay and reads its answers.
type rawLines struct {
	t  *testing.T
	r  *relayRun
	sc *bufio.Scanner
}

func (l *rawLines) send(line string) {
	l.t.Helper()
	if _, err := io.WriteString(l.r.clientW, line+"\n"); err != nil {
		l.t.Fatal(err)
	}
}

// until reads answers until one has the id.
func (l *rawLines) until(id float64) map[string]any {
	l.t.Helper()
	for l.sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(l.sc.Bytes(), &m); err != nil {
			l.t.Fatalf("relay wrote %q: %v", l.sc.Text(), err)
		}
		if m["id"] == id {
			return m
		}
	}
	l.t.Fatalf("no answer with id %v: %v", id, l.sc.Err())
	return nil
}

// TestRelayAnswersRefusedRequests: a request the node's SSE endpoint refuses with an HTTP error (an unknown method)
// gets a JSON-RPC error from the relay instead of no answer, and the session goes on.
func TestRelayAnswersRefusedRequests(t *testing.T) {
	n := newTestNode(t, "")
	r := startRelay(t, n, relayAuth{}, 1<<20)
	l := &rawLines{t: t, r: r, sc: bufio.NewScanner(r.clientR)}
	l.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := l.until(1); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	l.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	l.send(`{"jsonrpc":"2.0","id":2,"method":"no/such-method","params":{}}`)
	m := l.until(2)
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32601) || !strings.Contains(fmt.Sprint(e["message"]), "400") {
		t.Fatalf("unknown method: %v", m)
	}
	l.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}}`)
	if m := l.until(3); !strings.Contains(fmt.Sprint(m["result"]), "Echo: still here") {
		t.Fatalf("after a refused request: %v", m)
	}
	r.clientW.Close()
	if err := r.end(t); err != nil {
		t.Fatalf("stdin closed: %v", err)
	}
}

// TestRelayAnswersDiscover: the relay answers a client's server/discover itself (the node's legacy SSE session does
// not serve 2026-07-28, yet the go-sdk's SSE handler offers it to a discover that arrives before the session has
// set what its transport supports): the client falls back to initialize with an earlier version, and a go-sdk
// client asking for the newest revision always ends up on an earlier one.
func TestRelayAnswersDiscover(t *testing.T) {
	n := newTestNode(t, "")
	r := startRelay(t, n, relayAuth{}, 1<<20)
	l := &rawLines{t: t, r: r, sc: bufio.NewScanner(r.clientR)}
	l.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"` + mcpserver.ModernProtocol + `",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`)
	m := l.until(1)
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(-32601) || m["result"] != nil {
		t.Fatalf("server/discover through the relay: %v, want the relay's method-not-found error", m)
	}
	l.send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := l.until(2); m["result"] == nil {
		t.Fatalf("initialize after the refused discover: %v", m)
	}
	l.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	l.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"legacy"}}}`)
	if m := l.until(3); !strings.Contains(fmt.Sprint(m["result"]), "Echo: legacy") {
		t.Fatalf("a call after initialize: %v", m)
	}
	r.clientW.Close()
	if err := r.end(t); err != nil {
		t.Fatalf("stdin closed: %v", err)
	}

	r = startRelay(t, n, relayAuth{}, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cs := r.client(t, ctx, nil)
	if got := cs.InitializeResult().ProtocolVersion; got >= mcpserver.ModernProtocol {
		t.Fatalf("a client through the relay negotiated %s, want a version before %s", got, mcpserver.ModernProtocol)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "roots"}); got != "file:///work/project" {
		t.Fatalf("roots asked by the server: %q", got)
	}
	cs.Close()
	if err := r.end(t); err != nil {
		t.Fatalf("the client left: relay ended with %v, want nil", err)
	}
}

// TestRelayNodeLost: when the node's stream ends the relay returns a *nodeLostError saying whether the process is
// gone or closed the session itself (a message over the limit, here).
func TestRelayNodeLost(t *testing.T) {
	cases := []struct {
		name string
		lose func(n *testNode, cs *mcp.ClientSession)
		want string
	}{
		{"process gone", func(n *testNode, _ *mcp.ClientSession) {
			n.ts.Listener.Close()
			n.ts.CloseClientConnections()
		}, "the process is gone"},
		{"stream closed", func(n *testNode, _ *mcp.ClientSession) { n.ts.CloseClientConnections() }, "still answers"},
		{"message over the limit", func(_ *testNode, cs *mcp.ClientSession) {
			go func() {
				_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"size": 8192}})
			}()
		}, "still answers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, "")
			r := startRelay(t, n, relayAuth{}, 4096)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, cs := r.client(t, ctx, nil)
			defer cs.Close()
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"size": 1000}}); len(got) != 1000 {
				t.Fatalf("a message under the limit: %d bytes", len(got))
			}
			tc.lose(n, cs)
			err := r.end(t)
			var lost *nodeLostError
			if !errors.As(err, &lost) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lost the session") {
				t.Fatalf("got %v, want a lost session saying %q", err, tc.want)
			}
		})
	}
}

// TestRelayStdinLimit: a client line over the limit ends the relay with an error naming the setting.
func TestRelayStdinLimit(t *testing.T) {
	n := newTestNode(t, "")
	r := startRelay(t, n, relayAuth{}, 4096)
	go io.Copy(io.Discard, r.clientR)
	line := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 8192) + `"}}` + "\n"
	go io.WriteString(r.clientW, line)
	err := r.end(t)
	if err == nil || !strings.Contains(err.Error(), "MCP_AGGREGATOR_MAX_MESSAGE_BYTES") {
		t.Fatalf("got %v, want an error naming MCP_AGGREGATOR_MAX_MESSAGE_BYTES", err)
	}
}

// TestDialNode: what opening a session on a node gives, and which failures make stdio try the next node (or serve by
// itself) instead of stopping.
func TestDialNode(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	const token = "node-token-0123456789"
	withToken := newTestNode(t, token)
	notMCP := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notMCP.Close)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := "http://" + closed.Addr().String()
	closed.Close()

	cases := []struct {
		name      string
		address   string
		tok       relayAuth
		skippable bool
		want      []string // in the error stdio reports
	}{
		{name: "right token", address: withToken.ts.URL, tok: relayAuth{token: token, source: "MCP_AGGREGATOR_ADMIN_TOKENS entry 1"}},
		{name: "no token", address: withToken.ts.URL, want: []string{"this command has no token", "401", "MCP_AGGREGATOR_ADMIN_TOKENS",
			"MCP_AGGREGATOR_CLIENT_TOKENS", "MCP_AGGREGATOR_TOKENS_FILE"}},
		{name: "wrong token", address: withToken.ts.URL, tok: relayAuth{token: "wrong-token-0123456789", source: "MCP_AGGREGATOR_CLIENT_TOKENS entry 2"},
			want: []string{"refused the token of MCP_AGGREGATOR_CLIENT_TOKENS entry 2", "401 Unauthorized"}},
		{name: "nothing listens", address: closedAddr, skippable: true},
		{name: "not an MCP endpoint", address: notMCP.URL, skippable: true},
		{name: "no answer", address: "http://" + silent.Addr().String(), skippable: true},
		{name: "not a URL", address: "::", want: []string{"not a URL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := persistence.Node{ID: "n", Address: tc.address}
			conn, err := dialNode(context.Background(), node, tc.tok, 1<<20, 2*time.Second, "/sse")
			if tc.want == nil && !tc.skippable {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				conn.Close()
				return
			}
			if err == nil {
				conn.Close()
				t.Fatal("dial succeeded")
			}
			if skippable(err) != tc.skippable {
				t.Fatalf("skippable(%v) = %v, want %v", err, !tc.skippable, tc.skippable)
			}
			msg := relayConnectError(node, tc.tok, err).Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if tc.tok.token != "" && strings.Contains(msg, tc.tok.token) {
				t.Errorf("error shows the token: %q", msg)
			}
		})
	}
}

// TestRelayTransportToken: the token goes only to the node's origin; an answer other than 2xx is a *relayRefused.
func TestRelayTransportToken(t *testing.T) {
	var seen []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = append(seen, r.URL.Host+" "+r.Header.Get("Authorization"))
		code := http.StatusOK
		if r.URL.Path == "/refuse" {
			code = http.StatusForbidden
		}
		return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(`{"error_code":"FORBIDDEN"}`)), Header: http.Header{}}, nil
	})
	rt := &relayTransport{base: base, token: "tok-0123456789abcdef", origin: "http://127.0.0.1:8082"}
	for _, u := range []string{"http://127.0.0.1:8082/sse", "http://other:8082/sse", "https://127.0.0.1:8082/sse", "http://127.0.0.1:8082/refuse"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if req.Header.Get("Authorization") != "" {
			t.Fatal("the caller's request was modified")
		}
		var ref *relayRefused
		if strings.HasSuffix(u, "/refuse") != errors.As(err, &ref) || ref != nil && (ref.Status != 403 || !strings.Contains(ref.Body, "FORBIDDEN")) {
			t.Fatalf("%s: %v", u, err)
		}
	}
	want := []string{"127.0.0.1:8082 Bearer tok-0123456789abcdef", "other:8082 ", "127.0.0.1:8082 ", "127.0.0.1:8082 Bearer tok-0123456789abcdef"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("sent %q, want %q", seen, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
