package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

const (
	lcAlice = "alice-client-token-lc01"
	lcCI    = "ci-client-token-lc0001"
)

// toolsBackend is a go-sdk streamable HTTP server with the given tools and prompts (each answering its name).
func toolsBackend(t *testing.T, name string, tools, prompts []string) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	for _, tl := range tools {
		srv.AddTool(&mcp.Tool{Name: tl, Description: "does " + tl, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tl}}}, nil
			})
	}
	for _, p := range prompts {
		srv.AddPrompt(&mcp.Prompt{Name: p}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: p}}}}, nil
		})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// noticed is a go-sdk client session that records the list_changed notifications it gets, in order.
type noticed struct {
	sess *mcp.ClientSession
	mu   sync.Mutex
	got  []string // "tools", "prompts", "resources"
}

func (n *noticed) add(kind string) { n.mu.Lock(); n.got = append(n.got, kind); n.mu.Unlock() }

func (n *noticed) seen() []string { n.mu.Lock(); defer n.mu.Unlock(); return slices.Clone(n.got) }

func (n *noticed) tools(t *testing.T) []string {
	t.Helper()
	var names []string
	for tool, err := range n.sess.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// TestPolicyChangeNotifiesOnlyAffectedCallers: two clients of different identities on the real /mcp endpoint
// (bearer tokens, go-sdk clients over streamable HTTP and legacy SSE, and over the sessionless 2026-07-28 revision
// on their subscriptions/listen streams). A policy change that hides a tool from ci
// sends notifications/tools/list_changed to ci's sessions and to no other; a later change that hides it from alice
// too tells alice and not ci (ci's listing did not change). A later catalogue change (a backend with a prompt only)
// is the barrier: everything sent before it has arrived when its prompts/list_changed has. search_aggregated_tools
// describes, counts and answers only what its caller may see.
func TestPolicyChangeNotifiesOnlyAffectedCallers(t *testing.T) {
	ctx := context.Background()
	st, sys := startSystem(t, actors.Deps{Config: actors.DefaultConfig()})
	opts := mcpserver.Options{RequireIdentity: true,
		Gateway: gateway.New(sys, gateway.Options{Policy: &gateway.Rules{Source: sys}})}
	ep := mcpserver.New(sys, st, opts)
	t.Cleanup(ep.Close)
	views := mcpserver.NewViews(ep, sys, st, opts)
	t.Cleanup(views.Close)
	toks, err := auth.Parse("", "alice:"+lcAlice+",ci:"+lcCI, "")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", views.StreamableHandler())
	mux.Handle("/sse", views.SSEHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	raw, _ := json.Marshal(map[string]any{"base_url": toolsBackend(t, "fs", []string{"read_file", "write_file"}, nil)})
	if _, err := sys.Register(ctx, actors.RegisterRequest{Name: "fs", TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fs's tools routable", func() bool {
		_, ok := sys.Routes().Tool("fs.write_file")
		return ok
	})
	// The endpoint follows fs's arrival on its own time: it adds fs's tools to its go-sdk server, and re-renders
	// search_aggregated_tools' description (at most once per second, so up to a second after the table changed).
	// Each change notifies the sessions open at that moment with tools/list_changed, indistinguishable from the
	// policy's. The sessions open only once the endpoint has followed the whole catalogue: no notification of
	// fs's arrival is then pending for them.
	waitFor(t, "the endpoint exposes and describes fs's tools", func() bool {
		d := mcpserver.ToolDescriptions(ep)
		_, read := d["fs__read_file"]
		_, write := d["fs__write_file"]
		return read && write && strings.Contains(d["search_aggregated_tools"], "holds 2 tools of 1 servers: fs (2)")
	})
	open := func(token string, sse, modern bool) *noticed {
		n := &noticed{}
		cl := mcp.NewClient(&mcp.Implementation{Name: "lc", Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { n.add("tools") },
			PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { n.add("prompts") },
			ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { n.add("resources") },
		})
		hc := &http.Client{Transport: bearer{token}}
		var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc}
		if sse {
			tr = &mcp.SSEClientTransport{Endpoint: hs.URL + "/sse", HTTPClient: hc}
		}
		version := actors.ProtocolVersion
		if modern {
			version = mcpserver.ModernProtocol
		}
		sess, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		if got := sess.InitializeResult().ProtocolVersion; got != version {
			t.Fatalf("negotiated %s, want %s", got, version)
		}
		t.Cleanup(func() { sess.Close() })
		n.sess = sess
		return n
	}
	alice, ci, ciSSE := open(lcAlice, false, false), open(lcCI, false, false), open(lcCI, true, false)
	// The same two callers over the sessionless revision, each on its subscriptions/listen stream.
	aliceModern, ciModern := open(lcAlice, false, true), open(lcCI, false, true)
	all := []*noticed{alice, ci, ciSSE, aliceModern, ciModern}
	for _, c := range all {
		waitFor(t, "both tools listed", func() bool { return slices.Contains(c.tools(t), "fs__write_file") })
	}
	before := map[*noticed]int{}
	for _, c := range all {
		before[c] = len(c.seen())
	}
	put := func(rules ...policy.Rule) {
		t.Helper()
		if _, _, err := sys.PutAccessPolicy(ctx, policy.Document{Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	// barrier adds a server with a prompt only (no tool): every session gets prompts/list_changed after whatever
	// the endpoint sent it before, and no tools/list_changed.
	barrierN := 0
	barrier := func() {
		t.Helper()
		barrierN++
		name := []string{"", "p1", "p2"}[barrierN]
		raw, _ := json.Marshal(map[string]any{"base_url": toolsBackend(t, name, nil, []string{"hello"})})
		if _, err := sys.Register(ctx, actors.RegisterRequest{Name: name, TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true}); err != nil {
			t.Fatal(err)
		}
		for _, c := range all {
			waitFor(t, "the barrier's prompts/list_changed", func() bool {
				n := 0
				for _, k := range c.seen() {
					if k == "prompts" {
						n++
					}
				}
				return n >= barrierN
			})
		}
	}
	toolsSince := func(c *noticed) int {
		n := 0
		for _, k := range c.seen()[before[c]:] {
			if k == "tools" {
				n++
			}
		}
		return n
	}

	// 1. ci may no longer see write_file: ci's two sessions are told, alice's is not.
	put(policy.Rule{Name: "ci-no-writes", Effect: policy.Deny, When: `subject == "ci" && tool == "write_file"`})
	barrier()
	counts := func() []int {
		out := make([]int, len(all))
		for i, c := range all {
			out[i] = toolsSince(c)
		}
		return out
	}
	const order = "alice, ci (streamable), ci (SSE), alice (2026-07-28), ci (2026-07-28)"
	if got := counts(); !slices.Equal(got, []int{0, 1, 1, 0, 1}) {
		t.Fatalf("tools/list_changed after hiding a tool from ci: %v (%s), want [0 1 1 0 1]", got, order)
	}
	if got := ci.tools(t); slices.Contains(got, "fs__write_file") || !slices.Contains(got, "fs__read_file") {
		t.Fatalf("ci lists %v after the change", got)
	}
	if got := alice.tools(t); !slices.Contains(got, "fs__write_file") {
		t.Fatalf("alice lists %v after the change", got)
	}
	// search_aggregated_tools counts, names and answers only what the caller may see: its description, and a
	// search whose best match is hidden from ci still answers limit (1) tool.
	describe := func(c *noticed) string {
		for tool, err := range c.sess.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if tool.Name == "search_aggregated_tools" {
				return tool.Description
			}
		}
		return ""
	}
	if d := describe(ci); !strings.Contains(d, "holds 1 tools of 1 servers: fs (1)") {
		t.Errorf("ci's search tool says %q", d)
	}
	if d := describe(alice); !strings.Contains(d, "holds 2 tools of 1 servers: fs (2)") {
		t.Errorf("alice's search tool says %q", d)
	}
	search := func(c *noticed) []string {
		res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: "search_aggregated_tools",
			Arguments: map[string]any{"query": "write_file", "limit": 1, "strategy": "direct"}})
		if err != nil || res.IsError {
			t.Fatalf("search: %v %+v", err, res)
		}
		var out struct {
			Data struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
				Metadata map[string]any `json:"metadata"`
			} `json:"data"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		var names []string
		for _, tl := range out.Data.Tools {
			names = append(names, tl.Name)
		}
		return append(names, fmt.Sprint(out.Data.Metadata["total_tools_searched"]))
	}
	waitFor(t, "fs's tools indexed", func() bool { return slices.Equal(search(alice), []string{"fs.write_file", "2"}) })
	if got := search(ci); !slices.Equal(got, []string{"fs.read_file", "1"}) {
		t.Errorf("ci's search for write_file answers %v, want fs.read_file of 1 tool searched", got)
	}

	// 2. Nobody may write: alice is told; ci's listing is what it was, so ci is not.
	put(policy.Rule{Name: "ci-no-writes", Effect: policy.Deny, When: `subject == "ci" && tool == "write_file"`},
		policy.Rule{Name: "no-writes", Effect: policy.Deny, When: `tool == "write_file"`})
	barrier()
	if got := counts(); !slices.Equal(got, []int{1, 1, 1, 1, 1}) {
		t.Fatalf("tools/list_changed after hiding the tool from everyone: %v (%s), want [1 1 1 1 1]", got, order)
	}
	if got := alice.tools(t); slices.Contains(got, "fs__write_file") {
		t.Fatalf("alice lists %v after the second change", got)
	}
}
