package mcpserver_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// floodClient is an /mcp client session that counts what reaches it.
type floodClient struct {
	sess                         *mcp.ClientSession
	toolsChanged, promptsChanged atomic.Int64
	logs, progress               atomic.Int64
}

func connectFlood(t *testing.T, r *rig) *floodClient {
	t.Helper()
	c := &floodClient{}
	cl := mcp.NewClient(&mcp.Implementation{Name: "flood-watcher", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { c.toolsChanged.Add(1) },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { c.promptsChanged.Add(1) },
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { c.logs.Add(1) },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { c.progress.Add(1) },
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	c.sess = sess
	return c
}

// call calls a tool of the aggregated endpoint and fails the test unless it succeeds.
func (c *floodClient) call(t *testing.T, p *mcp.CallToolParams) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.sess.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %v", p.Name, err, res)
	}
	return text(res)
}

// listings are how many tools/list and prompts/list the notifyflood backend has answered.
type listings struct {
	Tools   int `json:"tools_list"`
	Prompts int `json:"prompts_list"`
}

func (c *floodClient) listings(t *testing.T, server string) listings {
	t.Helper()
	var l listings
	if err := json.Unmarshal([]byte(c.call(t, &mcp.CallToolParams{Name: server + "__stats", Arguments: map[string]any{}})), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// settledListings waits until the backend's listing counts stop moving for quiet, and returns them.
func (c *floodClient) settledListings(t *testing.T, server string, quiet time.Duration) listings {
	t.Helper()
	last, since := c.listings(t, server), time.Now()
	for deadline := time.Now().Add(90 * time.Second); time.Since(since) < quiet; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still being listed after 90 s: %+v", server, last)
		}
		if l := c.listings(t, server); l != last {
			last, since = l, time.Now()
		}
	}
	return last
}

// TestListChangedFloodIsCoalesced: a backend sending 10,000 tools/list_changed (then prompts/list_changed) in a
// burst, while its lists stay the same, is listed a handful of times, nothing is stored or published (no
// ToolsChanged/FeaturesChanged event: no store write, no routing-table reload) and no /mcp client hears a
// list_changed; the merged notifications are counted. A real change announced afterwards still reaches the client.
func TestListChangedFloodIsCoalesced(t *testing.T) {
	m := metrics.New(nil)
	cfg := actors.DefaultConfig()
	cfg.ListChangedInterval = 3 * time.Second
	r := newRigWith(t, actors.Deps{Config: cfg, Metrics: m})
	bin := peertest.GoBinary(t, "./testdata/hostile/notifyflood")
	id := r.register(t, "flood", map[string]any{"command": bin}, persistence.TransportSTDIO)
	waitFor(t, "flood's tools", func() bool { _, ok := r.sys.Routes().Tool("flood.stats"); return ok })
	c := connectFlood(t, r)

	var published atomic.Int64
	sub := r.sys.ActorSystem().EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *pb.ToolsChanged:
			if e.ServerId == id {
				published.Add(1)
			}
		case *pb.FeaturesChanged:
			if e.ServerId == id {
				published.Add(1)
			}
		}
	})
	defer r.sys.ActorSystem().EventStream.Unsubscribe(sub)

	tests := []struct {
		kind    string
		runs    func(l listings) int
		changed *atomic.Int64
	}{
		{"tools_list_changed", func(l listings) int { return l.Tools }, &c.toolsChanged},
		{"prompts_list_changed", func(l listings) int { return l.Prompts }, &c.promptsChanged},
	}
	const n = 10000
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			before := c.settledListings(t, "flood", 3500*time.Millisecond)
			pub, heard := published.Load(), tt.changed.Load()
			start := time.Now()
			c.call(t, &mcp.CallToolParams{Name: "flood__burst", Arguments: map[string]any{"kind": tt.kind, "n": n}})
			took := time.Since(start) // the burst is read at floodguard.ReadRate: about 10 s
			after := c.settledListings(t, "flood", 3500*time.Millisecond)
			// One at the first notification, one per interval while the burst is read, one after it.
			runs, most := tt.runs(after)-tt.runs(before), 2+int(took/cfg.ListChangedInterval)
			t.Logf("%d %s read in %s: %d rediscoveries", n, tt.kind, took.Round(time.Millisecond), runs)
			if least := time.Duration(n/floodguard.ReadRate) * time.Second * 8 / 10; took < least {
				t.Errorf("%d %s read in %s: the reader was not paced at %d a second", n, tt.kind, took, floodguard.ReadRate)
			}
			if runs < 1 || runs > most {
				t.Errorf("%d %s read in %s gave %d rediscoveries; want 1 to %d", n, tt.kind, took, runs, most)
			}
			if p := published.Load() - pub; p != 0 {
				t.Errorf("an unchanged listing was stored and published %d times", p)
			}
			if h := tt.changed.Load() - heard; h != 0 {
				t.Errorf("the /mcp client heard %d list_changed although nothing changed", h)
			}
		})
	}
	// How many are merged at the source depends on how fast the actor takes them; some always are.
	if d := testutil.ToFloat64(m.NotifyDropped.WithLabelValues("flood", "list_changed")); d < 1 || d > 2*n {
		t.Errorf("merged list_changed notifications counted: %v; want 1 to %d", d, 2*n)
	}

	// A real change is still seen.
	heard := c.toolsChanged.Load()
	c.call(t, &mcp.CallToolParams{Name: "flood__grow", Arguments: map[string]any{}})
	waitFor(t, "the grown tool", func() bool { _, ok := r.sys.Routes().Tool("flood.grown"); return ok })
	waitFor(t, "a list_changed for the grown tool", func() bool { return c.toolsChanged.Load() > heard })
}

// TestLogAndProgressFloodsAreRateLimited: a backend sending 5,000 log messages, then 5,000 progress notifications,
// during a call has at most the server's rate of them relayed to the calling client, the rest dropped and counted,
// while every call to a healthy server beside it succeeds.
func TestLogAndProgressFloodsAreRateLimited(t *testing.T) {
	const rate, n = 50, 5000
	m := metrics.New(nil)
	cfg := actors.DefaultConfig()
	cfg.NotifyRate = rate
	r := newRigWith(t, actors.Deps{Config: cfg, Metrics: m})
	bin := peertest.GoBinary(t, "./testdata/hostile/notifyflood")
	r.register(t, "flood", map[string]any{"command": bin}, persistence.TransportSTDIO)
	r.register(t, "healthy", map[string]any{"command": bin}, persistence.TransportSTDIO)
	waitFor(t, "both servers' tools", func() bool {
		_, a := r.sys.Routes().Tool("flood.burst")
		_, b := r.sys.Routes().Tool("healthy.echo")
		return a && b
	})
	c := connectFlood(t, r)
	if err := c.sess.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	healthy := connectFlood(t, r)

	// The healthy server's load, for the whole test.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	var lastErr atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := healthy.sess.CallTool(ctx, &mcp.CallToolParams{Name: "healthy__echo", Arguments: map[string]any{}})
				cancel()
				calls.Add(1)
				if err != nil || res.IsError {
					failed.Add(1)
					lastErr.Store(err)
				}
			}
		}()
	}

	tests := []struct {
		kind     string
		received *atomic.Int64
		token    any
	}{
		{"log", &c.logs, nil},
		{"progress", &c.progress, "p1"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			p := &mcp.CallToolParams{Name: "flood__burst", Arguments: map[string]any{"kind": tt.kind, "n": n}}
			if tt.token != nil {
				p.SetProgressToken(tt.token)
			}
			start := time.Now()
			c.call(t, p)
			time.Sleep(time.Second) // what was relayed just before the result, and the relay grace
			elapsed := time.Since(start).Seconds()
			got := tt.received.Load()
			dropped := int64(testutil.ToFloat64(m.NotifyDropped.WithLabelValues("flood", tt.kind)))
			// At most the burst (one second's worth) and the rate over the time the notifications can have been
			// handled in; a few more for the messages in flight between the two counters.
			if bound := int64(rate + rate*elapsed + 10); got < 1 || got > bound {
				t.Errorf("%d %s notifications: the client received %d; want 1 to %d (rate %d/s over %.1f s)", n, tt.kind, got, bound, rate, elapsed)
			}
			if dropped < n/2 || got+dropped > n {
				t.Errorf("%d %s notifications: %d received, %d counted as dropped", n, tt.kind, got, dropped)
			}
		})
	}
	close(stop)
	wg.Wait()
	if calls.Load() == 0 || failed.Load() > 0 {
		t.Errorf("healthy server: %d of %d calls failed (last: %v)", failed.Load(), calls.Load(), lastErr.Load())
	}
}
