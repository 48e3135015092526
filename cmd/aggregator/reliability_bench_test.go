package main

// Reliability benchmarks: the real daemon binary (built without -race) with 10 healthy backends under load, and
// beside them one hostile backend at a time (the small real servers under testdata/hostile/ and a few shell
// one-liners). Run them with
//
//	go test -run '^$' -bench Reliability -benchtime 1x -timeout 30m ./cmd/aggregator/
//
// Each scenario reports the daemon's peak resident memory, the healthy servers' errors and p99, and that p99 over
// the quiet p99 measured in the same run, the healthy call rate over the quiet one and the daemon's CPU. One
// scenario alone (the quiet run always comes first): -bench 'Reliability/notify-flood-list-changed'. The figures go to
// BENCHMARKS.md ("Reliability"). Every load is bounded in
// time and sends traffic only to loopback.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
)

const (
	relHealthy       = 10              // healthy backends
	relWorkers       = 8               // closed-loop callers of the healthy backends
	relQuietFor      = 5 * time.Second // the quiet measurement
	relHostileFor    = 8 * time.Second // each hostile scenario
	relRSSLimitMiB   = 300             // the bound on the daemon's memory
	relP99RatioLimit = 2.0             // the bound on healthy p99 under attack, over quiet
	relSampleEvery   = 50 * time.Millisecond
	relMaxCalls      = 100000 // healthy calls of one measurement, at most
)

// relDaemon is one daemon process that can be killed with SIGKILL and started again on the same data directory.
type relDaemon struct {
	bin, dataDir string
	env          []string
	port, mcp    int
	logs         *syncBuf
	cmd          *exec.Cmd
	done         chan struct{}
}

func (d *relDaemon) api() string { return fmt.Sprintf("http://127.0.0.1:%d/api/v1/aggregator", d.port) }
func (d *relDaemon) call() string {
	return fmt.Sprintf("http://127.0.0.1:%d/api/v1/tools/call", d.port)
}
func (d *relDaemon) mcpURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", d.mcp)
}

// newRelDaemon prepares a daemon on two free loopback ports; extraEnv may name its ports (SELF_MCP does). It is
// started at once and stopped when the benchmark ends.
func newRelDaemon(b *testing.B, bin string, extraEnv func(d *relDaemon) []string) *relDaemon {
	b.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	d := &relDaemon{bin: bin, dataDir: b.TempDir(), port: peertest.FreePort(b), mcp: peertest.FreePort(b)}
	d.env = append(os.Environ(),
		fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", d.port),
		fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", d.mcp),
		"MCP_AGGREGATOR_DATA_DIR="+d.dataDir,
		"MCP_AGGREGATOR_LOG_LEVEL=warn",
		"MCP_AGGREGATOR_LOG_FORMAT=json",
		"MCP_AGGREGATOR_RATE_LIMIT=0",
		// Settings a hostile stdio backend must never see (the env scenario looks for them).
		"MCP_CREDENTIAL_KEY="+base64.StdEncoding.EncodeToString(key),
		"DATABASE_URL=",
		"MCP_AGGREGATOR_MAX_SERVERS=1000", // the registration scenario registers hundreds
	)
	d.env = append(d.env, extraEnv(d)...)
	d.start(b)
	b.Cleanup(func() { d.stop() })
	return d
}

func (d *relDaemon) start(b *testing.B) {
	b.Helper()
	d.logs = &syncBuf{}
	d.cmd = exec.Command(d.bin, "serve")
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		b.Fatalf("start daemon: %v", err)
	}
	d.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(d.cmd, d.done)
	waitHTTP(b, d.api()+"/health")
}

// kill9 ends the daemon as a crash would: no shutdown runs.
func (d *relDaemon) kill9() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *relDaemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.kill9()
	}
}

// rssSampler records the daemon's largest resident set size while it runs.
type rssSampler struct {
	peak atomic.Int64 // KiB
	stop chan struct{}
	wg   sync.WaitGroup
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(relSampleEvery)
		defer t.Stop()
		for {
			if kib := vmRSSKiB(pid); kib > s.peak.Load() {
				s.peak.Store(kib)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// done stops sampling and returns the peak in MiB.
func (s *rssSampler) done() float64 {
	close(s.stop)
	s.wg.Wait()
	return float64(s.peak.Load()) / 1024
}

// vmRSSKiB reads VmRSS of a process (0 when it is gone).
func vmRSSKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// register registers a server and returns its id (failing the benchmark on anything but 201).
func (d *relDaemon) register(b *testing.B, client *http.Client, body map[string]any) string {
	b.Helper()
	code, s, err := restJSON(context.Background(), client, "POST", d.api()+"/servers", body)
	if err != nil || code != 201 {
		b.Fatalf("register %v: %d %v %v", body["name"], code, s, err)
	}
	id, _ := s["id"].(string)
	return id
}

func (d *relDaemon) waitStatus(b *testing.B, client *http.Client, id, want string, within time.Duration) map[string]any {
	b.Helper()
	deadline := time.Now().Add(within)
	var s map[string]any
	for time.Now().Before(deadline) {
		_, s, _ = restJSON(context.Background(), client, "GET", d.api()+"/servers/"+id, nil)
		if s["status"] == want {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("server %s not %s within %s: %v; logs:\n%s", id, want, within, s, tail(d.logs.String(), 4000))
	return nil
}

// healthyLoad calls the echo tool of every healthy backend, round robin, from relWorkers closed-loop callers.
func healthyLoad(client *http.Client, url string, names []string, limit time.Duration) loadResult {
	var next atomic.Uint64
	callers := make([]caller, len(names))
	for i, n := range names {
		callers[i] = restCaller(client, url, n+".echo")
	}
	return closedLoop(func(ctx context.Context) error {
		return callers[next.Add(1)%uint64(len(callers))](ctx)
	}, relWorkers, relMaxCalls, limit)
}

// hostile is one scenario: setup registers the hostile backend and returns a function that attacks until ctx
// ends (or nil when registering is the attack), and a check run after the load.
type hostile struct {
	name  string
	setup func(b *testing.B, d *relDaemon, client *http.Client) (attack func(ctx context.Context), check func(b *testing.B))
}

// removeServers deletes every server but the healthy ones, so that a scenario's hostile backend does not run on into
// the next scenario.
func (d *relDaemon) removeServers(b *testing.B, client *http.Client, keep map[string]bool) {
	b.Helper()
	_, list, err := restJSON(context.Background(), client, "GET", d.api()+"/servers?limit=1000", nil)
	if err != nil {
		b.Fatalf("list servers: %v", err)
	}
	servers, _ := list["servers"].([]any)
	for _, v := range servers {
		s, _ := v.(map[string]any)
		if name, _ := s["name"].(string); !keep[name] {
			id, _ := s["id"].(string)
			if code, _, err := restJSON(context.Background(), client, "DELETE", d.api()+"/servers/"+id, nil); err != nil || code != 204 {
				b.Errorf("delete %s: %d %v", name, code, err)
			}
		}
	}
}

// repeat runs fn in n goroutines until ctx ends.
func repeat(ctx context.Context, n int, fn func(ctx context.Context)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fn(ctx)
			}
		}()
	}
	wg.Wait()
}

// startHostileHTTP runs a hostile HTTP backend on a free port and returns the port.
func startHostileHTTP(b *testing.B, pkg string, env ...string) int {
	b.Helper()
	port := peertest.FreePort(b)
	cmd := exec.Command(peertest.GoBinary(b, pkg))
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("PORT=%d", port)), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", pkg, err)
	}
	b.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	waitTCP(b, port)
	return port
}

func waitTCP(b *testing.B, port int) {
	b.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("nothing listens on %d", port)
}

// callTool makes one REST call and returns its status and error code.
func callTool(ctx context.Context, client *http.Client, url, name string) (int, string) {
	code, body, err := restJSON(ctx, client, "POST", url, map[string]any{"name": name, "arguments": map[string]any{}})
	if err != nil {
		return 0, err.Error()
	}
	ec, _ := body["error_code"].(string)
	return code, ec
}

func hostileScenarios() []hostile {
	return []hostile{
		{"sse-endless-event", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			port := startHostileHTTP(b, "./testdata/hostile/sseflood")
			id := d.register(b, client, map[string]any{"name": "sseflood", "transport_type": "SSE",
				"connection_config": map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/sse", port)}})
			d.waitStatus(b, client, id, "CONNECTED", 30*time.Second)
			var refused atomic.Int64
			return func(ctx context.Context) {
					repeat(ctx, 2, func(ctx context.Context) {
						if _, ec := callTool(ctx, client, d.call(), "sseflood.flood"); ec == "RESPONSE_TOO_LARGE" {
							refused.Add(1)
						}
					})
				}, func(b *testing.B) {
					b.ReportMetric(float64(refused.Load()), "hostile-refused")
				}
		}},
		{"http-100MB-results-x5", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			port := startHostileHTTP(b, "./testdata/hostile/bigresult")
			id := d.register(b, client, map[string]any{"name": "bigresult", "transport_type": "HTTP",
				"connection_config": map[string]any{"base_url": fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}})
			d.waitStatus(b, client, id, "CONNECTED", 30*time.Second)
			var refused atomic.Int64
			return func(ctx context.Context) {
					repeat(ctx, 5, func(ctx context.Context) {
						if _, ec := callTool(ctx, client, d.call(), "bigresult.big"); ec == "RESPONSE_TOO_LARGE" {
							refused.Add(1)
						}
					})
				}, func(b *testing.B) {
					b.ReportMetric(float64(refused.Load()), "hostile-refused")
				}
		}},
		{"stdio-50MB-tools-list", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			id := d.register(b, client, map[string]any{"name": "biglist", "transport_type": "STDIO",
				"connection_config": map[string]any{"command": peertest.GoBinary(b, "./testdata/hostile/biglist")}})
			return func(ctx context.Context) {
				// Rediscovery on demand: every refresh makes the backend send its 50 MB list again.
				repeat(ctx, 1, func(ctx context.Context) {
					_, _, _ = restJSON(ctx, client, "POST", d.api()+"/servers/"+id+"/tools/refresh", nil)
					select {
					case <-ctx.Done():
					case <-time.After(500 * time.Millisecond):
					}
				})
			}, nil
		}},
		{"self-as-backend", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			// ${SELF_MCP} passes registration (it is resolved at connect time) and names the daemon's own /mcp.
			id := d.register(b, client, map[string]any{"name": "self", "transport_type": "HTTP",
				"connection_config": map[string]any{"base_url": "${SELF_MCP}"}})
			return nil, func(b *testing.B) {
				_, s, _ := restJSON(context.Background(), client, "GET", d.api()+"/servers/"+id, nil)
				tools, _ := s["tool_count"].(float64)
				b.ReportMetric(tools, "self-tools")
				if msg, _ := s["error_message"].(string); !strings.Contains(msg, "LOOP_DETECTED") {
					b.Errorf("self as backend: status %v, error %q; want ERROR naming LOOP_DETECTED", s["status"], msg)
				}
			}
		}},
		{"notify-flood-list-changed", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			// A stdio backend that sends notifications/tools/list_changed without end, as fast as the daemon reads.
			id := d.register(b, client, map[string]any{"name": "lcflood", "transport_type": "STDIO",
				"connection_config": map[string]any{"command": peertest.GoBinary(b, "./testdata/hostile/notifyflood"), "env": map[string]string{"FLOOD": "list_changed"}}})
			d.waitStatus(b, client, id, "CONNECTED", 30*time.Second)
			return nil, nil
		}},
		{"notify-flood-log-during-calls", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			return floodDuringCalls(b, d, client, "logflood", "log")
		}},
		{"notify-flood-progress-during-calls", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			return floodDuringCalls(b, d, client, "progflood", "progress")
		}},
		{"mcp-session-flood", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			var opened, refused atomic.Int64
			body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`)
			return func(ctx context.Context) {
					repeat(ctx, 8, func(ctx context.Context) {
						req, _ := http.NewRequestWithContext(ctx, "POST", d.mcpURL(), bytes.NewReader(body))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Accept", "application/json, text/event-stream")
						resp, err := client.Do(req)
						if err != nil {
							return
						}
						_ = resp.Body.Close()
						switch {
						case resp.StatusCode == 200:
							opened.Add(1)
						case resp.StatusCode == 429 || resp.StatusCode == 503:
							refused.Add(1)
						}
					})
				}, func(b *testing.B) {
					b.ReportMetric(float64(opened.Load()), "sessions-opened")
					b.ReportMetric(float64(refused.Load()), "sessions-refused")
				}
		}},
		{"crash-loop-after-initialize", func(b *testing.B, d *relDaemon, client *http.Client) (func(context.Context), func(*testing.B)) {
			// Answers initialize, then exits: before the fix it reconnected every 1.5 s forever.
			script := `read l; id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); ` +
				`printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"crash","version":"1"}}}\n' "$id"; sleep 0.2; exit 0`
			id := d.register(b, client, map[string]any{"name": "crashloop", "transport_type": "STDIO",
				"connection_config": map[string]any{"command": "sh", "args": []string{"-c", script}}})
			return nil, func(b *testing.B) {
				_, h, _ := restJSON(context.Background(), client, "GET", d.api()+"/servers/"+id+"/history?limit=100", nil)
				list, _ := h["history"].([]any)
				b.ReportMetric(float64(len(list)), "history-rows")
			}
		}},
	}
}

// floodDuringCalls registers the notifyflood stdio backend as name and returns an attack that, from an /mcp client
// that declared roots and set its log level, calls its burst tool back to back: 4,000 notifications of kind (log or
// progress, the latter with the call's progress token) before each result. The check reports the calls that
// completed and how many notifications reached the client.
func floodDuringCalls(b *testing.B, d *relDaemon, client *http.Client, name, kind string) (func(context.Context), func(*testing.B)) {
	b.Helper()
	id := d.register(b, client, map[string]any{"name": name, "transport_type": "STDIO",
		"connection_config": map[string]any{"command": peertest.GoBinary(b, "./testdata/hostile/notifyflood")}})
	d.waitStatus(b, client, id, "CONNECTED", 30*time.Second)
	var received, calls atomic.Int64
	cl := mcp.NewClient(&mcp.Implementation{Name: "flood-caller", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { received.Add(1) },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { received.Add(1) },
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcpURL()}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		b.Fatalf("connect to /mcp: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	if err := sess.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		b.Fatalf("set log level: %v", err)
	}
	tool := name + "__burst"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) { // until discovered
		if _, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"kind": kind, "n": 1}}); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("call %s: %v", tool, err)
		}
	}
	received.Store(0)
	return func(ctx context.Context) {
			repeat(ctx, 1, func(ctx context.Context) {
				p := &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"kind": kind, "n": floodBurst}}
				if kind == "progress" {
					p.SetProgressToken(fmt.Sprintf("flood-%d", calls.Load()))
				}
				if _, err := sess.CallTool(ctx, p); err == nil {
					calls.Add(1)
				}
			})
		}, func(b *testing.B) {
			b.ReportMetric(float64(calls.Load()), "hostile-calls")
			b.ReportMetric(float64(received.Load()), "hostile-relayed")
		}
}

// floodBurst is how many notifications one call of floodDuringCalls makes its backend send.
const floodBurst = 4000

// cpuTicks is the user and system time a process has used, in clock ticks (1/100 s on Linux).
func cpuTicks(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) start after its closing parenthesis.
	rest := string(raw[bytes.LastIndexByte(raw, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// cpuPercent is the CPU the process used between two cpuTicks readings over elapsed (100 %: one core).
func cpuPercent(before, after int64, elapsed time.Duration) float64 {
	return float64(after-before) / 100 / elapsed.Seconds() * 100
}

// BenchmarkReliability runs each hostile scenario beside 10 healthy backends under load and reports the daemon's
// peak memory and the healthy servers' errors and p99 against the quiet run. It fails when a bound of the
// reliability issue is missed: peak RSS over 300 MiB or any healthy error. The p99 ratio is reported (the loaded
// 2-core machine shares its cores between the load, the daemon and the hostile backend).
func BenchmarkReliability(b *testing.B) {
	bins := buildBenchBinaries(b)
	// SELF_MCP names the daemon's own /mcp by a spelling registration cannot see through (it is resolved at
	// connect time): the self-as-backend scenario registers ${SELF_MCP}.
	d := newRelDaemon(b, bins.aggregator, func(d *relDaemon) []string {
		return []string{fmt.Sprintf("SELF_MCP=http://localhost:%d/mcp", d.mcp)}
	})
	client := benchHTTPClient()
	var names []string
	for i := 0; i < relHealthy; i++ {
		name := fmt.Sprintf("healthy%02d", i)
		id := registerHTTPServerAt(b, d, client, name, startEchoBackend(b, bins.echo, 0))
		d.waitStatus(b, client, id, "CONNECTED", 30*time.Second)
		names = append(names, name)
	}
	closedLoop(func(ctx context.Context) error { return restCaller(client, d.call(), names[0]+".echo")(ctx) }, relWorkers, 2000, 10*time.Second)

	rss := sampleRSS(d.cmd.Process.Pid)
	cpu0 := cpuTicks(d.cmd.Process.Pid)
	quiet := healthyLoad(client, d.call(), names, relQuietFor)
	quietCPU := cpuPercent(cpu0, cpuTicks(d.cmd.Process.Pid), quiet.Elapsed)
	quietRSS := rss.done()
	quietP99 := percentile(quiet.Lat, 0.99)
	b.Run("quiet", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(quietP99), "healthy-p99-ms")
		b.ReportMetric(quiet.Rate(), "healthy-calls/s")
		b.ReportMetric(quietCPU, "daemon-cpu-%")
		b.ReportMetric(float64(quiet.Errs), "healthy-errors")
		b.ReportMetric(quietRSS, "peak-rss-MiB")
	})
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	hostileClient := benchHTTPClient() // the attack's connections are its own, as another client's would be
	for _, h := range hostileScenarios() {
		b.Run(h.name, func(b *testing.B) {
			defer d.removeServers(b, client, keep)
			attack, check := h.setup(b, d, hostileClient)
			ctx, cancel := context.WithTimeout(context.Background(), relHostileFor)
			defer cancel()
			rss := sampleRSS(d.cmd.Process.Pid)
			var wg sync.WaitGroup
			if attack != nil {
				wg.Add(1)
				go func() { defer wg.Done(); attack(ctx) }()
			}
			cpu0 := cpuTicks(d.cmd.Process.Pid)
			res := healthyLoad(client, d.call(), names, relHostileFor)
			cpu := cpuPercent(cpu0, cpuTicks(d.cmd.Process.Pid), res.Elapsed)
			cancel()
			wg.Wait()
			peak := rss.done()
			if len(res.Lat) == 0 {
				b.Fatalf("no healthy call succeeded (%d failed, last: %v); peak RSS %.0f MiB; daemon logs:\n%s", res.Errs, res.LastErr, peak, tail(d.logs.String(), 3000))
			}
			p99 := percentile(res.Lat, 0.99)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(p99), "healthy-p99-ms")
			b.ReportMetric(float64(p99)/float64(quietP99), "p99-ratio")
			b.ReportMetric(res.Rate(), "healthy-calls/s")
			b.ReportMetric(res.Rate()/quiet.Rate(), "rate-ratio")
			b.ReportMetric(cpu, "daemon-cpu-%")
			b.ReportMetric(float64(res.Errs), "healthy-errors")
			b.ReportMetric(peak, "peak-rss-MiB")
			if check != nil {
				check(b)
			}
			if res.Errs > 0 {
				b.Errorf("%d healthy calls failed, last: %v", res.Errs, res.LastErr)
			}
			if peak > relRSSLimitMiB {
				b.Errorf("daemon peak RSS %.0f MiB > %d MiB", peak, relRSSLimitMiB)
			}
			if r := float64(p99) / float64(quietP99); r > relP99RatioLimit {
				b.Logf("healthy p99 %.2f ms is %.1fx the quiet %.2f ms", ms(p99), r, ms(quietP99))
			}
		})
	}
	b.Run("stdio-child-environment", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		node, args := peertest.EverythingStdio(b)
		id := d.register(b, client, map[string]any{"name": "envcheck", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": node, "args": args}})
		d.waitStatus(b, client, id, "CONNECTED", 60*time.Second)
		var code int
		var res map[string]any
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) { // until discovered
			code, res, err = restJSON(context.Background(), client, "POST", d.call(), map[string]any{"name": "envcheck.get-env", "arguments": map[string]any{}})
			if err == nil && code == 200 || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || code != 200 {
			b.Fatalf("get-env: %d %v %v", code, err, res)
		}
		raw, _ := json.Marshal(res["content"])
		leaked := 0
		for _, name := range []string{"MCP_CREDENTIAL_KEY", "MCP_AGGREGATOR_LISTEN", "MCP_AGGREGATOR_MCP_LISTEN", "MCP_AGGREGATOR_DATA_DIR", "MCP_AGGREGATOR_RATE_LIMIT", "DATABASE_URL", "SELF_MCP"} {
			if strings.Contains(string(raw), name) {
				leaked++
				b.Errorf("the stdio child's environment holds %s", name)
			}
		}
		b.ReportMetric(float64(leaked), "daemon-settings-in-child-env")
	})
	b.Run("kill9-orphans", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		node, args := peertest.EverythingStdio(b)
		marker := fmt.Sprintf("reliability-orphan-%d", time.Now().UnixNano())
		script := fmt.Sprintf(`exec -a %s sleep 1000 & exec %s %s`, marker, node, strings.Join(args, " "))
		id := d.register(b, client, map[string]any{"name": "grandchild", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": "bash", "args": []string{"-c", script}}})
		d.waitStatus(b, client, id, "CONNECTED", 60*time.Second)
		before := peertest.ProcessesWithArg(marker)
		if len(before) == 0 {
			b.Fatalf("the grandchild %s is not running", marker)
		}
		d.kill9()
		d.start(b)
		d.waitStatus(b, client, id, "CONNECTED", 60*time.Second)
		// Live processes of the old tree (zombies waiting for init to reap them are dead): by pid, from before.
		alive := map[int]bool{}
		for _, pid := range peertest.ProcessesWithArg(marker) {
			alive[pid] = true
		}
		left := 0
		for _, pid := range before {
			if alive[pid] {
				left++
			}
		}
		b.ReportMetric(float64(left), "orphans-left")
		if left > 0 {
			b.Errorf("%d processes of the killed daemon's stdio server survived the restart", left)
		}
		_, _, _ = restJSON(context.Background(), client, "DELETE", d.api()+"/servers/"+id, nil)
	})
	b.Run("kill9-registrations", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		var mu sync.Mutex
		var acked []string
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var seq atomic.Int64
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					n := seq.Add(1)
					code, s, err := restJSON(ctx, client, "POST", d.api()+"/servers", map[string]any{"name": fmt.Sprintf("reg%04d", n),
						"transport_type": "HTTP", "auto_connect": false, "connection_config": map[string]any{"base_url": "http://127.0.0.1:9/mcp"}})
					if err == nil && code == 201 {
						mu.Lock()
						acked = append(acked, s["id"].(string))
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		d.kill9()
		cancel()
		wg.Wait()
		d.start(b)
		lost := 0
		for _, id := range acked {
			if code, _, _ := restJSON(context.Background(), client, "GET", d.api()+"/servers/"+id, nil); code != 200 {
				lost++
			}
		}
		b.ReportMetric(float64(len(acked)), "acknowledged")
		b.ReportMetric(float64(lost), "lost")
		if lost > 0 {
			b.Errorf("%d of %d acknowledged registrations lost across kill -9", lost, len(acked))
		}
	})
}

// registerHTTPServerAt registers a streamable HTTP backend with a relDaemon.
func registerHTTPServerAt(b *testing.B, d *relDaemon, client *http.Client, name, url string) string {
	b.Helper()
	return d.register(b, client, map[string]any{"name": name, "transport_type": "HTTP", "connection_config": map[string]any{"base_url": url}})
}
