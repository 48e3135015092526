package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// lingerer is a go-sdk streamable HTTP backend whose tool "linger" answers on an event stream it then holds open
// (closing it is the protocol's SHOULD, not MUST) until the client leaves; held counts the streams so held.
type lingerer struct {
	inner http.Handler
	held  atomic.Int32
}

func newLingerer(t *testing.T) (*lingerer, string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "lingerer", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "linger", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, fmt.Errorf("answered by the wrapper")
		})
	l := &lingerer{inner: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	hs := httptest.NewServer(l)
	t.Cleanup(hs.Close)
	return l, hs.URL
}

func (l *lingerer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, tool, ok := toolsCall(r); ok && tool == "linger" {
		l.held.Add(1)
		defer l.held.Add(-1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"lingered\"}]}}\n\n", id)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	l.inner.ServeHTTP(w, r)
}

// TestAnsweredCallLeavesTheInFlightGauge: a call answered while its backend still holds the stream open is
// answered at once, and is no longer counted in mcp_calls_in_flight when its answer arrives, though the rest of its
// stream is still being read (the fast hop's tail, up to its drain wait); with the go-sdk session as well.
func TestAnsweredCallLeavesTheInFlightGauge(t *testing.T) {
	for _, off := range []bool{false, true} {
		name := "hop"
		if off {
			name = "no-hop"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, url := newLingerer(t)
			cfg := testConfig()
			cfg.NoFastHop = off
			mx := metrics.New(nil)
			r := newMeteredRig(t, cfg, mx)
			s := r.register("lingering", persistence.TransportHTTP, map[string]any{"base_url": url, "allow_insecure_http": true}, nil, true)
			r.waitStatus(s.ID, persistence.StatusConnected, 20*time.Second)
			rep, err := r.sys.CallTool(context.Background(), s.ID, "linger", nil)
			if err != nil || rep.Error != nil {
				t.Fatalf("call: %v %v", err, rep.GetError())
			}
			if !strings.Contains(string(rep.ResultJson), "lingered") {
				t.Fatalf("result %s", rep.ResultJson)
			}
			if n := l.held.Load(); n != 1 {
				t.Fatalf("the call was answered after its stream ended (%d held), not at its answer", n)
			}
			if got := testutil.ToFloat64(mx.CallsInFlight.WithLabelValues("lingering")); got != 0 {
				t.Errorf("mcp_calls_in_flight = %v after the call's answer, want 0", got)
			}
		})
	}
}
