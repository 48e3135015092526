package metrics

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// touched records one of everything so every vector has a series.
func touched(t *testing.T) *Metrics {
	m := New(func() Snapshot {
		return Snapshot{ServersByStatus: map[string]int{"CONNECTED": 3, "ERROR": 1}, Tools: 10, Classified: 7,
			Mailboxes: map[string]int{"github-mcp": 3}}
	})
	m.Call("github-mcp", OutcomeOK, 20*time.Millisecond)
	m.InFlight("github-mcp", 1)
	m.Routing(context.Background(), 200*time.Microsecond)
	m.HealthCheck("github-mcp", 45*time.Millisecond, true)
	m.Reconnect("github-mcp")
	m.SessionLost("github-mcp", CauseProcessExit)
	m.Transition("CONNECTED")
	m.Search(3 * time.Millisecond)
	m.Classification("builtin", "classified")
	m.HTTP(context.Background(), "rest", "/api/v1/tools/call", "POST", 200, time.Millisecond)
	m.ActorRestart("server")
	return m
}

func TestContractMetricsAreExposed(t *testing.T) {
	m := touched(t)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		body.WriteString(sc.Text() + "\n")
	}
	text := body.String()
	for _, want := range []string{
		`mcp_aggregator_servers_total{status="connected"} 3`,
		`mcp_aggregator_servers_total{status="error"} 1`,
		`mcp_aggregator_servers_total{status="degraded"} 0`,
		`mcp_aggregator_tools_total 10`,
		`mcp_aggregator_tools_classified 7`,
		`mcp_aggregator_server_mailbox_depth{server="github-mcp"} 3`,
		`mcp_aggregator_routing_duration_seconds_bucket{le="0.05"} 1`,
		`mcp_aggregator_execution_duration_seconds_bucket{server="github-mcp",le="1"} 1`,
		`mcp_aggregator_health_check_duration_seconds{server="github-mcp"} 0.045`,
		`mcp_aggregator_health_check_failures_total{server="github-mcp"} 1`,
		`mcp_aggregator_tool_calls_total{outcome="ok",server="github-mcp"} 1`,
		`mcp_aggregator_tool_calls_in_flight{server="github-mcp"} 1`,
		`mcp_aggregator_session_losses_total{cause="process_exit",server="github-mcp"} 1`,
		`mcp_aggregator_http_requests_total{listener="rest",method="POST",route="/api/v1/tools/call",status="200"} 1`,
		`go_goroutines`, `process_resident_memory_bytes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestForgetServerDropsItsSeries(t *testing.T) {
	m := touched(t)
	m.Call("other", OutcomeOK, time.Millisecond)
	m.ForgetServer("github-mcp")
	if n := testutil.CollectAndCount(m.ToolCalls); n != 1 {
		t.Fatalf("%d tool call series after forgetting github-mcp, want 1 (other)", n)
	}
	if n := testutil.CollectAndCount(m.HealthCheckFailures); n != 0 {
		t.Fatalf("%d health failure series left", n)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.Call("s", OutcomeOK, time.Second)
	m.InFlight("s", 1)
	m.Routing(context.Background(), time.Second)
	m.HealthCheck("s", time.Second, true)
	m.Reconnect("s")
	m.SessionLost("s", CauseClosed)
	m.Transition("ERROR")
	m.Search(time.Second)
	m.Classification("builtin", "failed")
	m.HTTP(context.Background(), "rest", "/", "GET", 200, time.Second)
	m.ActorRestart("server")
	m.NotificationDropped("s", "log")
	m.ForgetServer("s")
	h := m.WrapHTTP("mcp", "/mcp", http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 404 {
		t.Fatalf("nil metrics must pass requests through")
	}
}

// TestWrapHTTPStreams: a wrapped streaming handler still flushes each event as it is written.
func TestWrapHTTPStreams(t *testing.T) {
	m := New(nil)
	release := make(chan struct{})
	h := m.WrapHTTP("mcp", "/sse", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: first\n\n"))
		http.NewResponseController(w).Flush()
		<-release
		_, _ = w.Write([]byte("data: second\n\n"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event not streamed before the handler finished: %q %v", line, err)
	}
	// Counted when the stream ends, not before.
	if got := testutil.ToFloat64(m.HTTPRequests.WithLabelValues("mcp", "/sse", "GET", "200")); got != 0 {
		t.Fatalf("counted %v before the stream ended", got)
	}
	close(release)
	_, _ = io.ReadAll(resp.Body)
	deadline := time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(m.HTTPRequests.WithLabelValues("mcp", "/sse", "GET", "200")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the finished stream was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDashboardAndRulesUseRealMetrics: every metric name in the dashboard's and the alert rules' expressions is
// one this package exports.
func TestDashboardAndRulesUseRealMetrics(t *testing.T) {
	m := touched(t)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[f.GetName()+s] = true
			}
		}
	}
	metricName := regexp.MustCompile(`\b(mcp_aggregator_[a-z_]+|go_[a-z_]+|process_[a-z_]+)\b`)
	check := func(where, expr string) {
		for _, name := range metricName.FindAllString(expr, -1) {
			if !known[name] {
				t.Errorf("%s uses unknown metric %s", where, name)
			}
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("dashboard panel "+p.Title, tg.Expr)
		}
	}
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	check("alerts.yml", string(rules))
}

// TestAlertRulesWithPromtool checks the rules' syntax and runs their unit tests (alerts_test.yml).
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (make test installs Debian's prometheus package)")
		}
		t.Skip("promtool is not installed: run make test, or apt-get install prometheus")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestNodeLabel: a cluster node's registry puts node=<id> on every series, the scrape-time gauges and the Go
// collectors included, and reports the cluster's size; a single node's has no node label and no cluster series.
func TestNodeLabel(t *testing.T) {
	snap := func() Snapshot {
		return Snapshot{ServersByStatus: map[string]int{"CONNECTED": 2}, Tools: 5, ClusterMembers: 3}
	}
	m := NewForNode(snap, "n1")
	m.Call("srv", OutcomeOK, time.Millisecond)
	m.BackendSession("srv", true)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			node := ""
			for _, l := range metric.GetLabel() {
				if l.GetName() == "node" {
					node = l.GetValue()
				}
			}
			if node != "n1" {
				t.Fatalf("%s has node=%q, want n1", f.GetName(), node)
			}
		}
		seen[f.GetName()] = true
	}
	for _, name := range []string{"mcp_aggregator_tool_calls_total", "mcp_aggregator_servers_total", "mcp_aggregator_cluster_members",
		"mcp_aggregator_backend_sessions", "go_goroutines"} {
		if !seen[name] {
			t.Errorf("%s missing", name)
		}
	}
	single, err := New(snap).Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range single {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "node" {
					t.Fatalf("a single node's %s has a node label", f.GetName())
				}
			}
		}
	}
}
