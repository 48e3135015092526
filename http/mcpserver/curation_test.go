package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/persistence"
)

// TestCurationMetaTool: manage_tool_curation applies a filter and an override that the endpoint serves at once,
// shows them with the pinning settings, refuses bad settings with the field, and manages profiles.
func TestCurationMetaTool(t *testing.T) {
	r := newRig(t)
	srv := mcp.NewServer(&mcp.Implementation{Name: "b", Version: "1"}, nil)
	for _, n := range []string{"keep_me", "drop_me"} {
		srv.AddTool(&mcp.Tool{Name: n, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	r.register(t, "cur", map[string]any{"base_url": hs.URL}, persistence.TransportHTTP)
	c := connect(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	has := func(name string) bool {
		for _, n := range c.toolNames(t) {
			if n == name {
				return true
			}
		}
		return false
	}
	waitFor(t, "tools listed", func() bool { return has("cur__drop_me") })
	curate := func(args map[string]any) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := c.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res, text(res)
	}
	if res, out := curate(map[string]any{"action": "set_filter", "server_id": "cur", "settings": map[string]any{"mode": "deny", "patterns": []string{"drop_*"}}}); res.IsError {
		t.Fatalf("set_filter: %s", out)
	}
	waitFor(t, "drop_me hidden", func() bool { return !has("cur__drop_me") && has("cur__keep_me") })
	if res, out := curate(map[string]any{"action": "set_override", "server_id": "cur", "tool": "keep_me", "settings": map[string]any{"exposed_name": "kept"}}); res.IsError {
		t.Fatalf("set_override: %s", out)
	}
	waitFor(t, "renamed", func() bool { return has("kept") && !has("cur__keep_me") })
	if res, out := curate(map[string]any{"action": "show", "server_id": "cur"}); res.IsError || !strings.Contains(out, `"drop_*"`) || !strings.Contains(out, `"kept"`) || !strings.Contains(out, `"pinning":true`) {
		t.Fatalf("show: %s", out)
	}
	if res, out := curate(map[string]any{"action": "set_filter", "server_id": "cur", "settings": map[string]any{"mode": "sometimes"}}); !res.IsError || !strings.Contains(out, "VALIDATION_ERROR") || !strings.Contains(out, "mode") {
		t.Fatalf("bad settings: %s", out)
	}
	if res, out := curate(map[string]any{"action": "put_profile", "profile": "p1", "settings": map[string]any{"selectors": []any{map[string]any{"server": "cur"}}}}); res.IsError {
		t.Fatalf("put_profile: %s", out)
	}
	if res, out := curate(map[string]any{"action": "list_profiles"}); res.IsError || !strings.Contains(out, `"p1"`) {
		t.Fatalf("list_profiles: %s", out)
	}
	if res, out := curate(map[string]any{"action": "approve_change", "server_id": "cur", "tool": "keep_me"}); !res.IsError || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("approve without a pending change: %s", out)
	}
	if res, out := curate(map[string]any{"action": "delete_profile", "profile": "p1"}); res.IsError {
		t.Fatalf("delete_profile: %s", out)
	}
	if res, out := curate(map[string]any{"action": "delete_profile", "profile": "p1"}); !res.IsError || !strings.Contains(out, "PROFILE_NOT_FOUND") {
		t.Fatalf("delete a missing profile: %s", out)
	}
}
