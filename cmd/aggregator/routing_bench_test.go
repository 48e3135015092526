package main

// Routing benchmarks: the real daemon binary and real backends, each its own process built without -race, the
// load generated here. Run them with
//
//	go test -run '^$' -bench 'Routing|Discovery1000' -benchtime 1x ./cmd/aggregator/
//
// Every measurement is bounded in calls and time, so one run takes a few minutes. The machine's cores are shared
// by the load generator, the daemon and the backend: compare figures from one run, not across machines.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/loadgen"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// Load shapes, bounded in calls and time.
const (
	closedCalls       = 2000             // closed1: one caller, back to back
	closedLimit       = 30 * time.Second // ... or until this much time passed
	openRate          = 500              // open500: calls started per second, whatever completes
	openFor           = 5 * time.Second  // ... for this long
	saturateCallers   = 32               // saturate: closed-loop callers at once
	saturateFor       = 5 * time.Second  // ... for this long
	saturateMaxCalls  = 200000           // ... and never more calls than this
	warmupCalls       = 300              // discarded calls before each measurement
	callTimeout       = 10 * time.Second // one call; a call that takes longer counts as an error
	benchEchoMessage  = "routing-bench"
	discoveryTools    = 1000 // tools of the discovery benchmark's server (echo + 999)
	discoveryRounds   = 5    // registrations measured per benchmark iteration
	discoveryDeadline = 60 * time.Second
)

// benchBinaries are the daemon and the echo backend, built without -race for the benchmarks.
type benchBinaries struct {
	aggregator string
	echo       string
}

// buildBenchBinaries builds both commands into a temporary directory (the go build cache makes repeats cheap).
func buildBenchBinaries(b *testing.B) benchBinaries {
	b.Helper()
	dir := b.TempDir()
	bins := benchBinaries{aggregator: filepath.Join(dir, "aggregator"), echo: filepath.Join(dir, "mcp-echo-backend")}
	root := peertest.RepoRoot(b)
	for _, c := range []struct{ out, pkg string }{
		{bins.aggregator, "./cmd/aggregator"},
		{bins.echo, "./cmd/mcp-echo-backend"},
	} {
		cmd := exec.Command("go", "build", "-o", c.out, c.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", c.pkg, err, out)
		}
	}
	return bins
}

// startEchoBackend runs cmd/mcp-echo-backend on a free loopback port and returns its MCP endpoint URL.
func startEchoBackend(b testing.TB, bin string, extraTools int) string {
	b.Helper()
	logs := &syncBuf{}
	p, url, err := loadgen.StartEcho(bin, extraTools, logs)
	if err != nil {
		b.Fatalf("%v; stderr:\n%s", err, logs)
	}
	b.Cleanup(func() { p.Stop(0) })
	return url
}

// benchDaemon is the aggregator binary serving on two loopback ports with the embedded store in a temp dir.
type benchDaemon struct {
	api  string // REST API base: http://127.0.0.1:port/api/v1/aggregator
	call string // POST /api/v1/tools/call
	mcp  string // the MCP endpoint: http://127.0.0.1:port/mcp
	logs *syncBuf
	pid  int
}

// startBenchDaemon runs `aggregator serve` (no tokens, so auth is off; the per-client rate limit disabled) and
// waits until its REST API answers; it is stopped (SIGTERM, then SIGKILL) when the benchmark ends.
func startBenchDaemon(b *testing.B, bin, logLevel string) *benchDaemon {
	b.Helper()
	logs := &syncBuf{}
	ld, err := loadgen.StartDaemon(context.Background(), bin, b.TempDir(), logLevel, logs)
	if err != nil {
		b.Fatalf("%v; logs:\n%s", err, logs)
	}
	b.Cleanup(func() { ld.Stop(10 * time.Second) })
	return &benchDaemon{api: ld.API, call: ld.Call, mcp: ld.MCP, logs: logs, pid: ld.Pid()}
}

// benchHTTPClient keeps an idle connection for every concurrent caller (loadgen.HTTPClient).
func benchHTTPClient() *http.Client { return loadgen.HTTPClient() }

// restJSON sends one admin request and decodes the JSON answer.
func restJSON(ctx context.Context, client *http.Client, method, url string, body any) (int, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("encode %s %s: %w", method, url, err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, fmt.Errorf("request %s %s: %w", method, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read %s %s: %w", method, url, err)
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("decode %s %s: %w", method, url, err)
		}
	}
	return resp.StatusCode, out, nil
}

// registerHTTPServer registers a streamable HTTP backend with the daemon and returns its id.
func registerHTTPServer(b *testing.B, d *benchDaemon, client *http.Client, name, url string) string {
	b.Helper()
	code, s, err := restJSON(context.Background(), client, "POST", d.api+"/servers", map[string]any{
		"name": name, "transport_type": "HTTP", "connection_config": map[string]any{"base_url": url},
	})
	if err != nil || code != 201 {
		b.Fatalf("register %s: %d %v %v", name, code, s, err)
	}
	id, _ := s["id"].(string)
	return id
}

// waitTools waits until the server is CONNECTED with at least min tools discovered.
func waitTools(b *testing.B, d *benchDaemon, client *http.Client, id string, min int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, s, err := restJSON(context.Background(), client, "GET", d.api+"/servers/"+id, nil)
		if err == nil && s["status"] == "CONNECTED" {
			_, tools, err := restJSON(context.Background(), client, "GET", d.api+"/servers/"+id+"/tools?limit=1", nil)
			if n, _ := tools["total"].(float64); err == nil && int(n) >= min {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("server %s not CONNECTED with %d tools within 30s; daemon logs:\n%s", id, min, d.logs)
}

// connectMCP opens one go-sdk client session (it multiplexes concurrent calls) with the protocol version pinned.
func connectMCP(b testing.TB, endpoint string, opts *mcp.ClientOptions) *mcp.ClientSession {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "routing-bench", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: benchHTTPClient()},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		b.Fatalf("connect to %s: %v", endpoint, err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return sess
}

// waitMCPTool waits until the session lists the tool.
func waitMCPTool(b *testing.B, sess *mcp.ClientSession, name string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for t, err := range sess.Tools(ctx, nil) {
			if err == nil && t.Name == name {
				cancel()
				return
			}
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("the MCP endpoint does not list %s", name)
}

// caller makes one tool call and reports whether it succeeded.
type caller = loadgen.Caller

// mcpCaller calls a tool over an MCP session; a result flagged isError is a failure.
func mcpCaller(sess *mcp.ClientSession, tool string) caller {
	return loadgen.MCPCaller(sess, tool, benchEchoMessage)
}

// restCaller calls a tool through POST /api/v1/tools/call; anything but 200 is a failure.
func restCaller(client *http.Client, url, tool string) caller {
	return loadgen.RESTCaller(client, url, tool, benchEchoMessage)
}

// checkEcho makes one call on each path by hand and checks the backend's answer came back, so the benchmark never
// measures a fast error.
func checkEcho(b *testing.B, sess *mcp.ClientSession, tool string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": benchEchoMessage}})
	if err != nil {
		b.Fatalf("call %s: %v", tool, err)
	}
	raw, _ := json.Marshal(res.Content)
	if res.IsError || !strings.Contains(string(raw), benchEchoMessage) {
		b.Fatalf("call %s answered %s", tool, raw)
	}
}

func checkRESTEcho(b *testing.B, client *http.Client, url, tool string) {
	b.Helper()
	code, res, err := restJSON(context.Background(), client, "POST", url, map[string]any{"name": tool, "arguments": map[string]any{"message": benchEchoMessage}})
	raw, _ := json.Marshal(res)
	if err != nil || code != 200 || !strings.Contains(string(raw), benchEchoMessage) {
		b.Fatalf("REST call %s: %d %v %s", tool, code, err, raw)
	}
}

// loadResult is one measurement: the latency of every successful call, the failures and the wall time.
type loadResult = loadgen.Result

// closedLoop runs workers callers back to back until maxCalls calls were started or limit passed.
func closedLoop(call caller, workers, maxCalls int, limit time.Duration) loadResult {
	return loadgen.Closed(call, workers, maxCalls, limit, callTimeout)
}

// openLoop starts rate calls a second for d on a fixed schedule, whether or not earlier calls completed
// (loadgen.Open: latency runs from the scheduled start).
func openLoop(call caller, rate int, d time.Duration) loadResult {
	return loadgen.Open(call, rate, d, callTimeout)
}

// A load is one of the three shapes, run after a warm-up at the same concurrency.
type load struct {
	name string
	run  func(caller) loadResult
}

func routingLoads() []load {
	return []load{
		{"closed1", func(c caller) loadResult {
			closedLoop(c, 1, warmupCalls, closedLimit)
			return closedLoop(c, 1, closedCalls, closedLimit)
		}},
		{"open500", func(c caller) loadResult {
			closedLoop(c, 8, warmupCalls, closedLimit)
			return openLoop(c, openRate, openFor)
		}},
		{"saturate", func(c caller) loadResult {
			closedLoop(c, saturateCallers, 4*warmupCalls, closedLimit)
			return closedLoop(c, saturateCallers, saturateMaxCalls, saturateFor)
		}},
	}
}

// tail is the end of a log, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measure runs a load b.N times and reports its latency percentiles and rate.
func measure(b *testing.B, l load, call caller) loadResult {
	b.Helper()
	var all loadResult
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		all.Merge(l.run(call))
	}
	b.StopTimer()
	reportLoad(b, all)
	return all
}

// reportLoad reports a load's latencies, rate and errors; it fails the benchmark when no call succeeded and flags
// figures of which more than 1 % of calls failed.
func reportLoad(b *testing.B, all loadResult) {
	b.Helper()
	if len(all.Lat) == 0 {
		b.Fatalf("no call succeeded (%d failed): %v", all.Errs, all.LastErr)
	}
	if total := all.Errs + len(all.Lat); all.Errs*100 > total {
		b.Errorf("%d of %d calls failed (the figures are not trustworthy), last: %v", all.Errs, total, all.LastErr)
	} else if all.Errs > 0 {
		b.Logf("%d of %d calls failed, last: %v", all.Errs, total, all.LastErr)
	}
	b.ReportMetric(0, "ns/op") // the wall time of a fixed-shape load says nothing per op
	b.ReportMetric(ms(percentile(all.Lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(all.Lat, 0.99)), "p99-ms")
	b.ReportMetric(all.Rate(), "calls/s")
	b.ReportMetric(float64(all.Errs), "errors")
}

// BenchmarkRouting measures the aggregator's routing overhead and throughput against the same backend reached
// directly: per backend (the go-sdk echo backend and server-everything over streamable HTTP), per path (direct: a
// go-sdk session to the backend; rest: POST /api/v1/tools/call; mcp: a go-sdk session to the daemon's /mcp calling
// {server}__echo) and per load (closed1: one caller; open500: 500 calls/s on a fixed schedule; saturate: 32
// callers). The aggregated paths also report added-p50-ms/added-p99-ms against the direct run of the same backend
// and load in this invocation, and at saturation throughput-ratio (aggregated calls/s over direct calls/s) instead.
// Targets: added p50 < 0.3 ms at closed1, added p99 < 2 ms at open500, throughput-ratio >= 0.5.
func BenchmarkRouting(b *testing.B) {
	bins := buildBenchBinaries(b)
	d := startBenchDaemon(b, bins.aggregator, "warn")
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("daemon logs:\n%s", tail(d.logs.String(), 8000))
		}
	})
	admin := benchHTTPClient()
	restClient := benchHTTPClient()
	aggSess := connectMCP(b, d.mcp, nil)

	backends := []struct {
		name  string
		start func(b *testing.B) string
	}{
		{"gobackend", func(b *testing.B) string { return startEchoBackend(b, bins.echo, 0) }},
		{"everything-http", func(b *testing.B) string { return peertest.StartEverything(b, "streamableHttp").URL() }},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			url := be.start(b)
			id := registerHTTPServer(b, d, admin, be.name, url)
			b.Cleanup(func() {
				_, _, _ = restJSON(context.Background(), admin, "DELETE", d.api+"/servers/"+id, nil)
			})
			waitTools(b, d, admin, id, 1)
			alias := routing.Alias(be.name, "echo", "__")
			waitMCPTool(b, aggSess, alias)
			direct := connectMCP(b, url, nil)

			checkEcho(b, direct, "echo")
			checkEcho(b, aggSess, alias)
			checkRESTEcho(b, restClient, d.call, be.name+".echo")
			paths := []struct {
				name string
				call caller
			}{
				{"direct", mcpCaller(direct, "echo")},
				{"rest", restCaller(restClient, d.call, be.name+".echo")},
				{"mcp", mcpCaller(aggSess, alias)},
			}
			// The direct figures of this backend, by load, for the added-latency and throughput-ratio metrics.
			baseline := map[string]loadResult{}
			for _, p := range paths {
				b.Run(p.name, func(b *testing.B) {
					for _, l := range routingLoads() {
						b.Run(l.name, func(b *testing.B) {
							res := measure(b, l, p.call)
							if p.name == "direct" {
								baseline[l.name] = res
								return
							}
							base, ok := baseline[l.name]
							if !ok {
								// Run alone (-bench filtered out direct): measure the baseline now, unreported.
								base = l.run(paths[0].call)
								baseline[l.name] = base
							}
							if len(base.Lat) == 0 {
								b.Fatalf("the direct baseline had no successful call: %v", base.LastErr)
							}
							// At saturation latency is set by the queue of callers, not by the path: only the ratio
							// of rates says something there.
							if l.name == "saturate" {
								b.ReportMetric(res.Rate()/base.Rate(), "throughput-ratio")
								return
							}
							b.ReportMetric(ms(percentile(res.Lat, 0.50)-percentile(base.Lat, 0.50)), "added-p50-ms")
							b.ReportMetric(ms(percentile(res.Lat, 0.99)-percentile(base.Lat, 0.99)), "added-p99-ms")
						})
					}
				})
			}
		})
	}
}

// discoveryLog is the daemon's "tools discovered" log line (JSON).
type discoveryLog struct {
	Msg    string `json:"msg"`
	Server string `json:"server"`
	Total  int    `json:"total"`
	Took   string `json:"took"`
}

// discoveryTook finds how long the daemon says the discovery of server took (tools/list plus storing the tools).
func discoveryTook(logs, server string) (time.Duration, bool) {
	for _, line := range strings.Split(logs, "\n") {
		var l discoveryLog
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "tools discovered" || l.Server != server {
			continue
		}
		if d, err := time.ParseDuration(l.Took); err == nil {
			return d, true
		}
	}
	return 0, false
}

// BenchmarkDiscovery1000 measures the discovery of a server listing 1,000 tools (the echo backend with -tools
// 999): it registers the server, polls the REST API every 2 ms and reports, as medians over the rounds,
// register-to-connected-ms (connect + initialize), connected-to-listed-ms (from the first poll that saw CONNECTED
// to GET /servers/{id}/tools answering total 1000; the target is < 1 s), discovery-ms (the daemon's own log of
// tools/list plus storing the tools) and connected-to-mcp-ms (until the daemon's /mcp lists the 1,000 aliased
// tools to a connected client).
func BenchmarkDiscovery1000(b *testing.B) {
	bins := buildBenchBinaries(b)
	url := startEchoBackend(b, bins.echo, discoveryTools-1)
	// info: the "tools discovered" line carries the daemon's own timing.
	d := startBenchDaemon(b, bins.aggregator, "info")
	admin := benchHTTPClient()
	changed := make(chan struct{}, 1)
	aggSess := connectMCP(b, d.mcp, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})

	var toConnected, toListed, took, toMCP []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < discoveryRounds; r++ {
			name := fmt.Sprintf("many%d-%d", i, r)
			start := time.Now()
			id := registerHTTPServer(b, d, admin, name, url)
			connected, listed := pollDiscovery(b, d, admin, id)
			toConnected = append(toConnected, connected.Sub(start))
			toListed = append(toListed, listed.Sub(connected))
			mcpListed := waitMCPCount(b, aggSess, changed, name+"__", discoveryTools)
			toMCP = append(toMCP, mcpListed.Sub(connected))
			if t, ok := discoveryTook(d.logs.String(), name); ok {
				took = append(took, t)
			}
			if code, _, err := restJSON(context.Background(), admin, "DELETE", d.api+"/servers/"+id, nil); err != nil || code != 204 {
				b.Fatalf("delete %s: %d %v", name, code, err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(percentile(toConnected, 0.5)), "register-to-connected-ms")
	b.ReportMetric(ms(percentile(toListed, 0.5)), "connected-to-listed-ms")
	b.ReportMetric(ms(percentile(toListed, 1)), "connected-to-listed-max-ms")
	b.ReportMetric(ms(percentile(toMCP, 0.5)), "connected-to-mcp-ms")
	if len(took) > 0 {
		b.ReportMetric(ms(percentile(took, 0.5)), "discovery-ms")
	} else {
		b.Logf("no \"tools discovered\" line in the daemon's log: discovery-ms not reported")
	}
}

// pollDiscovery polls the server until it is CONNECTED, then its tools until all 1,000 are listed, and returns
// when each was first seen.
func pollDiscovery(b *testing.B, d *benchDaemon, client *http.Client, id string) (connected, listed time.Time) {
	b.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(discoveryDeadline)
	for time.Now().Before(deadline) {
		if connected.IsZero() {
			_, s, err := restJSON(ctx, client, "GET", d.api+"/servers/"+id, nil)
			if err != nil {
				b.Fatal(err)
			}
			switch s["status"] {
			case "CONNECTED":
				connected = time.Now()
			case "ERROR":
				b.Fatalf("server went to ERROR: %v", s)
			}
		}
		if !connected.IsZero() {
			_, tools, err := restJSON(ctx, client, "GET", d.api+"/servers/"+id+"/tools?limit=1", nil)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := tools["total"].(float64); int(n) == discoveryTools {
				return connected, time.Now()
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("server %s: %d tools not listed within %v; daemon logs:\n%s", id, discoveryTools, discoveryDeadline, d.logs)
	return
}

// waitMCPCount waits until the MCP session lists want tools whose names start with prefix, listing again on every
// tools/list_changed notification (and every 100 ms in case one was coalesced).
func waitMCPCount(b *testing.B, sess *mcp.ClientSession, changed <-chan struct{}, prefix string, want int) time.Time {
	b.Helper()
	deadline := time.Now().Add(discoveryDeadline)
	var lastErr error
	n := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		n, lastErr = 0, nil
		for t, err := range sess.Tools(ctx, &mcp.ListToolsParams{Meta: mcp.Meta{mcpserver.TokenBudgetMetaKey: 0}}) { // every tool, whatever the budget
			if err != nil {
				lastErr = err
				break
			}
			if strings.HasPrefix(t.Name, prefix) {
				n++
			}
		}
		cancel()
		if n == want {
			return time.Now()
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
	b.Fatalf("the MCP endpoint lists %d of %d tools %s* after %v (last error %v)", n, want, prefix, discoveryDeadline, lastErr)
	return time.Time{}
}
