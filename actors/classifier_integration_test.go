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

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
)

// builtinClassifier is the product's model-free classifier over the hashed embedder and the search's tool text.
func builtinClassifier(t testing.TB) *classify.Builtin {
	t.Helper()
	b, err := classify.NewBuiltin(context.Background(), embed.NewHashed(1024), classify.DefaultTaxonomy(),
		func(tool classify.Tool) string { return embed.ToolText(tool.Name, tool.Description, tool.InputSchema) })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gatedClassifier wraps a classifier: while held, classifications wait for release; it counts calls per tool and
// the classifications in flight.
type gatedClassifier struct {
	classify.Classifier
	mu       sync.Mutex
	gate     chan struct{} // nil: open
	calls    map[string]int
	inFlight atomic.Int32
	maxSeen  atomic.Int32
}

func gated(c classify.Classifier) *gatedClassifier {
	return &gatedClassifier{Classifier: c, calls: map[string]int{}}
}

func (g *gatedClassifier) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
}

func (g *gatedClassifier) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedClassifier) count(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[name]
}

func (g *gatedClassifier) resetCounts() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = map[string]int{}
}

func (g *gatedClassifier) Classify(ctx context.Context, tool classify.Tool) (classify.Result, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	g.mu.Lock()
	g.calls[tool.Name]++
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return classify.Result{}, ctx.Err()
		}
	}
	return g.Classifier.Classify(ctx, tool)
}

// newClassifierRig is a rig whose System classifies with c; prepare runs on the store before the System starts.
func newClassifierRig(t *testing.T, cfg actors.Config, c classify.Classifier, prepare func(persistence.Store)) *rig {
	return newClassifierRigMetrics(t, cfg, c, prepare, nil)
}

func newClassifierRigMetrics(t *testing.T, cfg actors.Config, c classify.Classifier, prepare func(persistence.Store), m *metrics.Metrics) *rig {
	t.Helper()
	path := t.TempDir() + "/agg.db"
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	if prepare != nil {
		prepare(st)
	}
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg, Classifier: c, Metrics: m})
	if err != nil {
		t.Fatalf("start actors: %v", err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg, path: path}
	t.Cleanup(func() {
		r.stop()
		st.Close()
	})
	return r
}

func storedTools(t testing.TB, st persistence.Store, serverID string) []persistence.Tool {
	t.Helper()
	tools, _, err := st.ListTools(context.Background(), persistence.ListToolsFilter{ServerID: serverID})
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

func settled(tool persistence.Tool) bool {
	return tool.ClassificationState == persistence.ClassificationClassified || tool.ClassificationState == persistence.ClassificationUnclassified
}

// waitClassified waits until the classifier has nothing queued or in flight and every tool of the server is
// settled in the store, and returns the tools.
func waitClassified(t *testing.T, r *rig, serverID string, within time.Duration) []persistence.Tool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tools := storedTools(t, r.store, serverID)
		b, err := r.sys.ClassificationBacklog(context.Background())
		if err == nil && b.Queued == 0 && b.InFlight == 0 && len(tools) > 0 && !slices.ContainsFunc(tools, func(x persistence.Tool) bool { return !settled(x) }) {
			return tools
		}
		if time.Now().After(deadline) {
			t.Fatalf("classification did not settle within %v: backlog %+v %v, states %v", within, b, err, states(tools))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func states(tools []persistence.Tool) map[string]int {
	out := map[string]int{}
	for _, x := range tools {
		out[x.ClassificationState]++
	}
	return out
}

// checkRules checks BR-004 on a stored tool: CLASSIFIED with 1-3 skills led by the primary, or UNCLASSIFIED with none.
func checkRules(t *testing.T, tool persistence.Tool) {
	t.Helper()
	switch tool.ClassificationState {
	case persistence.ClassificationClassified:
		if !tool.IsClassified || len(tool.SkillIDs) < 1 || len(tool.SkillIDs) > 3 || tool.PrimarySkillID == nil || *tool.PrimarySkillID != tool.SkillIDs[0] {
			t.Errorf("%s: CLASSIFIED with is_classified %v skills %v primary %v", tool.Name, tool.IsClassified, tool.SkillIDs, tool.PrimarySkillID)
		}
	case persistence.ClassificationUnclassified:
		if tool.IsClassified || len(tool.SkillIDs) != 0 || tool.PrimarySkillID != nil {
			t.Errorf("%s: UNCLASSIFIED with is_classified %v skills %v primary %v", tool.Name, tool.IsClassified, tool.SkillIDs, tool.PrimarySkillID)
		}
	default:
		t.Errorf("%s: left in %s", tool.Name, tool.ClassificationState)
	}
}

// tableMatches says whether the routing table's entries carry the stored classification of these tools.
func tableMatches(tools []persistence.Tool) func(*routing.RouteTable) bool {
	return func(rt *routing.RouteTable) bool {
		for _, x := range tools {
			e, ok := rt.Tool(x.Name)
			if !ok || e.ClassificationState != x.ClassificationState || e.IsClassified != x.IsClassified || !slices.Equal(e.SkillIDs, x.SkillIDs) {
				return false
			}
		}
		return true
	}
}

// TestClassifierBuiltinOnServerEverything: the tools of a real server are routable while their classification is
// still held back (discovery never waits for it), at most ClassifyConcurrency run at once, every tool is classified
// exactly once and ends CLASSIFIED or UNCLASSIFIED under the BR-004 rules, and the routing table shows the skills.
func TestClassifierBuiltinOnServerEverything(t *testing.T) {
	t.Parallel()
	g := gated(builtinClassifier(t))
	g.hold()
	cfg := testConfig()
	cfg.ClassifyConcurrency = 5
	r := newClassifierRig(t, cfg, g, nil)
	cmd, args := peertest.EverythingStdio(t)
	every := r.register("every", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "every.echo", hasTool("every.echo"))
	route, err := r.sys.Routes().Resolve("every.echo", "")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := r.sys.Call(context.Background(), route, []byte(`{"message":"before classification"}`), nil); err != nil || rep.Error != nil {
		t.Fatalf("call while classification is held: %v %v", rep.GetError(), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.inFlight.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d classifications in flight, want the pool's 5", g.inFlight.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // would a sixth start?
	if got := g.maxSeen.Load(); got != 5 {
		t.Fatalf("%d classifications ran at once, the limit is 5", got)
	}
	for _, x := range storedTools(t, r.store, every.ID) {
		if x.IsClassified {
			t.Fatalf("%s classified while the classifier is held", x.Name)
		}
	}
	b, err := r.sys.ClassificationBacklog(context.Background())
	if err != nil || b.InFlight != 5 || b.Queued < 7 {
		t.Fatalf("backlog %+v %v: want 5 in flight and the rest queued", b, err)
	}

	g.release()
	tools := waitClassified(t, r, every.ID, 30*time.Second)
	classified := 0
	for _, x := range tools {
		checkRules(t, x)
		if x.IsClassified {
			classified++
		}
		if n := g.count(x.Name); n != 1 {
			t.Errorf("%s classified %d times, want once", x.Name, n)
		}
	}
	t.Logf("server-everything: %d of %d tools classified: %v", classified, len(tools), func() map[string][]string {
		m := map[string][]string{}
		for _, x := range tools {
			m[x.OriginalName] = x.SkillIDs
		}
		return m
	}())
	if classified == 0 {
		t.Fatalf("no tool of server-everything got a skill")
	}
	waitRoutes(t, r.sys, 5*time.Second, "the classification in the routing table", tableMatches(tools))
	if _, n := r.sys.Routes().ToolCounts(); n != classified {
		t.Fatalf("routing table counts %d classified, the store %d", n, classified)
	}
}

// chatServer is an OpenAI-compatible chat completions endpoint that answers 503 while down and counts the requests
// it serves at once.
type chatServer struct {
	down     atomic.Bool
	calls    atomic.Int32
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	skill    string
}

func (c *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		m := c.maxSeen.Load()
		if n <= m || c.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	c.calls.Add(1)
	var req struct {
		Model string `json:"model"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	time.Sleep(20 * time.Millisecond) // long enough for requests to overlap
	if c.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
		return
	}
	content := fmt.Sprintf(`{"skills":[{"id":%q,"confidence":0.9},{"id":"utilities","confidence":0.3}]}`, c.skill)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}},
	})
}

// TestClassifierLLMOutageAndRecovery (EC-009): while the LLM answers 503 the tools end UNCLASSIFIED with
// is_classified false and stay routable; the retry tries one tool per interval, not all of them; once the LLM
// recovers every tool is CLASSIFIED within a few intervals; the LLM never sees more than 5 requests at once.
func TestClassifierLLMOutageAndRecovery(t *testing.T) {
	t.Parallel()
	chat := &chatServer{skill: "data_analysis"}
	chat.down.Store(true)
	hs := httptest.NewServer(chat)
	t.Cleanup(hs.Close)
	llm, err := classify.NewLLM(classify.LLMConfig{BaseURL: hs.URL, Model: "test-model", MaxAttempts: 1, Timeout: 5 * time.Second}, classify.DefaultTaxonomy())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ClassifyRetryInterval = 300 * time.Millisecond
	m := metrics.New(nil)
	r := newClassifierRigMetrics(t, cfg, llm, nil, m)
	const n = 60
	_, url := manyTools(t, n)
	s := r.register("many", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "the tools", func(rt *routing.RouteTable) bool {
		return hasTool("many.tool_0000")(rt) && hasTool(fmt.Sprintf("many.tool_%04d", n-1))(rt)
	})

	// Outage: every tool fails and is UNCLASSIFIED, routable, not classified.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := r.sys.ClassificationBacklog(context.Background())
		if err == nil && b.Failed == n && b.Queued == 0 && b.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog %+v %v: want all %d tools failed", b, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A retry probe (every ClassifyRetryInterval) puts one failed tool back to CLASSIFYING for the moment it tries
	// the LLM again: read the store until every tool is UNCLASSIFIED at once.
	var tools []persistence.Tool
	for stored := time.Now().Add(10 * time.Second); ; {
		tools = storedTools(t, r.store, s.ID)
		i := slices.IndexFunc(tools, func(x persistence.Tool) bool {
			return x.ClassificationState != persistence.ClassificationUnclassified || x.IsClassified
		})
		if i < 0 {
			break
		}
		if time.Now().After(stored) {
			t.Fatalf("%s: %s is_classified %v during the outage", tools[i].Name, tools[i].ClassificationState, tools[i].IsClassified)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitRoutes(t, r.sys, 5*time.Second, "unclassified tools in the table", tableMatches(tools))
	route, err := r.sys.Routes().Resolve("many.tool_0007", "")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := r.sys.Call(context.Background(), route, []byte(`{}`), nil); err != nil || rep.Error != nil {
		t.Fatalf("an unclassified tool must stay callable: %v %v", rep.GetError(), err)
	}
	before := chat.calls.Load()
	time.Sleep(1200 * time.Millisecond) // four retry intervals
	if probes := chat.calls.Load() - before; probes < 2 || probes > 6 {
		t.Fatalf("%d requests during four retry intervals of an outage: want one tool retried per interval", probes)
	}

	// Recovery: the next retry succeeds and brings every failed tool back.
	chat.down.Store(false)
	recovered := time.Now()
	deadline = recovered.Add(5 * time.Second)
	for {
		tools = storedTools(t, r.store, s.ID)
		if !slices.ContainsFunc(tools, func(x persistence.Tool) bool { return !x.IsClassified }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools not classified %v after the LLM recovered: %v", time.Since(recovered), states(tools))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("all %d tools classified %v after the LLM recovered", n, time.Since(recovered))
	for _, x := range tools {
		checkRules(t, x)
		if !x.IsClassified || x.SkillIDs[0] != "data_analysis" || len(x.SkillIDs) != 1 {
			t.Fatalf("%s after recovery: %s %v", x.Name, x.ClassificationState, x.SkillIDs)
		}
	}
	if b, _ := r.sys.ClassificationBacklog(context.Background()); b.Total() != 0 {
		t.Fatalf("backlog after recovery %+v", b)
	}
	waitRoutes(t, r.sys, 5*time.Second, "classified tools in the table", tableMatches(tools))
	if got := chat.maxSeen.Load(); got > 5 || got < 2 {
		t.Fatalf("the LLM saw at most %d requests at once: want the pool's limit 5 used and never exceeded", got)
	}
	if ok, failed := testutil.ToFloat64(m.Classifications.WithLabelValues("llm", "classified")), testutil.ToFloat64(m.Classifications.WithLabelValues("llm", "failed")); ok != n || failed < n {
		t.Fatalf("metrics: %v classified (want %d), %v failed (want at least %d)", ok, n, failed, n)
	}
	t.Logf("LLM: %d requests, at most %d at once", chat.calls.Load(), chat.maxSeen.Load())
}

// TestClassifierResumesAndCoalesces: at start, tools left DISCOVERED or CLASSIFYING (interrupted) are classified,
// CLASSIFIED ones are left alone and UNCLASSIFIED ones (perhaps failed before the restart) wait for the retry; a tool announced twice is classified once, a tool whose definition changes while
// it is being classified is classified again, and removed tools are skipped.
func TestClassifierResumesAndCoalesces(t *testing.T) {
	t.Parallel()
	g := gated(builtinClassifier(t))
	cfg := testConfig()
	cfg.ClassifyConcurrency = 1
	cfg.ClassifyRetryInterval = 200 * time.Millisecond
	var srv persistence.Server
	defs := []persistence.ToolDef{
		{OriginalName: "get_forecast", Description: "Weather forecast, temperature and rain for a city"},
		{OriginalName: "send_email", Description: "Send an email message to a recipient"},
		{OriginalName: "run_query", Description: "Run a SQL query against a PostgreSQL database"},
		{OriginalName: "create_issue", Description: "Create an issue in the GitHub issue tracker"},
		{OriginalName: "translate_text", Description: "Translate text into another language"},
	}
	for i := range defs {
		defs[i].InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	weather := "weather"
	r := newClassifierRig(t, cfg, g, func(st persistence.Store) {
		ctx := context.Background()
		srv = persistence.Server{Name: "store", TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(`{"command":"true"}`)}
		if err := st.CreateServer(ctx, &srv, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReplaceServerTools(ctx, srv.ID, defs, nil); err != nil {
			t.Fatal(err)
		}
		for _, x := range storedTools(t, st, srv.ID) {
			var c persistence.ToolClassification
			switch x.OriginalName {
			case "get_forecast":
				c = persistence.ToolClassification{State: persistence.ClassificationClassifying} // interrupted
			case "translate_text":
				c = persistence.ToolClassification{State: persistence.ClassificationUnclassified}
			case "run_query":
				c = persistence.ToolClassification{State: persistence.ClassificationClassified, SkillIDs: []string{weather}, PrimarySkillID: &weather}
			default:
				continue // DISCOVERED
			}
			if err := st.SetToolClassification(ctx, x.ID, c); err != nil {
				t.Fatal(err)
			}
		}
	})
	tools := waitClassified(t, r, srv.ID, 10*time.Second)
	for _, x := range tools {
		want := 1
		if x.OriginalName == "translate_text" {
			continue
		}
		if x.OriginalName == "run_query" {
			want = 0
			if x.ClassificationState != persistence.ClassificationClassified || !slices.Equal(x.SkillIDs, []string{weather}) {
				t.Errorf("a CLASSIFIED tool was touched at start: %s %v", x.ClassificationState, x.SkillIDs)
			}
		} else {
			checkRules(t, x)
		}
		if got := g.count(x.Name); got != want {
			t.Errorf("%s classified %d times at start, want %d", x.Name, got, want)
		}
	}

	deadline := time.Now().Add(5 * time.Second)
	for g.count("store.translate_text") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("an UNCLASSIFIED tool found at start was not retried")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Coalescing (one classification at a time, held): send_email runs, create_issue waits; both are announced
	// again, and send_email's definition changes while it runs.
	g.resetCounts()
	g.hold()
	es := r.sys.ActorSystem().EventStream
	// announce publishes what the router's delta of the server's served tools says of new (DISCOVERED), redefined
	// and removed tools (version 0: the indexer, which applies only newer versions, leaves it alone).
	announce := func(added, redefined []string, removed []int64) {
		rows := map[string]persistence.Tool{}
		for _, x := range storedTools(t, r.store, srv.ID) {
			rows[x.Name] = x
		}
		d := &routing.ServedDelta{ServerID: srv.ID, ServerName: "store", Removed: removed}
		for _, n := range added {
			x := rows[n]
			x.ClassificationState = persistence.ClassificationDiscovered
			d.Added = append(d.Added, routing.ServedTool{Tool: &x})
		}
		for _, n := range redefined {
			x := rows[n]
			d.Changed = append(d.Changed, routing.ServedTool{Tool: &x, Redefined: true})
		}
		es.Publish(d)
	}
	announce([]string{"store.send_email", "store.create_issue"}, nil, nil)
	waitBacklog := func(what string, cond func(actors.ClassifierBacklog) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, err := r.sys.ClassificationBacklog(context.Background())
			if err == nil && cond(b) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("backlog %+v %v: want %s", b, err, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitBacklog("1 in flight, 1 queued", func(b actors.ClassifierBacklog) bool { return b.InFlight == 1 && b.Queued == 1 })
	announce([]string{"store.send_email", "store.create_issue"}, nil, nil)
	announce(nil, []string{"store.send_email"}, nil)
	time.Sleep(300 * time.Millisecond) // the announcements' lookups reach the actor
	waitBacklog("still 1 in flight, 1 queued", func(b actors.ClassifierBacklog) bool { return b.InFlight == 1 && b.Queued == 1 })
	g.release()
	waitClassified(t, r, srv.ID, 10*time.Second)
	if e, c := g.count("store.send_email"), g.count("store.create_issue"); e != 2 || c != 1 {
		t.Fatalf("send_email classified %d times (want 2: it changed while running), create_issue %d (want 1)", e, c)
	}

	// Removal: a queued tool that is removed is skipped; one removed while it runs is dropped quietly.
	g.resetCounts()
	g.hold()
	announce(nil, []string{"store.get_forecast", "store.create_issue"}, nil)
	// One of these two is the classification in flight (not a leftover of the previous phase), the other queued.
	waitBacklog("1 of the 2 in flight, the other queued", func(b actors.ClassifierBacklog) bool {
		return b.InFlight == 1 && b.Queued == 1 && g.count("store.get_forecast")+g.count("store.create_issue") == 1
	})
	ids := map[string]int64{}
	for _, x := range storedTools(t, r.store, srv.ID) {
		ids[x.Name] = x.ID
	}
	diff, err := r.store.ReplaceServerTools(context.Background(), srv.ID, defs[1:3], nil) // send_email and run_query stay
	if err != nil || len(diff.Removed) != 3 {
		t.Fatalf("replace: %+v %v", diff, err)
	}
	var removed []int64
	for _, n := range diff.Removed {
		removed = append(removed, ids[n])
	}
	announce(nil, nil, removed)
	waitBacklog("the removed queued tool dropped", func(b actors.ClassifierBacklog) bool { return b.Queued == 0 })
	g.release()
	waitBacklog("nothing left", func(b actors.ClassifierBacklog) bool { return b.Total() == 0 })
	if n := g.count("store.get_forecast") + g.count("store.create_issue"); n != 1 {
		t.Fatalf("%d classifications of removed tools, want only the one already running", n)
	}
	if left := storedTools(t, r.store, srv.ID); len(left) != 2 {
		t.Fatalf("%d tools left", len(left))
	}
}
