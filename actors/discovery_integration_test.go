package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// waitRoutes polls the routing table until cond holds.
func waitRoutes(t *testing.T, sys *actors.System, within time.Duration, what string, cond func(*routing.RouteTable) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond(sys.Routes()) {
		if time.Now().After(deadline) {
			t.Fatalf("routing table never showed %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasTool(name string) func(*routing.RouteTable) bool {
	return func(rt *routing.RouteTable) bool { _, ok := rt.Tool(name); return ok }
}

func TestDiscoveryRoutingAndProgress(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	alpha := r.register("alpha", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	beta := r.register("beta", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "alpha.echo and beta.echo", func(rt *routing.RouteTable) bool {
		return hasTool("alpha.echo")(rt) && hasTool("beta.echo")(rt)
	})
	s, _ := r.store.GetServer(context.Background(), alpha.ID)
	if s.ToolCount < 12 {
		t.Fatalf("tool_count %d, want server-everything's 12+", s.ToolCount)
	}

	// BR-009: the bare name is ambiguous, each namespaced name routes to its server.
	var amb *routing.AmbiguousToolError
	if _, err := r.sys.Routes().Resolve("echo", ""); !errors.As(err, &amb) || len(amb.ServerIDs) != 2 {
		t.Fatalf("bare echo: want ambiguity, got %v", err)
	}
	for _, srv := range []persistence.Server{alpha, beta} {
		route, err := r.sys.Routes().Resolve(srv.Name+".echo", "")
		if err != nil || route.ServerID != srv.ID || route.Tool != "echo" {
			t.Fatalf("resolve %s.echo: %+v %v", srv.Name, route, err)
		}
		rep, err := r.sys.Call(context.Background(), route, []byte(`{"message":"via `+srv.Name+`"}`), nil)
		if err != nil || rep.Error != nil || !strings.Contains(string(rep.ResultJson), "via "+srv.Name) {
			t.Fatalf("call %s.echo: %s %v %v", srv.Name, rep.GetResultJson(), rep.GetError(), err)
		}
	}

	// Progress notifications of a long call reach the caller while the call runs.
	route, _ := r.sys.Routes().Resolve("alpha.trigger-long-running-operation", "")
	var mu sync.Mutex
	var progress []*pb.Progress
	var firstAt time.Time
	start := time.Now()
	rep, err := r.sys.Call(context.Background(), route, []byte(`{"duration":2,"steps":4}`), func(p *pb.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
		progress = append(progress, p)
	})
	done := time.Now()
	if err != nil || rep.Error != nil {
		t.Fatalf("long call: %v %v", err, rep.GetError())
	}
	mu.Lock()
	if len(progress) < 3 || firstAt.Sub(start) > done.Sub(start)/2 {
		t.Fatalf("got %d progress notifications, first after %v of %v: progress must stream during the call", len(progress), firstAt.Sub(start), done.Sub(start))
	}
	mu.Unlock()

	// Disconnected: the tools stay stored but leave the callable set; a call is refused with the status.
	if _, err := r.sys.Disconnect(context.Background(), beta.ID, true); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "beta not callable", func(rt *routing.RouteTable) bool {
		for _, e := range rt.Callable() {
			if e.SourceServerID == beta.ID {
				return false
			}
		}
		return true
	})
	if c, _ := r.store.CountTools(context.Background(), beta.ID); c.Total < 12 {
		t.Fatalf("tools of a disconnected server must stay stored (BR-007), have %d", c.Total)
	}
	route, err = r.sys.Routes().Resolve("beta.echo", "")
	if err != nil || route.ServerStatus != persistence.StatusDisconnected {
		t.Fatalf("beta.echo: %+v %v", route, err)
	}
	if rep, _ := r.sys.Call(context.Background(), route, []byte(`{"message":"x"}`), nil); rep.GetError().GetCode() != errcode.ServerUnavailable {
		t.Fatalf("call to a disconnected server: %v", rep)
	}
	if err := r.sys.RefreshTools(context.Background(), beta.ID); err == nil {
		t.Fatalf("refresh of a disconnected server must be refused")
	}

	// Rename: every tool follows the new name.
	newName := "gamma"
	if _, err := r.sys.Update(context.Background(), beta.ID, persistence.ServerPatch{Name: &newName}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "gamma.echo", hasTool("gamma.echo"))
	if _, ok := r.sys.Routes().Tool("beta.echo"); ok {
		t.Fatalf("old namespaced name still routes after rename")
	}

	// Removal takes the tools out of the table and the store.
	if err := r.sys.Remove(context.Background(), alpha.ID); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "alpha gone", func(rt *routing.RouteTable) bool { return !hasTool("alpha.echo")(rt) })
	if route, err := r.sys.Routes().Resolve("echo", ""); err != nil || route.ServerID != beta.ID {
		t.Fatalf("with alpha gone, echo resolves uniquely to gamma: %+v %v", route, err)
	}
}

// manyTools starts an in-process go-sdk streamable HTTP backend with n tools.
func manyTools(t testing.TB, n int) (*mcp.Server, string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "many", Version: "1"}, nil)
	for i := 0; i < n; i++ {
		addTool(srv, fmt.Sprintf("tool_%04d", i), "does thing number "+fmt.Sprint(i))
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func addTool(srv *mcp.Server, name, desc string) {
	srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

// TestLargeDiscoveryAndListChanged: a 1,000-tool server is discovered completely (paging to the end), and a tool
// added or changed at run time is picked up through notifications/tools/list_changed, recorded as changed.
// The waits are generous: under -race on a loaded CI machine a 1,000-tool rediscovery takes seconds.
func TestLargeDiscoveryAndListChanged(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	backend, url := manyTools(t, 1000)
	start := time.Now()
	s := r.register("many", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "1000 tools", func(rt *routing.RouteTable) bool {
		return hasTool("many.tool_0000")(rt) && hasTool("many.tool_0999")(rt)
	})
	t.Logf("1000 tools registered+connected+discovered in %v", time.Since(start))
	if got, _ := r.store.GetServer(context.Background(), s.ID); got.ToolCount != 1000 {
		t.Fatalf("tool_count %d", got.ToolCount)
	}

	addTool(backend, "tool_new", "arrived later")
	waitRoutes(t, r.sys, 30*time.Second, "tool_new after list_changed", hasTool("many.tool_new"))

	before, _ := r.sys.Routes().Tool("many.tool_0001")
	addTool(backend, "tool_0001", "now does something else") // replaces: a changed definition
	// Pinning is on by default: the change is held and the approved definition stays served until approved.
	deadline := time.Now().Add(30 * time.Second)
	for {
		set, err := r.store.ListToolPins(context.Background(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(set.Pins, func(p persistence.ToolPin) bool { return p.OriginalName == "tool_0001" }); i >= 0 && set.Pins[i].PendingHash != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the changed definition was never held")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the router reloads after the held change was stored
	if e, _ := r.sys.Routes().Tool("many.tool_0001"); e.Description != "does thing number 1" {
		t.Fatalf("a held change was served: %q", e.Description)
	}
	if _, err := r.sys.ResolveToolChange(context.Background(), s.ID, "tool_0001", true, ""); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 30*time.Second, "changed description", func(rt *routing.RouteTable) bool {
		e, ok := rt.Tool("many.tool_0001")
		return ok && e.Description == "now does something else"
	})
	after, _ := r.sys.Routes().Tool("many.tool_0001")
	if after.ChangedAt == nil || after.ID != before.ID || after.DefinitionHash == before.DefinitionHash {
		t.Fatalf("a changed tool keeps its id and gets changed_at and a new hash: before %+v after %+v", before.Tool, after.Tool)
	}
	backend.RemoveTools("tool_0002")
	waitRoutes(t, r.sys, 30*time.Second, "removed tool gone", func(rt *routing.RouteTable) bool { return !hasTool("many.tool_0002")(rt) })
}

// TestCallerCancelCancelsBackendCall: when the caller's context ends mid-call, the backend sees its request
// cancelled (notifications/cancelled), and the server's call count drains.
func TestCallerCancelCancelsBackendCall(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	cancelled := make(chan struct{}, 1)
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-ctx.Done():
				cancelled <- struct{}{}
			case <-time.After(10 * time.Second):
			}
			return &mcp.CallToolResult{}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	s := r.register("slowsrv", persistence.TransportHTTP, map[string]any{"base_url": hs.URL}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "slowsrv.slow", hasTool("slowsrv.slow"))
	route, _ := r.sys.Routes().Resolve("slowsrv.slow", "")

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := r.sys.Call(ctx, route, []byte(`{}`), nil)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancelled call: %v after %v", err, time.Since(start))
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatalf("the backend never saw the call cancelled")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := r.sys.Status(context.Background(), s.ID)
		if err == nil && st.PendingRequests == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending calls never drained: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBackendDiesMidCall (EC-003): the caller gets SERVER_UNAVAILABLE saying what was in progress, and the server
// is reconnected without an admin.
func TestBackendDiesMidCall(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("midcall-marker-%d", time.Now().UnixNano())
	s := r.register("dying", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "dying.trigger-long-running-operation", hasTool("dying.trigger-long-running-operation"))
	route, _ := r.sys.Routes().Resolve("dying.trigger-long-running-operation", "")
	time.AfterFunc(500*time.Millisecond, func() {
		for _, pid := range peertest.ProcessesWithArg(marker) {
			_ = syscallKill(pid)
		}
	})
	start := time.Now()
	rep, err := r.sys.Call(context.Background(), route, []byte(`{"duration":5,"steps":5}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable || !strings.Contains(rep.Error.Message, "trigger-long-running-operation") {
		t.Fatalf("want SERVER_UNAVAILABLE naming the call in progress, got %+v", rep)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the caller waited %v for a dead backend", took)
	}
	r.waitStatus(s.ID, persistence.StatusError, 5*time.Second)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
}
