package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

// countingHandler counts "tools discovered" records (one per discovery) and loop warnings.
type countingHandler struct {
	discoveries, loops *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	switch {
	case r.Message == "tools discovered":
		h.discoveries.Add(1)
	case strings.HasPrefix(r.Message, "aggregator loop"):
		h.loops.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// aggregator is one actor system with its MCP endpoint on a loopback listener and a leaf backend of its own.
type aggregator struct {
	sys                *actors.System
	url                string
	discoveries, loops atomic.Int64
}

func newAggregator(t *testing.T, leafTool string) *aggregator {
	a := &aggregator{}
	cfg := actors.DefaultConfig()
	cfg.ConnectionTimeout = 20 * time.Second
	st, sys := startSystem(t, actors.Deps{Config: cfg,
		Logger: slog.New(countingHandler{discoveries: &a.discoveries, loops: &a.loops})})
	a.sys = sys
	ep := mcpserver.New(sys, st, mcpserver.Options{})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	a.url = hs.URL + "/mcp"

	leaf := mcp.NewServer(&mcp.Implementation{Name: "leaf", Version: "1"}, nil)
	mcp.AddTool(leaf, &mcp.Tool{Name: leafTool, Description: "a leaf tool"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	ls := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return leaf }, nil))
	t.Cleanup(ls.Close)
	a.register(t, "leaf", ls.URL)
	return a
}

func (a *aggregator) register(t *testing.T, name, url string) string {
	raw, _ := json.Marshal(map[string]any{"base_url": url})
	s, err := a.sys.Register(context.Background(), actors.RegisterRequest{Name: name, TransportType: persistence.TransportHTTP, ConnectionConfig: raw, AutoConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func (a *aggregator) tools() int { return len(a.sys.Routes().Callable()) }

// Two aggregators that register each other keep each other's own tools only: their tool counts do not grow and
// discovery stops.
func TestTwoAggregatorsRegisteringEachOther(t *testing.T) {
	a, b := newAggregator(t, "tool_a"), newAggregator(t, "tool_b")
	a.register(t, "peer", b.url)
	b.register(t, "peer", a.url)

	// Wait until both have each other's leaf tool, then until the counts hold still.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		_, okA := a.sys.Routes().Tool("peer.leaf__tool_b")
		_, okB := b.sys.Routes().Tool("peer.leaf__tool_a")
		if okA && okB {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := a.sys.Routes().Tool("peer.leaf__tool_b"); !ok {
		t.Fatalf("A never listed B's leaf tool; A has %d tools", a.tools())
	}
	settle := func() {
		last, lastA, lastB := time.Now(), a.tools(), b.tools()
		for time.Since(last) < 2*time.Second && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			if na, nb := a.tools(), b.tools(); na != lastA || nb != lastB {
				last, lastA, lastB = time.Now(), na, nb
			}
		}
	}
	settle()
	toolsA, toolsB := a.tools(), b.tools()
	discA, discB := a.discoveries.Load(), b.discoveries.Load()
	time.Sleep(4 * time.Second)
	if n := a.tools(); n != toolsA || n > 20 {
		t.Errorf("A's tool count moved from %d to %d", toolsA, n)
	}
	if n := b.tools(); n != toolsB || n > 20 {
		t.Errorf("B's tool count moved from %d to %d", toolsB, n)
	}
	if d := a.discoveries.Load() - discA; d > 0 {
		t.Errorf("A ran %d discoveries in 4 s after settling", d)
	}
	if d := b.discoveries.Load() - discB; d > 0 {
		t.Errorf("B ran %d discoveries in 4 s after settling", d)
	}
	// A keeps its leaf (1) and B's own tools (B's meta-tools and B's leaf), not its own tools coming back.
	for _, e := range a.sys.Routes().Callable() {
		if strings.Contains(e.Name, "tool_a") && e.ServerName == "peer" {
			t.Errorf("A lists its own tool back through B: %s", e.Name)
		}
	}
	if a.loops.Load() == 0 || b.loops.Load() == 0 {
		t.Errorf("no loop warning logged (A %d, B %d)", a.loops.Load(), b.loops.Load())
	}
	t.Logf("tools A=%d B=%d, discoveries A=%d B=%d", toolsA, toolsB, a.discoveries.Load(), b.discoveries.Load())
}

// An aggregator registered as its own backend through an address it cannot recognise (here the test listener,
// which is not in its listen addresses) is refused: the hop header comes back to it (508 LOOP_DETECTED) and the
// server goes to ERROR with LOOP_DETECTED.
func TestSelfThroughUnknownAddress(t *testing.T) {
	a := newAggregator(t, "tool_a")
	id := a.register(t, "self", a.url)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		srv, ok := a.sys.Routes().Server(id)
		if ok && srv.Status == persistence.StatusError {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv, _ := a.sys.Routes().Server(id)
	if srv.Status != persistence.StatusError {
		t.Fatalf("status %s, want ERROR", srv.Status)
	}
	time.Sleep(time.Second)
	if n := a.tools(); n > 1 {
		t.Errorf("A lists %d tools, want only its leaf's", n)
	}
}

// The MCP handlers refuse a request whose hop header names this daemon or is too long, in the error shape.
func TestLoopGuard(t *testing.T) {
	a := newAggregator(t, "tool_a")
	for _, tc := range []struct {
		via  string
		want int
	}{
		{a.sys.InstanceID(), http.StatusLoopDetected},
		{"x, " + a.sys.InstanceID(), http.StatusLoopDetected},
		{"1,2,3,4,5,6,7,8,9", http.StatusLoopDetected},
		{"other-instance", http.StatusOK},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, a.url, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(backend.HopHeader, tc.via)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		raw := new(bytes.Buffer)
		_, _ = raw.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("via %q: status %d, want %d (%s)", tc.via, resp.StatusCode, tc.want, raw)
			continue
		}
		if tc.want == http.StatusLoopDetected {
			if err := json.Unmarshal(raw.Bytes(), &got); err != nil || got["error_code"] != errcode.LoopDetected || got["detail"] == "" {
				t.Errorf("via %q: body %s", tc.via, raw)
			}
		} else if !strings.Contains(raw.String(), backend.InstanceMetaKey) || !strings.Contains(raw.String(), a.sys.InstanceID()) {
			t.Errorf("initialize result does not report the instance id: %s", raw)
		}
	}
}
