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
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway/exposure"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// wideBackend serves n tools whose descriptions are long enough that a few hundred do not fit a small budget.
func wideBackend(t *testing.T, name string, n int) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	for i := range n {
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("op%03d", i),
			Description: fmt.Sprintf("Operation %d of %s: ", i, name) + strings.Repeat("reads the records it is given and reports what it found. ", 8),
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string", "description": "the record"}}}},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok " + req.Params.Name}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// listAll lists every page of tools/list with the given _meta.
func listAll(t *testing.T, s *mcp.ClientSession, meta mcp.Meta) ([]*mcp.Tool, *mcp.ListToolsResult) {
	t.Helper()
	var all []*mcp.Tool
	var first *mcp.ListToolsResult
	cursor := ""
	for {
		res, err := s.ListTools(context.Background(), &mcp.ListToolsParams{Meta: meta, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = res
		}
		all = append(all, res.Tools...)
		if res.NextCursor == "" {
			return all, first
		}
		cursor = res.NextCursor
	}
}

func listedTokens(tools []*mcp.Tool) int {
	n := 0
	for _, tl := range tools {
		b, _ := json.Marshal(tl)
		n += exposure.Tokens(b)
	}
	return n
}

// TestToolsListWithinTokenBudget: two servers of 80 tools each. Without a budget tools/list serves every tool;
// with one it serves the meta-tools and, within the budget, the caller's recently called tool first, then tools of
// both servers in turn, says how many it left out, and a tool left out is still callable by its alias.
func TestToolsListWithinTokenBudget(t *testing.T) {
	r := newRig(t, mcpserver.Options{TokenBudget: -1})
	for _, n := range []string{"alpha", "beta"} {
		r.register(t, n, map[string]any{"base_url": wideBackend(t, n, 80)}, persistence.TransportHTTP)
	}
	waitFor(t, "160 tools routable", func() bool { total, _ := r.sys.Routes().ToolCounts(); return total == 160 })
	cl := mcp.NewClient(&mcp.Implementation{Name: "budget", Version: "1"}, nil)
	s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor(t, "every tool exposed", func() bool { all, _ := listAll(t, s, nil); return len(all) >= 160 })
	all, _ := listAll(t, s, nil)
	whole := listedTokens(all)

	// The client's recent call comes first in a budgeted answer.
	if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "beta__op079", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("call beta__op079: %v %+v", err, res)
	}
	const budget = 6000
	tools, first := listAll(t, s, mcp.Meta{mcpserver.TokenBudgetMetaKey: budget})
	got := listedTokens(tools)
	if got > budget || got < budget/2 {
		t.Fatalf("a budget of %d served %d tools of about %d tokens (all: %d tools, %d tokens)", budget, len(tools), got, len(all), whole)
	}
	names := map[string]bool{}
	servers := map[string]int{}
	for _, tl := range tools {
		names[tl.Name] = true
		if i := strings.Index(tl.Name, "__"); i > 0 {
			servers[tl.Name[:i]]++
		}
	}
	for _, meta := range []string{"search_aggregated_tools", "execute_external_tool"} {
		if !names[meta] {
			t.Errorf("meta-tool %s not listed under the budget", meta)
		}
	}
	if !names["beta__op079"] {
		t.Errorf("the caller's recently called tool is not listed")
	}
	if servers["alpha"] == 0 || servers["beta"] == 0 || servers["alpha"]+servers["beta"] >= 160 {
		t.Errorf("backend tools listed per server %v, want some of each and not all", servers)
	}
	omitted, _ := first.Meta[mcpserver.OmittedMetaKey].(float64)
	if int(omitted) != 160-servers["alpha"]-servers["beta"] {
		t.Errorf("_meta says %v omitted, %d were", first.Meta[mcpserver.OmittedMetaKey], 160-servers["alpha"]-servers["beta"])
	}
	var left string
	for i := range 80 {
		if n := fmt.Sprintf("alpha__op%03d", i); !names[n] {
			left = n
			break
		}
	}
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: left, Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(text(res), "ok op") {
		t.Fatalf("calling %s, left out of the list: %v %+v", left, err, res)
	}
	// search_aggregated_tools finds what the list left out: each hit's alias (callable at once), a one-line
	// description, its input schema, and how many more matched.
	sres, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "search_aggregated_tools",
		Arguments: map[string]any{"query": "operation records alpha", "limit": 3}})
	if err != nil || sres.IsError {
		t.Fatalf("search: %v %+v", err, sres)
	}
	var answer struct {
		Data struct {
			Tools []struct {
				Alias       string          `json:"alias"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"input_schema"`
			} `json:"tools"`
			Metadata map[string]any `json:"metadata"`
		} `json:"data"`
	}
	found := &answer.Data
	if err := json.Unmarshal([]byte(text(sres)), &answer); err != nil {
		t.Fatalf("search answer %s: %v", text(sres), err)
	}
	if len(found.Tools) != 3 {
		t.Fatalf("search answered %d tools, want 3: %s", len(found.Tools), text(sres))
	}
	for _, h := range found.Tools {
		if h.Alias == "" || len(h.InputSchema) == 0 || strings.Contains(h.Description, "\n") || len([]rune(h.Description)) > 201 {
			t.Errorf("hit %+v: want an alias, a schema and a one-line description of at most 200 characters", h)
		}
	}
	if more, _ := found.Metadata["more_matched"].(float64); more < 1 {
		t.Errorf("metadata %v: want more_matched > 0 (160 tools share these words)", found.Metadata)
	}
	if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: found.Tools[2].Alias, Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("calling the found alias %s: %v %+v", found.Tools[2].Alias, err, res)
	}
	// What the search found is listed from now on, after the recently called tools.
	relisted, _ := listAll(t, s, mcp.Meta{mcpserver.TokenBudgetMetaKey: budget})
	for _, h := range found.Tools {
		if !slices.ContainsFunc(relisted, func(tl *mcp.Tool) bool { return tl.Name == h.Alias }) {
			t.Errorf("%s, found by search, is not listed afterwards", h.Alias)
		}
	}
	// A 2025-11-25 session whose listing is budgeted is told its list changed when a search adds to it.
	changed := make(chan struct{}, 4)
	legacy := mcp.NewClient(&mcp.Implementation{Name: "budget-legacy", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})
	ls, err := legacy.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp?token_budget=" + fmt.Sprint(budget)},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if res, err := ls.CallTool(context.Background(), &mcp.CallToolParams{Name: "search_aggregated_tools",
		Arguments: map[string]any{"query": "operation 42 beta", "limit": 2}}); err != nil || res.IsError {
		t.Fatalf("legacy search: %v %+v", err, res)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("no tools/list_changed after a search added to a budgeted listing")
	}
	// Through the endpoint's URL, and a budget the whole toolset fits: every tool.
	cl2 := mcp.NewClient(&mcp.Implementation{Name: "budget-url", Version: "1"}, nil)
	s2, err := cl2.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp?token_budget=" + fmt.Sprint(budget)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if byURL, _ := listAll(t, s2, nil); len(byURL) >= len(all) || listedTokens(byURL) > budget {
		t.Errorf("token_budget in the URL: %d tools of %d tokens", len(byURL), listedTokens(byURL))
	}
	if big, _ := listAll(t, s, mcp.Meta{mcpserver.TokenBudgetMetaKey: whole * 2}); len(big) != len(all) {
		t.Errorf("a budget the toolset fits listed %d of %d tools", len(big), len(all))
	}
}

// profileViews serves the profile endpoints (/mcp/profiles/{name}) of the rig's endpoint, made with opts.
func profileViews(t *testing.T, r *rig, opts mcpserver.Options) (*mcpserver.Views, *httptest.Server) {
	views := mcpserver.NewViews(r.endpoint, r.sys, r.store, opts)
	t.Cleanup(views.Close)
	mux := http.NewServeMux()
	mux.Handle(mcpserver.ProfilesPrefix, views.ProfileHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return views, hs
}

// TestProfileTokenBudget: a profile's token budget bounds tools/list on its endpoint (/mcp/profiles/{name}), in place
// of the daemon's; a profile without one gets the daemon's, one of 0 is served whole; the client's _meta hint and
// the endpoint URL's token_budget override the profile's; a change of the profile's budget applies at the next
// tools/list.
func TestProfileTokenBudget(t *testing.T) {
	const daemon, profile = 2500, 5000
	opts := mcpserver.Options{TokenBudget: daemon}
	r := newRig(t, opts)
	_, hs := profileViews(t, r, opts)

	r.register(t, "alpha", map[string]any{"base_url": wideBackend(t, "alpha", 80)}, persistence.TransportHTTP)
	ctx := context.Background()
	put := func(name string, budget *int) {
		t.Helper()
		if _, _, err := r.sys.PutProfile(ctx, persistence.Profile{Name: name, TokenBudget: budget,
			Selectors: []persistence.ProfileSelector{{Server: "alpha"}}}); err != nil {
			t.Fatal(err)
		}
	}
	budgetIs := func(name string, want *int) func() bool {
		return func() bool {
			p, ok := r.sys.Routes().Profile(name)
			return ok && p.Count() == 80 && (want == nil) == (p.TokenBudget == nil) && (want == nil || *want == *p.TokenBudget)
		}
	}
	capped, whole := profile, 0
	put("capped", &capped)
	put("whole", &whole)
	put("plain", nil)
	for _, name := range []string{"capped", "whole", "plain"} {
		waitFor(t, name+" holds alpha's 80 tools", budgetIs(name, map[string]*int{"capped": &capped, "whole": &whole}[name]))
	}
	open := func(path string) *mcp.ClientSession {
		t.Helper()
		s, err := mcp.NewClient(&mcp.Implementation{Name: "profile-budget", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: hs.URL + path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	backend := func(tools []*mcp.Tool) int {
		n := 0
		for _, tl := range tools {
			if strings.HasPrefix(tl.Name, "alpha__") {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name, path string
		meta       mcp.Meta
		budget     int // the budget the answer says it was chosen for; 0: not budgeted, every tool listed
	}{
		{"the profile's budget", "/mcp/profiles/capped", nil, profile},
		{"the daemon's, where the profile sets none", "/mcp/profiles/plain", nil, daemon},
		{"no budget: the profile's 0", "/mcp/profiles/whole", nil, 0},
		{"the client's hint over the profile's", "/mcp/profiles/capped", mcp.Meta{mcpserver.TokenBudgetMetaKey: 0}, 0},
		{"the client's hint over the profile's, smaller", "/mcp/profiles/whole", mcp.Meta{mcpserver.TokenBudgetMetaKey: daemon}, daemon},
		{"the URL's over the profile's", "/mcp/profiles/capped?token_budget=0", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(tc.path)
			waitFor(t, "the profile endpoint exposes alpha's tools", func() bool {
				all, _ := listAll(t, s, mcp.Meta{mcpserver.TokenBudgetMetaKey: 0})
				return backend(all) == 80
			})
			tools, first := listAll(t, s, tc.meta)
			got, _ := first.Meta[mcpserver.BudgetMetaKey].(float64)
			if int(got) != tc.budget {
				t.Fatalf("answer chosen for a budget of %v, want %d (%d tools)", first.Meta[mcpserver.BudgetMetaKey], tc.budget, len(tools))
			}
			n, cost := backend(tools), listedTokens(tools)
			if tc.budget == 0 {
				if n != 80 {
					t.Fatalf("listed %d of alpha's 80 tools without a budget", n)
				}
				return
			}
			if n == 0 || n >= 80 || cost > tc.budget || cost < tc.budget/2 {
				t.Fatalf("a budget of %d listed %d of 80 tools, %d tokens", tc.budget, n, cost)
			}
		})
	}
	// A change of the profile's budget applies at the next tools/list of an open session.
	s := open("/mcp/profiles/capped")
	waitFor(t, "the profile endpoint exposes alpha's tools", func() bool {
		all, _ := listAll(t, s, mcp.Meta{mcpserver.TokenBudgetMetaKey: 0})
		return backend(all) == 80
	})
	if tools, _ := listAll(t, s, nil); backend(tools) >= 80 {
		t.Fatalf("capped listed all %d tools before its change", backend(tools))
	}
	put("capped", &whole)
	waitFor(t, "capped's budget removed", budgetIs("capped", &whole))
	if tools, _ := listAll(t, s, nil); backend(tools) != 80 {
		t.Fatalf("after its budget was set to 0, capped listed %d of 80 tools", backend(tools))
	}
}

// TestSearchIncludeSchemas: search_aggregated_tools gives each hit's input schema unless include_schemas is false
// (absent or null: included, unlike REST's search, whose default is false); a non-boolean is a validation error
// naming the field.
func TestSearchIncludeSchemas(t *testing.T) {
	r := newRig(t, mcpserver.Options{TokenBudget: -1})
	r.register(t, "alpha", map[string]any{"base_url": wideBackend(t, "alpha", 5)}, persistence.TransportHTTP)
	waitFor(t, "5 tools routable", func() bool { total, _ := r.sys.Routes().ToolCounts(); return total == 5 })
	s, err := mcp.NewClient(&mcp.Implementation{Name: "schemas", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, tc := range []struct {
		name    string
		include any // absent when nil and !setNull
		setNull bool
		schemas bool
		invalid bool
	}{
		{name: "absent", schemas: true},
		{name: "null", setNull: true, schemas: true},
		{name: "true", include: true, schemas: true},
		{name: "false", include: false},
		{name: "not a boolean", include: "yes", invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"query": "operation records alpha", "limit": 3}
			if tc.include != nil || tc.setNull {
				args["include_schemas"] = tc.include
			}
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "search_aggregated_tools", Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			body := text(res)
			if tc.invalid {
				if !res.IsError || !strings.Contains(body, "VALIDATION_ERROR") || !strings.Contains(body, "include_schemas") {
					t.Fatalf("include_schemas %v: want a validation error naming it, got %s", tc.include, body)
				}
				return
			}
			var answer struct {
				Data struct {
					Tools []struct {
						InputSchema json.RawMessage `json:"input_schema"`
					} `json:"tools"`
				} `json:"data"`
			}
			if res.IsError || json.Unmarshal([]byte(body), &answer) != nil || len(answer.Data.Tools) == 0 {
				t.Fatalf("search: %s", body)
			}
			for _, h := range answer.Data.Tools {
				if got := len(h.InputSchema) > 0 && string(h.InputSchema) != "null"; got != tc.schemas {
					t.Fatalf("include_schemas %v: a hit's schema %s, want one: %v", tc.include, h.InputSchema, tc.schemas)
				}
			}
		})
	}
}

// TestProfileViewsMadeConcurrently: the first requests of several profiles' endpoints at once, several for each,
// are each served by their profile's endpoint, made once (Views.of makes one outside its lock, and a request for
// a view being made waits for it).
func TestProfileViewsMadeConcurrently(t *testing.T) {
	r := newRig(t)
	views, hs := profileViews(t, r, mcpserver.Options{})
	r.register(t, "alpha", map[string]any{"base_url": wideBackend(t, "alpha", 30)}, persistence.TransportHTTP)
	ctx := context.Background()
	const profiles, each = 4, 5
	for i := range profiles {
		name := fmt.Sprintf("p%d", i)
		if _, _, err := r.sys.PutProfile(ctx, persistence.Profile{Name: name,
			Selectors: []persistence.ProfileSelector{{Server: "alpha", Tools: []string{fmt.Sprintf("op%03d", i)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every profile built", func() bool {
		for i := range profiles {
			if p, ok := r.sys.Routes().Profile(fmt.Sprintf("p%d", i)); !ok || p.Count() != 1 {
				return false
			}
		}
		return true
	})
	var wg sync.WaitGroup
	errs := make(chan error, profiles*each)
	for i := range profiles {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := mcp.NewClient(&mcp.Implementation{Name: "views", Version: "1"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("%s%sp%d", hs.URL, mcpserver.ProfilesPrefix, i)}, nil)
				if err != nil {
					errs <- fmt.Errorf("p%d: connect: %w", i, err)
					return
				}
				defer s.Close()
				res, err := s.ListTools(ctx, nil)
				if err != nil {
					errs <- fmt.Errorf("p%d: tools/list: %w", i, err)
					return
				}
				want := fmt.Sprintf("alpha__op%03d", i)
				for _, tl := range res.Tools {
					if strings.HasPrefix(tl.Name, "alpha__") && tl.Name != want {
						errs <- fmt.Errorf("p%d lists %s", i, tl.Name)
						return
					}
					if tl.Name == want {
						return
					}
				}
				errs <- fmt.Errorf("p%d does not list %s", i, want)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := mcpserver.ViewsMade(views); n != profiles {
		t.Errorf("%d endpoints made for %d profiles", n, profiles)
	}
}
