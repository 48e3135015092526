package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/mcpserver"
)

// wideTools serves n tools whose descriptions are long enough that a few dozen do not fit a small token budget.
func wideTools(t *testing.T, n int) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "wide", Version: "1"}, nil)
	for i := range n {
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("op%02d", i),
			Description: fmt.Sprintf("Operation %d: ", i) + strings.Repeat("reads the records it is given and reports what it found. ", 8),
			InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestProfileBudgetChangeNotifies: a client connected to /mcp/profiles/{name} with a go-sdk session gets
// notifications/tools/list_changed when the profile's token_budget is changed through the REST API (PUT
// /profiles/{name}) so that its listing changes, and its next tools/list follows the new budget; likewise when its
// selectors change which tools it exposes; the client of another profile hears nothing of either.
func TestProfileBudgetChangeNotifies(t *testing.T) {
	const tools, capped, smaller = 60, 6000, 2500
	st, sys, logger := startSystem(t)
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Curation: sys, Logger: logger})}
	ep := mcpserver.New(sys, st, mcpserver.Options{Logger: logger})
	t.Cleanup(ep.Close)
	views := mcpserver.NewViews(ep, sys, st, mcpserver.Options{Logger: logger})
	t.Cleanup(views.Close)
	mux := http.NewServeMux()
	mux.Handle(mcpserver.ProfilesPrefix, views.ProfileHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	if r := e.do(t, "POST", base+"/servers", `{"name":"wide","transport_type":"HTTP","connection_config":{"base_url":"`+wideTools(t, tools)+`"},"auto_connect":true}`); r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	putBudget := func(name string, budget int, want int) {
		t.Helper()
		body := fmt.Sprintf(`{"selectors":[{"server":"wide"}],"token_budget":%d}`, budget)
		if r := e.do(t, "PUT", base+"/profiles/"+name, body); r.status != want {
			t.Fatalf("PUT profile %s: %d %s", name, r.status, r.body)
		}
	}
	putBudget("capped", capped, http.StatusCreated)
	putBudget("other", capped, http.StatusCreated)

	type client struct {
		s       *mcp.ClientSession
		changed chan struct{}
	}
	open := func(name string) client {
		t.Helper()
		c := client{changed: make(chan struct{}, 64)}
		cl := mcp.NewClient(&mcp.Implementation{Name: "budget-" + name, Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.changed <- struct{}{} }})
		s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + mcpserver.ProfilesPrefix + name},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		c.s = s
		return c
	}
	// list is the backend tools of one tools/list and the budget its answer says it was chosen for (0: none).
	list := func(c client, meta mcp.Meta) (int, int) {
		t.Helper()
		res, err := c.s.ListTools(context.Background(), &mcp.ListToolsParams{Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tl := range res.Tools {
			if strings.HasPrefix(tl.Name, "wide__") {
				n++
			}
		}
		b, _ := res.Meta[mcpserver.BudgetMetaKey].(float64)
		return n, int(b)
	}
	cappedC, otherC := open("capped"), open("other")
	for _, c := range []client{cappedC, otherC} {
		waitFor(t, "the profile endpoint exposes the 60 tools", func() bool {
			n, _ := list(c, mcp.Meta{mcpserver.TokenBudgetMetaKey: 0})
			return n == tools
		})
	}
	if n, b := list(cappedC, nil); b != capped || n == 0 || n >= tools {
		t.Fatalf("before the change: %d of %d tools for a budget of %d", n, tools, b)
	}
	// Let the notifications of the tools' arrival pass, then count only the budget's.
	time.Sleep(500 * time.Millisecond)
	drain := func(c client) int {
		n := 0
		for {
			select {
			case <-c.changed:
				n++
			default:
				return n
			}
		}
	}
	drain(cappedC)
	drain(otherC)
	await := func(c client, what string) {
		t.Helper()
		select {
		case <-c.changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notifications/tools/list_changed after %s", what)
		}
	}

	for _, step := range []struct {
		budget int
		check  func(n, b int) bool
	}{
		{0, func(n, b int) bool { return n == tools && b == 0 }},
		{smaller, func(n, b int) bool { return b == smaller && n > 0 && n < tools }},
	} {
		putBudget("capped", step.budget, http.StatusOK)
		await(cappedC, fmt.Sprintf("the budget was set to %d", step.budget))
		if n, b := list(cappedC, nil); !step.check(n, b) {
			t.Fatalf("after the budget was set to %d: %d of %d tools for a budget of %d", step.budget, n, tools, b)
		}
	}
	// A change of its selectors changes which tools the profile exposes: told alike (by the go-sdk, whose tool set
	// changed), and the next tools/list has only the selected tools.
	if r := e.do(t, "PUT", base+"/profiles/capped", `{"selectors":[{"server":"wide","tools":["op0*"]}],"token_budget":0}`); r.status != http.StatusOK {
		t.Fatalf("PUT profile capped: %d %s", r.status, r.body)
	}
	await(cappedC, "its selectors were narrowed")
	waitFor(t, "capped lists op00 to op09 only", func() bool { n, b := list(cappedC, nil); return n == 10 && b == 0 })
	time.Sleep(300 * time.Millisecond) // a stray notification would have reached the other client by now
	if n := drain(otherC); n != 0 {
		t.Fatalf("the other profile's client was told %d times of capped's change", n)
	}
}
