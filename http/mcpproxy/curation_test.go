package mcpproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/persistence"
)

const (
	curAdmin = "admin-secret-token-prox1"
	curBot   = "bot-client-token-prox01"
	curFree  = "free-client-token-prox1"
)

// curatedBackend is a go-sdk streamable HTTP server whose tools answer their own name.
func curatedBackend(t *testing.T, tools map[string]string) (*mcp.Server, string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "curated", Version: "1"}, nil)
	for name, desc := range tools {
		addNamed(srv, name, desc)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func addNamed(srv *mcp.Server, name, desc string) {
	srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// descriptions lists a session's tools: name -> description.
func descriptions(t *testing.T, cs *mcp.ClientSession) map[string]string {
	t.Helper()
	out := map[string]string{}
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatalf("list tools: %v", err)
		}
		out[tool.Name] = tool.Description
	}
	return out
}

func waitTools(t *testing.T, who string, cs *mcp.ClientSession, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := descriptions(t, cs)
		if len(got) == len(want) && func() bool {
			for k, v := range want {
				if d, ok := got[k]; !ok || d != v {
					return false
				}
			}
			return true
		}() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %v, want %v", who, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProxyAppliesCuration: /mcp/servers/{name} serves what /mcp serves of the server. Tool filters and definition
// pinning apply to every caller (a hidden or withheld tool is neither listed nor callable: -32602 unknown tool, as
// the go-sdk answers; a held change is served as its approved definition; an override's description applies);
// a client token bound to profiles lists and calls its profiles' tools only, and gets 403 FORBIDDEN for a server
// none of them contains. Changes of the curation reach open sessions.
func TestProxyAppliesCuration(t *testing.T) {
	r := newRig(t, mcpproxy.Options{})
	ctx := context.Background()
	back, url := curatedBackend(t, map[string]string{"echo": "echo v1", "get-env": "env", "secret-key": "secret", "changing": "changing v1"})
	ev := r.register("ev", persistence.TransportHTTP, map[string]any{"base_url": url})
	_, other := curatedBackend(t, map[string]string{"other": "other"})
	r.register("b", persistence.TransportHTTP, map[string]any{"base_url": other})

	toks, err := auth.Parse("ops:"+curAdmin, "bot:"+curBot+",free:"+curFree, "")
	if err != nil {
		t.Fatal(err)
	}
	proxy := mcpproxy.New(r.sys, mcpproxy.Options{})
	t.Cleanup(proxy.Close)
	mux := http.NewServeMux()
	mux.Handle(mcpproxy.Prefix, proxy)
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)
	connect := func(token, server string) (*mcp.ClientSession, error) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "cur", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: hs.URL + mcpproxy.Prefix + server, HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: 1},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err == nil {
			t.Cleanup(func() { _ = cs.Close() })
		}
		return cs, err
	}

	// Curation: a deny filter, an override's description, pinning (new tools withheld), a profile for bot.
	if _, err := r.sys.SetToolPolicy(ctx, ev.ID, persistence.ToolPolicyPatch{Filter: &persistence.ToolFilter{Mode: persistence.FilterDeny, Patterns: []string{"secret-*"}},
		Pinning: ptr(true), PinNewTools: ptr(persistence.PinNewWithhold)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sys.PutToolOverride(ctx, persistence.ToolOverride{ServerID: ev.ID, OriginalName: "echo", Description: ptr("echo, curated")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.sys.PutProfile(ctx, persistence.Profile{Name: "team", Selectors: []persistence.ProfileSelector{{Server: "ev", Tools: []string{"echo", "changing"}}},
		Clients: []string{"bot"}}); err != nil {
		t.Fatal(err)
	}
	// The backend changes a tool (held for approval) and adds one (withheld).
	addNamed(back, "changing", "changing v2 UNAPPROVED")
	addNamed(back, "newbie", "new")
	deadline := time.Now().Add(30 * time.Second)
	for {
		set, err := r.store.ListToolPins(ctx, ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, p := range set.Pins {
			if p.PendingHash != "" {
				pending++
			}
		}
		if pending == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the change and the new tool were never held: %+v", set.Pins)
		}
		time.Sleep(50 * time.Millisecond)
	}
	served := map[string]string{"echo": "echo, curated", "get-env": "env", "changing": "changing v1"}

	unknown := func(who string, cs *mcp.ClientSession, tool string) {
		t.Helper()
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, "unknown tool") {
			t.Errorf("%s calls %s: %v, want -32602 unknown tool", who, tool, err)
		}
	}
	calls := func(who string, cs *mcp.ClientSession, tool string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		if err != nil || res.IsError || text(t, res) != tool {
			t.Errorf("%s calls %s: %v %+v", who, tool, err, res)
		}
	}
	// Every caller (admin, unbound client token, auth off) gets the curated tools.
	admin, err := connect(curAdmin, "ev")
	if err != nil {
		t.Fatal(err)
	}
	free, err := connect(curFree, "ev")
	if err != nil {
		t.Fatal(err)
	}
	open := r.connect("ev", nil)
	for who, cs := range map[string]*mcp.ClientSession{"admin": admin, "free": free, "auth off": open} {
		waitTools(t, who, cs, served)
		unknown(who, cs, "secret-key")
		unknown(who, cs, "newbie")
		calls(who, cs, "get-env")
		calls(who, cs, "echo")
	}
	// The bound token: its profile's tools only, and no server outside its profiles.
	bot, err := connect(curBot, "ev")
	if err != nil {
		t.Fatal(err)
	}
	waitTools(t, "bot", bot, map[string]string{"echo": "echo, curated", "changing": "changing v1"})
	unknown("bot", bot, "get-env")
	unknown("bot", bot, "secret-key")
	calls("bot", bot, "echo")
	if _, err := connect(curBot, "b"); err == nil {
		t.Error("a bound client opened a session to a server outside its profiles")
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+mcpproxy.Prefix+"b", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+curBot)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || body["error_code"] != apierror.CodeForbidden {
		t.Errorf("bound client on a server outside its profiles: %d %v, want 403 %s", resp.StatusCode, body, apierror.CodeForbidden)
	}
	if _, err := connect(curFree, "b"); err != nil {
		t.Errorf("an unbound client on b: %v", err)
	}

	// Curation changes reach open sessions: the filter removed, the change approved, the binding widened.
	if _, err := r.sys.SetToolPolicy(ctx, ev.ID, persistence.ToolPolicyPatch{Filter: &persistence.ToolFilter{}}); err != nil {
		t.Fatal(err)
	}
	set, err := r.store.ListToolPins(ctx, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range set.Pins {
		if p.OriginalName == "changing" {
			if _, err := r.sys.ResolveToolChange(ctx, ev.ID, "changing", true, p.PendingHash); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := r.sys.PutProfile(ctx, persistence.Profile{Name: "team", Selectors: []persistence.ProfileSelector{{Server: "ev", Tools: []string{"echo", "changing", "get-env"}}},
		Clients: []string{"bot"}}); err != nil {
		t.Fatal(err)
	}
	now := map[string]string{"echo": "echo, curated", "get-env": "env", "changing": "changing v2 UNAPPROVED", "secret-key": "secret"}
	waitTools(t, "admin after the change", admin, now)
	calls("admin", admin, "secret-key")
	waitTools(t, "bot after the change", bot, map[string]string{"echo": "echo, curated", "get-env": "env", "changing": "changing v2 UNAPPROVED"})
	calls("bot", bot, "get-env")
	waitTools(t, "auth off after the change", open, now)
}

func ptr[T any](v T) *T { return &v }
