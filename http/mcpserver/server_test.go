package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

type rig struct {
	sys      *actors.System
	store    persistence.Store
	endpoint *mcpserver.Server
	mux      *httptest.Server
}

// startSystem opens a store in the test's directory and starts the actors on it with deps (startActors); the
// actors shut down, then the store closes, when the test ends.
func startSystem(t testing.TB, deps actors.Deps) (persistence.Store, *actors.System) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, startActors(t, st, deps)
}

// startActors starts the actors on st with deps (whose Store is set to st); they shut down when the test ends.
func startActors(t testing.TB, st persistence.Store, deps actors.Deps) *actors.System {
	t.Helper()
	deps.Store = st
	sys, err := actors.Start(context.Background(), deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	return sys
}

func newRig(t testing.TB, opts ...mcpserver.Options) *rig {
	return newRigWith(t, actors.Deps{Config: actors.DefaultConfig()}, opts...)
}

// newRigWith is newRig with the actors' dependencies (their store is the rig's).
func newRigWith(t testing.TB, deps actors.Deps, opts ...mcpserver.Options) *rig {
	st, sys := startSystem(t, deps)
	var o mcpserver.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	ep := mcpserver.New(sys, st, o)
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	mux.Handle("/sse", ep.SSEHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &rig{sys: sys, store: st, endpoint: ep, mux: hs}
}

func (r *rig) register(t testing.TB, name string, cfg map[string]any, transport string) string {
	raw, _ := json.Marshal(cfg)
	s, err := r.sys.Register(context.Background(), actors.RegisterRequest{Name: name, TransportType: transport, ConnectionConfig: raw, AutoConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// client connects a go-sdk client to the endpoint and records tools/list_changed and progress notifications.
type client struct {
	sess     *mcp.ClientSession
	mu       sync.Mutex
	changed  int
	progress []float64
	// firstProgress is when the first progress notification arrived (zero: none yet).
	firstProgress time.Time
}

func connect(t *testing.T, transport mcp.Transport) *client {
	c := &client{}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.mu.Lock(); c.changed++; c.mu.Unlock() },
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params.Progress)
			if c.firstProgress.IsZero() {
				c.firstProgress = time.Now()
			}
			c.mu.Unlock()
		},
	})
	sess, err := cl.Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	c.sess = sess
	return c
}

func (c *client) toolNames(t *testing.T) []string {
	var names []string
	for tool, err := range c.sess.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestAggregatedEndpoint(t *testing.T) {
	r := newRig(t)
	cmd, args := peertest.EverythingStdio(t)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})

	// Before any backend: only the meta-tools.
	names := c.toolNames(t)
	for _, meta := range []string{"add_mcp_server", "remove_mcp_server", "list_mcp_servers", "connect_mcp_server",
		"disconnect_mcp_server", "get_server_status", "search_aggregated_tools", "execute_external_tool"} {
		if !slices.Contains(names, meta) {
			t.Fatalf("meta-tool %s missing from %v", meta, names)
		}
	}

	// A backend connects: its tools appear under aliases and the client is told.
	id := r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	waitFor(t, "every__echo in tools/list", func() bool { return slices.Contains(c.toolNames(t), "every__echo") })
	// The notification may trail the tools/list that already shows the tool: wait for it.
	waitFor(t, "notifications/tools/list_changed after a backend connected", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.changed > 0
	})

	// tools/list names each backend tool's canonical name and server in its _meta (the meta-tools have none), and
	// carries the backend's own schema.
	var listed int
	for tool, err := range c.sess.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		name, _ := tool.Meta[mcpserver.NameMetaKey].(string)
		server, _ := tool.Meta[mcpserver.ServerMetaKey].(string)
		if strings.HasPrefix(tool.Name, "every__") {
			listed++
			if name != "every."+strings.TrimPrefix(tool.Name, "every__") || server != "every" || tool.InputSchema == nil {
				t.Fatalf("backend tool %s listed with _meta %v and schema %v", tool.Name, tool.Meta, tool.InputSchema)
			}
		} else if name != "" || server != "" {
			t.Fatalf("meta-tool %s listed with _meta %v", tool.Name, tool.Meta)
		}
	}
	if listed == 0 {
		t.Fatal("no backend tool listed")
	}

	// Calls by alias and by canonical name reach the backend and come back unchanged.
	for _, name := range []string{"every__echo", "every.echo"} {
		res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": "via " + name}})
		if err != nil || res.IsError || !strings.Contains(text(res), "via "+name) {
			t.Fatalf("call %s: %v %+v", name, err, res)
		}
	}

	// Progress of a long backend call streams to the client while the call runs: the backend sends one every half
	// second, so the first reaches the client well before the result (not with it). Measured from the first
	// notification, not from the call's start: the call may first open the client's own backend session (a child
	// process), which takes its time on a loaded machine.
	params := &mcp.CallToolParams{Name: "every__trigger-long-running-operation", Arguments: map[string]any{"duration": 2, "steps": 4}}
	params.SetProgressToken("tok-1")
	res, err := c.sess.CallTool(context.Background(), params)
	answered := time.Now()
	if err != nil || res.IsError {
		t.Fatalf("long call: %v %+v", err, res)
	}
	c.mu.Lock()
	first, n := c.firstProgress, len(c.progress)
	c.mu.Unlock()
	if first.IsZero() || answered.Sub(first) < 750*time.Millisecond {
		t.Fatalf("no progress notification reached the client while the call ran (%d in all, the first %v before the result)", n, answered.Sub(first))
	}

	// Meta-tools.
	res, err = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_mcp_servers", Arguments: map[string]any{}})
	if err != nil || !strings.Contains(text(res), `"name":"every"`) || !strings.Contains(text(res), `"status":"success"`) {
		t.Fatalf("list_mcp_servers: %v %s", err, text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_server_status", Arguments: map[string]any{"server_id": "every"}})
	if !strings.Contains(text(res), `"status":"CONNECTED"`) || !strings.Contains(text(res), id) {
		t.Fatalf("get_server_status: %s", text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_external_tool",
		Arguments: map[string]any{"tool_name": "every.get-sum", "arguments": map[string]any{"a": 20, "b": 22}}})
	if res.IsError || !strings.Contains(text(res), "42") || res.Meta["metadata"] == nil {
		t.Fatalf("execute_external_tool: %s %v", text(res), res.Meta)
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_external_tool", Arguments: map[string]any{"tool_name": "every.nope"}})
	if !res.IsError || !strings.Contains(text(res), "TOOL_NOT_FOUND") {
		t.Fatalf("execute unknown tool: %s", text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "search_aggregated_tools", Arguments: map[string]any{"query": "add two numbers sum"}})
	if !strings.Contains(text(res), "every.get-sum") {
		t.Fatalf("search_aggregated_tools: %s", text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "add_mcp_server", Arguments: map[string]any{"name": "Bad Name", "transport_type": "SSE", "connection_config": map[string]any{}}})
	if !res.IsError || !strings.Contains(text(res), "VALIDATION_ERROR") {
		t.Fatalf("add_mcp_server validation: %s", text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "add_mcp_server", Arguments: map[string]any{
		"name": "second", "transport_type": "STDIO", "connection_config": map[string]any{"command": cmd, "args": args}}})
	if res.IsError || !strings.Contains(text(res), `"name":"second"`) {
		t.Fatalf("add_mcp_server: %s", text(res))
	}
	waitFor(t, "second__echo", func() bool { return slices.Contains(c.toolNames(t), "second__echo") })

	// Disconnect: the backend's tools leave tools/list.
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "disconnect_mcp_server", Arguments: map[string]any{"server_id": "every", "force": true}})
	if res.IsError {
		t.Fatalf("disconnect_mcp_server: %s", text(res))
	}
	waitFor(t, "every__echo gone", func() bool { return !slices.Contains(c.toolNames(t), "every__echo") })
	res, err = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "every.echo", Arguments: map[string]any{"message": "x"}})
	if err == nil && !res.IsError {
		t.Fatalf("a call to a disconnected server must fail: %s", text(res))
	}
	res, _ = c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "remove_mcp_server", Arguments: map[string]any{"server_id": "second"}})
	if res.IsError {
		t.Fatalf("remove_mcp_server: %s", text(res))
	}
	waitFor(t, "second__echo gone", func() bool { return !slices.Contains(c.toolNames(t), "second__echo") })
}

// TestSSETransport: the legacy SSE endpoint serves the same server.
func TestSSETransport(t *testing.T) {
	r := newRig(t)
	cmd, args := peertest.EverythingStdio(t)
	r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	c := connect(t, &mcp.SSEClientTransport{Endpoint: r.mux.URL + "/sse"})
	waitFor(t, "every__echo over SSE", func() bool { return slices.Contains(c.toolNames(t), "every__echo") })
	res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "every__echo", Arguments: map[string]any{"message": "over sse"}})
	if err != nil || !strings.Contains(text(res), "over sse") {
		t.Fatalf("call over SSE: %v %+v", err, res)
	}
}

// TestSearchFirstMode: tools/list shows only the meta-tools; a client searches, then calls a tool by the alias or
// the namespaced name the search gave it.
func TestSearchFirstMode(t *testing.T) {
	r := newRig(t)
	ep := mcpserver.New(r.sys, r.store, mcpserver.Options{SearchFirst: true})
	t.Cleanup(ep.Close)
	hs := httptest.NewServer(ep.StreamableHandler())
	t.Cleanup(hs.Close)
	cmd, args := peertest.EverythingStdio(t)
	r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL})
	waitFor(t, "every.echo routable", func() bool { _, ok := r.sys.Routes().Tool("every.echo"); return ok })
	names := c.toolNames(t)
	if len(names) != 9 {
		t.Fatalf("search-first lists %d tools, want the 9 meta-tools: %v", len(names), names)
	}
	var found string
	waitFor(t, "search finds the echo tool", func() bool {
		res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "search_aggregated_tools", Arguments: map[string]any{"query": "echo back a message", "strategy": "direct"}})
		if err != nil || res.IsError {
			return false
		}
		found = text(res)
		return strings.Contains(found, `"alias":"every__echo"`)
	})
	for _, name := range []string{"every__echo", "every.echo"} {
		res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": "unlisted but callable"}})
		if err != nil || res.IsError || !strings.Contains(text(res), "unlisted but callable") {
			t.Fatalf("call %s in search-first mode: %v %s", name, err, text(res))
		}
	}
}
