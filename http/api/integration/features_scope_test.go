package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
)

// featureBackend is a go-sdk streamable HTTP server with one prompt, one resource and one template, and one tool
// unless tools is false.
func featureBackend(t *testing.T, name string, tools bool) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	if tools {
		addEcho(srv, name)
	}
	srv.AddPrompt(&mcp.Prompt{Name: name + "-prompt"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name}}}}, nil
	})
	srv.AddResource(&mcp.Resource{URI: name + "://doc", Name: "doc"}, func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: name}}}, nil
	})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: name + "://item/{id}", Name: "item"}, func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: name}}}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

func addEcho(srv *mcp.Server, name string) {
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

// TestFeatureListingsFollowProfileBindings: GET /servers/{id}/prompts and /resources show a client token bound to
// profiles the prompts, resources and templates of its profiles' servers only (of another server an empty list,
// as /servers/{id}/tools); a server is in a profile when the profile holds one of its tools or a selector names
// the server whole (c has no tools); unbound client tokens and admins see every server's.
func TestFeatureListingsFollowProfileBindings(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+curAdmin, "bot:"+curBot+",free:"+curFree, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Curation: sys, Logger: logger, Tokens: toks})}
	ids := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		r := e.authDo(t, curAdmin, "POST", base+"/servers", `{"name":"`+name+`","transport_type":"HTTP","connection_config":{"base_url":"`+featureBackend(t, name, name != "c")+`"},"auto_connect":true}`)
		if r.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", name, r.status, r.body)
		}
		ids[name] = r.json(t)["id"].(string)
	}
	if r := e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{"selectors":[{"server":"a","tools":["echo"]},{"server":"c"}],"clients":["bot"]}`); r.status != http.StatusCreated {
		t.Fatalf("create profile: %d %s", r.status, r.body)
	}
	total := func(token, id, what string) int {
		t.Helper()
		r := e.authDo(t, token, "GET", base+"/servers/"+id+"/"+what, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s of %s: %d %s", what, id, r.status, r.body)
		}
		var out struct {
			Items []json.RawMessage `json:"items"`
			Total int               `json:"total"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil || len(out.Items) != out.Total {
			t.Fatalf("GET %s of %s: %v %s", what, id, err, r.body)
		}
		return out.Total
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, ok := sys.Routes().Profile("team")
		if ok && p.Count() == 1 && total(curAdmin, ids["a"], "resources") == 2 && total(curAdmin, ids["b"], "resources") == 2 &&
			total(curAdmin, ids["b"], "prompts") == 1 && total(curAdmin, ids["a"], "prompts") == 1 && total(curAdmin, ids["c"], "resources") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("features of a and b never stored, or the profile never built")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tests := []struct {
		token, server string
		prompts, res  int
	}{
		{curBot, "a", 1, 2},
		{curBot, "b", 0, 0}, // outside the bot's profile
		{curBot, "c", 1, 2}, // no tools, named whole by a selector
		{curFree, "b", 1, 2},
		{curAdmin, "b", 1, 2},
	}
	for _, tc := range tests {
		if got := total(tc.token, ids[tc.server], "prompts"); got != tc.prompts {
			t.Errorf("%s: prompts of %s = %d, want %d", tc.token, tc.server, got, tc.prompts)
		}
		if got := total(tc.token, ids[tc.server], "resources"); got != tc.res {
			t.Errorf("%s: resources of %s = %d, want %d", tc.token, tc.server, got, tc.res)
		}
	}
}
