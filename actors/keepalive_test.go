package actors_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// pingStaller is a go-sdk streamable HTTP backend that leaves the keepalive pings it is told to unanswered for
// longer than the pinger waits (it answers them late), and answers everything else at once.
type pingStaller struct {
	url   string
	pings atomic.Int64 // pings received
	stall func(n int64) bool
}

func newPingStaller(t *testing.T, stallFor time.Duration, stall func(n int64) bool) *pingStaller {
	t.Helper()
	p := &pingStaller{stall: stall}
	srv := mcp.NewServer(&mcp.Implementation{Name: "staller", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "alpha", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"method":"ping"`)) && p.stall(p.pings.Add(1)) {
				time.Sleep(stallFor)
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	p.url = hs.URL
	return p
}

// TestKeepAliveToleratesOneMissedPing: a backend that leaves one keepalive ping unanswered in time (a busy backend,
// a loaded host) keeps its session; one that leaves every ping unanswered is given up (ERROR) within a few
// intervals.
func TestKeepAliveToleratesOneMissedPing(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	cfg := testConfig()
	cfg.KeepAlive = interval
	r := newRig(t, cfg)

	once := newPingStaller(t, interval, func(n int64) bool { return n == 2 })
	lost := make(chan string, 8)
	es := r.sys.ActorSystem().EventStream
	sub := es.Subscribe(func(evt any) {
		if e, ok := evt.(*pb.ServerStatusChanged); ok && e.ServerName == "missed-once" && e.From == persistence.StatusConnected {
			lost <- e.To + ": " + e.Reason
		}
	})
	t.Cleanup(func() { es.Unsubscribe(sub) })
	s := r.register("missed-once", persistence.TransportHTTP, map[string]any{"base_url": once.url, "allow_insecure_http": true}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for once.pings.Load() < 5 && time.Now().Before(deadline) { // the stalled ping and a few answered after it
		time.Sleep(50 * time.Millisecond)
	}
	if n := once.pings.Load(); n < 5 {
		t.Fatalf("the backend saw %d pings, want 5 or more", n)
	}
	select {
	case why := <-lost:
		t.Fatalf("one missed ping ended the session: CONNECTED -> %s", why)
	default:
	}

	var stalling atomic.Bool // from CONNECTED on, every ping is answered too late
	dead := newPingStaller(t, 2*interval, func(int64) bool { return stalling.Load() })
	d := r.register("never-answers", persistence.TransportHTTP, map[string]any{"base_url": dead.url, "allow_insecure_http": true}, nil, true)
	r.waitStatus(d.ID, persistence.StatusConnected, 30*time.Second)
	stalling.Store(true)
	if e := r.waitServer(d.ID, persistence.StatusError, 30*time.Second); e.ErrorMessage == nil {
		t.Errorf("ERROR without a message")
	}
}
