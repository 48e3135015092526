package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// switchableBackend is an in-process go-sdk streamable HTTP backend whose tool list can change and which can be
// taken down (every request answered 503) and brought back up.
type switchableBackend struct {
	url  string
	down atomic.Bool
	srv  atomic.Pointer[mcp.Server]
}

func newSwitchableBackend(t *testing.T, tools ...string) *switchableBackend {
	b := &switchableBackend{}
	b.serve(tools...)
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b.srv.Load() }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	b.url = hs.URL
	return b
}

// serve makes new sessions list these tools.
func (b *switchableBackend) serve(tools ...string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "switchable", Version: "1"}, nil)
	for _, name := range tools {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	b.srv.Store(srv)
}

// connectedWatch records, at the moment each CONNECTED of a server is published, which of its tools the routing
// table could call: the event is published only after the status is stored, so what it sees is what any reader of
// the status sees at least.
type connectedWatch struct {
	mu   sync.Mutex
	seen [][]string // per CONNECTED: the server's callable tools
}

func watchConnected(t *testing.T, sys *actors.System, name string) *connectedWatch {
	w := &connectedWatch{}
	es := sys.ActorSystem().EventStream
	sub := es.Subscribe(func(evt any) {
		e, ok := evt.(*pb.ServerStatusChanged)
		if !ok || e.ServerName != name || e.To != persistence.StatusConnected {
			return
		}
		var tools []string
		for _, tool := range sys.Routes().Callable() {
			if tool.SourceServerID == e.ServerId {
				tools = append(tools, tool.OriginalName)
			}
		}
		w.mu.Lock()
		w.seen = append(w.seen, tools)
		w.mu.Unlock()
	})
	t.Cleanup(func() { es.Unsubscribe(sub) })
	return w
}

// waitConnected waits for the n-th CONNECTED and returns the tools callable at that moment.
func (w *connectedWatch) waitConnected(t *testing.T, n int, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		if len(w.seen) >= n {
			tools := w.seen[n-1]
			w.mu.Unlock()
			return tools
		}
		w.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("CONNECTED #%d not seen within %v", n, within)
	return nil
}

// TestConnectedOnlyOnceToolsAreRouted (issue 24, item 6): a server enters CONNECTED only once its first discovery
// is in the routing table: the CONNECTED event and the stored row find its tools callable, on the first connect, on
// a reconnect after ERROR (with the tools the new session lists), and a server without tools still connects.
func TestConnectedOnlyOnceToolsAreRouted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		tools     []string
		reconnect []string // nil: no reconnect; else the tools the backend lists after it comes back
	}{
		{name: "with-tools", tools: []string{"alpha", "beta"}},
		{name: "no-tools", tools: nil},
		{name: "reconnect-after-error", tools: []string{"alpha"}, reconnect: []string{"gamma"}},
	}
	cfg := testConfig()
	cfg.KeepAlive = 200 * time.Millisecond
	r := newRig(t, cfg)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newSwitchableBackend(t, tc.tools...)
			w := watchConnected(t, r.sys, tc.name)
			s := r.register(tc.name, persistence.TransportHTTP, map[string]any{"base_url": b.url, "allow_insecure_http": true}, nil, true)
			// A reader polling the row: when it says CONNECTED, the tools are callable.
			r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
			if got := callableTools(r.sys, s.ID); !sameTools(got, tc.tools) {
				t.Errorf("row CONNECTED, callable tools %v, want %v", got, tc.tools)
			}
			if got := w.waitConnected(t, 1, 10*time.Second); !sameTools(got, tc.tools) {
				t.Errorf("CONNECTED published with callable tools %v, want %v", got, tc.tools)
			}
			if tc.reconnect == nil {
				return
			}
			b.down.Store(true)
			r.waitStatus(s.ID, persistence.StatusError, 30*time.Second)
			b.serve(tc.reconnect...)
			b.down.Store(false)
			if got := w.waitConnected(t, 2, 30*time.Second); !sameTools(got, tc.reconnect) {
				t.Errorf("CONNECTED after ERROR published with callable tools %v, want %v", got, tc.reconnect)
			}
		})
	}
}

func callableTools(sys *actors.System, id string) []string {
	var out []string
	for _, tool := range sys.Routes().Callable() {
		if tool.SourceServerID == id {
			out = append(out, tool.OriginalName)
		}
	}
	return out
}

func sameTools(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return fmt.Sprint(got) == fmt.Sprint(want)
}
