package actors_test

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

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/supervision"
)

// countingEmbedder counts how often each text is embedded.
type countingEmbedder struct {
	embed.Embedder
	mu     sync.Mutex
	counts map[string]int
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	for _, t := range texts {
		c.counts[t]++
	}
	c.mu.Unlock()
	return c.Embedder.Embed(ctx, texts)
}

func (c *countingEmbedder) count(sub string) (texts, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, n := range c.counts {
		if strings.Contains(t, sub) {
			texts++
			calls += n
		}
	}
	return texts, calls
}

// TestEachToolIsEmbeddedOnce: a discovered tool costs one embedding, not one for the engine and one for the skill
// vectors (an external embedding API is paid per text).
func TestEachToolIsEmbeddedOnce(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	emb := &countingEmbedder{Embedder: embed.NewHashed(0), counts: map[string]int{}}
	cfg := testConfig()
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg, Search: &actors.SearchDeps{Embedder: emb}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	defer r.stop()
	_, url := manyTools(t, 20)
	r.register("embedonce", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := emb.count("tool_00"); n == 20 {
			break
		}
		if time.Now().After(deadline) {
			n, _ := emb.count("tool_00")
			t.Fatalf("%d of 20 tools embedded", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a second embedding would follow at once
	if n, calls := emb.count("tool_00"); calls != n {
		t.Fatalf("20 tools cost %d embeddings of %d texts, want one each", calls, n)
	}
}

// TestPatchProducesNoDeadLetter: an update reloads the server actor without a reply going to dead letters.
func TestPatchProducesNoDeadLetter(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	var mu sync.Mutex
	var dead []string
	sub := r.sys.ActorSystem().EventStream.Subscribe(func(evt any) {
		if d, ok := evt.(*actor.DeadLetterEvent); ok {
			mu.Lock()
			dead = append(dead, strings.TrimSpace(jsonOf(d.Message)))
			mu.Unlock()
		}
	})
	defer r.sys.ActorSystem().EventStream.Unsubscribe(sub)
	_, url := manyTools(t, 1)
	s := r.register("patchme", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, false)
	desc := "new description"
	if _, err := r.sys.Update(context.Background(), s.ID, persistence.ServerPatch{Description: &desc}); err != nil {
		t.Fatal(err)
	}
	// The actor answers its mailbox in order: once it answered a status ask, the Reload was handled.
	if _, err := r.sys.Status(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(dead) > 0 {
		t.Fatalf("dead letters after PATCH: %v", dead)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// gateServer is an in-process go-sdk backend whose tool "wait" blocks until the test opens the gate (or the call is
// cancelled), and counts the calls that reached it.
func gateServer(t *testing.T) (url string, entered chan struct{}, open func()) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gate", Version: "1"}, nil)
	gate := make(chan struct{})
	entered = make(chan struct{}, 100)
	srv.AddTool(&mcp.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	var once sync.Once
	return hs.URL, entered, func() { once.Do(func() { close(gate) }) }
}

// callWaiting registers a server named name on a gateServer and starts a call of its "wait" tool: it returns once
// the call is in the backend, with the server's id, where the call's reply will arrive, and what lets it finish
// (also run at the test's end).
func (r *rig) callWaiting(name string) (id string, replies <-chan *pb.CallToolReply, open func()) {
	url, entered, open := gateServer(r.t)
	r.t.Cleanup(open)
	s := r.register(name, persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	out := make(chan *pb.CallToolReply, 1)
	go func() {
		rep, _ := r.sys.CallTool(context.Background(), s.ID, "wait", nil)
		out <- rep
	}()
	<-entered
	return s.ID, out, open
}

// TestCallsInFlightPerServerAreBounded: with the limit at 3, a fourth concurrent call is refused at once with
// SERVER_BUSY naming the server and the limit; once the calls end, calls are accepted again.
func TestCallsInFlightPerServerAreBounded(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxCallsPerServer = 3
	r := newRig(t, cfg)
	url, entered, open := gateServer(t)
	defer open()
	s := r.register("busybox", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan string, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := r.sys.CallTool(context.Background(), s.ID, "wait", nil)
			if err != nil || rep.Error != nil {
				errs <- fmt.Sprint(err, rep)
			}
		}()
	}
	for i := 0; i < 3; i++ {
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d calls reached the backend", i)
		}
	}
	start := time.Now()
	rep, err := r.sys.CallTool(context.Background(), s.ID, "wait", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Error == nil || rep.Error.Code != errcode.ServerBusy {
		t.Fatalf("fourth call: %+v, want SERVER_BUSY", rep)
	}
	if !strings.Contains(rep.Error.Message, "busybox") || !strings.Contains(rep.Error.Message, "3") || rep.Error.ServerName != "busybox" {
		t.Fatalf("SERVER_BUSY must name the server and the limit: %+v", rep.Error)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the refusal took %v: it must not wait", took)
	}
	open()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a call within the limit failed: %s", e)
	}
	if rep, err := r.sys.CallTool(context.Background(), s.ID, "wait", nil); err != nil || rep.Error != nil {
		t.Fatalf("after the calls ended a call is accepted again: %v %+v", err, rep)
	}
}

// TestDeadHTTPBackendIsUnavailableNotFailed: between a streamable HTTP backend's death and its detection, a call
// fails with SERVER_UNAVAILABLE naming the server and its state, not EXECUTION_FAILED "rejected by transport".
func TestDeadHTTPBackendIsUnavailableNotFailed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.KeepAlive = 0 // detection takes ~24 s without keep-alive: the window this test needs
	r := newRig(t, cfg)
	srv := mcp.NewServer(&mcp.Implementation{Name: "mortal", Version: "1"}, nil)
	addTool(srv, "echo", "echo")
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	s := r.register("mortal", persistence.TransportHTTP, map[string]any{"base_url": hs.URL}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	hs.CloseClientConnections()
	hs.Close()
	rep, err := r.sys.CallTool(context.Background(), s.ID, "echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable {
		t.Fatalf("call to a dead backend: %+v, want SERVER_UNAVAILABLE", rep)
	}
	if !strings.Contains(rep.Error.Message, "mortal") || rep.Error.ServerName != "mortal" || rep.Error.ServerStatus == "" {
		t.Fatalf("the error must name the server and its state: %+v", rep.Error)
	}
}

// TestFailingCommandNamesItsCause: `node /nonexistent.js` prints its decisive line ("Cannot find module") before a
// long stack; error_message keeps it, and history rows do not nest a copy of their own details.
func TestFailingCommandNamesItsCause(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	node := peertest.Node(t)
	s := r.register("nomodule", persistence.TransportSTDIO, map[string]any{"command": node, "args": []string{"/nonexistent.js"}}, nil, true)
	row := r.waitServer(s.ID, persistence.StatusError, 30*time.Second)
	msg := ptr(row.ErrorMessage)
	if !strings.Contains(msg, "Cannot find module") {
		t.Fatalf("error_message lost the decisive stderr line: %q", msg)
	}
	if len(msg) > 2000 {
		t.Fatalf("error_message is not bounded: %d bytes", len(msg))
	}
	hist, err := r.store.ListHistory(context.Background(), s.ID, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) == 0 {
		t.Fatal("no history")
	}
	for _, h := range hist {
		var d map[string]json.RawMessage
		if err := json.Unmarshal(h.Details, &d); err != nil {
			t.Fatalf("history details %s: %v", h.Details, err)
		}
		if nested, ok := d["details"]; ok {
			t.Fatalf("history row %s nests a copy of its details: %s", h.EventType, nested)
		}
		if h.EventType == persistence.StatusError && !strings.Contains(string(d["error_message"]), "Cannot find module") {
			t.Fatalf("ERROR row without its cause: %s", h.Details)
		}
	}
}

// TestAwaitStartupAfterUncleanStop: a server whose stored status is still CONNECTED (the daemon was killed) is not
// counted as settled by the reset of that stale status: AwaitStartup returns once it is connected again and its
// tools are discovered by this process.
func TestAwaitStartupAfterUncleanStop(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	s := r.register("unclean", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	waitRoutes(t, r.sys, 30*time.Second, "echo listed", hasTool("unclean.echo"))
	r.stop()
	// What kill -9 leaves behind: the row still says CONNECTED, with the last run's tools.
	if err := r.store.RecordTransition(context.Background(), persistence.Transition{ServerID: s.ID,
		From: persistence.StatusDisconnected, To: persistence.StatusConnected, Reason: "test: unclean stop", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	r.start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.sys.AwaitStartup(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := r.sys.Status(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != persistence.StatusConnected {
		t.Fatalf("AwaitStartup returned while the server was %s", st.Status)
	}
	if !hasTool("unclean.echo")(r.sys.Routes()) {
		t.Fatal("AwaitStartup returned before the tools were routable")
	}
}

// TestEarlyFailureCountsTowardsBackoff: a backend that exits right after initialize is reconnected with growing
// intervals (a failure before the session was stable does not reset the backoff), and the error names its cause
// (its stderr line), not only "exit status 0".
func TestEarlyFailureCountsTowardsBackoff(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Retry = supervision.RetrySchedule{Backoff: supervision.Backoff{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}, Attempts: 6, Steady: 10 * time.Second}
	r := newRig(t, cfg)
	bin := peertest.GoBinary(t, "./testdata/hostile/exitafterinit")
	s := r.register("quitter", persistence.TransportSTDIO, map[string]any{"command": bin}, nil, true)
	var starts []time.Time
	var hist []persistence.HistoryEvent
	deadline := time.Now().Add(60 * time.Second)
	for len(starts) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d connects within a minute", len(starts))
		}
		time.Sleep(100 * time.Millisecond)
		var err error
		hist, err = r.store.ListHistory(context.Background(), s.ID, 200)
		if err != nil {
			t.Fatal(err)
		}
		starts = starts[:0]
		for i := len(hist) - 1; i >= 0; i-- {
			if hist[i].EventType == persistence.StatusConnecting {
				starts = append(starts, hist[i].Timestamp)
			}
		}
		if len(starts) >= 2 && starts[0].After(starts[1]) {
			slices.Reverse(starts) // newest first: put them in time order
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].Sub(starts[i-1]))
	}
	t.Logf("reconnect intervals: %v", gaps)
	if last, first := gaps[len(gaps)-1], gaps[0]; last < 3*first || last < 1200*time.Millisecond {
		t.Fatalf("reconnect intervals do not grow: %v", gaps)
	}
	// The row itself may already be CONNECTING again: read the cause from the ERROR rows of the history.
	errors := 0
	for _, h := range hist {
		if h.EventType != persistence.StatusError {
			continue
		}
		errors++
		if !strings.Contains(string(h.Details), "license check failed") {
			t.Fatalf("ERROR row does not name the cause: %s", h.Details)
		}
	}
	if errors == 0 {
		t.Fatal("no ERROR row in the history")
	}
}

// TestDrainCalls: once draining, new calls are refused with "shutting down"; a call that ends within the drain time
// gets its result; one still running at the deadline gets SERVER_UNAVAILABLE saying the aggregator is shutting down.
func TestDrainCalls(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	url, entered, open := gateServer(t)
	defer open()
	s := r.register("drainme", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)

	// A call still running at the drain deadline.
	replies := make(chan *pb.CallToolReply, 1)
	go func() {
		rep, err := r.sys.CallTool(context.Background(), s.ID, "wait", nil)
		if err != nil {
			rep = &pb.CallToolReply{Error: &pb.ErrorInfo{Message: err.Error()}}
		}
		replies <- rep
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if n := r.sys.DrainCalls(ctx, 10*time.Second); n != 1 {
		t.Fatalf("DrainCalls cancelled %d calls, want 1", n)
	}
	select {
	case rep := <-replies:
		if rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable || !strings.Contains(rep.Error.Message, "shutting down") {
			t.Fatalf("call cut by the shutdown: %+v, want SERVER_UNAVAILABLE shutting down", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call got no answer")
	}
	rep, err := r.sys.CallTool(context.Background(), s.ID, "wait", nil)
	if err != nil || rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable || !strings.Contains(rep.Error.Message, "shutting down") {
		t.Fatalf("a call after the drain began: %+v %v, want refused as shutting down", rep, err)
	}
}

// TestDrainCallsLetsCallsFinish: a call that ends within the drain time gets its result.
func TestDrainCallsLetsCallsFinish(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	_, replies, open := r.callWaiting("drainok")
	time.AfterFunc(300*time.Millisecond, open)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n := r.sys.DrainCalls(ctx, time.Second); n != 0 {
		t.Fatalf("DrainCalls cancelled %d calls, want 0", n)
	}
	if rep := <-replies; rep == nil || rep.Error != nil || !strings.Contains(string(rep.ResultJson), "done") {
		t.Fatalf("a call finishing within the drain time: %+v", rep)
	}
}

// TestDeactivateWaitsForCallsInFlight: a server's actor retired with a drain (a hand-over) lets a call in flight
// finish with its result, and retires as soon as that call ends (the call's end reaches the waiting actor), long
// before the drain is over.
func TestDeactivateWaitsForCallsInFlight(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	id, replies, open := r.callWaiting("handover")
	retired := make(chan error, 1)
	go func() { retired <- actors.Deactivate(context.Background(), r.sys, id, time.Hour) }()
	select {
	case err := <-retired:
		t.Fatalf("the actor retired while its call was still running: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	open()
	if rep := <-replies; rep == nil || rep.Error != nil || !strings.Contains(string(rep.ResultJson), "done") {
		t.Fatalf("a call finishing within the drain: %+v", rep)
	}
	select {
	case err := <-retired:
		if err != nil {
			t.Fatalf("deactivate: %v", err)
		}
	case <-time.After(20 * time.Second): // the drain is an hour: only the call's end can have ended the wait
		t.Fatal("the actor did not retire when its last call ended")
	}
}

// TestDiscoveryFailureOfFreshSessionIsRecorded: a backend that connects but whose tools/list cannot be decoded is
// not left CONNECTED with no tools: the failure is an ERROR naming the tools/list error, and it is retried with
// growing intervals.
func TestDiscoveryFailureOfFreshSessionIsRecorded(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Retry = supervision.RetrySchedule{Backoff: supervision.Backoff{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}, Attempts: 6, Steady: 10 * time.Second}
	r := newRig(t, cfg)
	bin := peertest.GoBinary(t, "./testdata/hostile/badlist")
	s := r.register("badlist", persistence.TransportSTDIO, map[string]any{"command": bin}, nil, true)
	row := r.waitServer(s.ID, persistence.StatusError, 30*time.Second)
	if msg := ptr(row.ErrorMessage); !strings.Contains(msg, "tool discovery failed") || !strings.Contains(msg, "tools") {
		t.Fatalf("error_message does not name the tools/list failure: %q", msg)
	}
}
