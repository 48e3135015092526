package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// scaleServers and scaleToolsPerServer size the catalogue of BenchmarkSearchAtScale (issue 11): 10,000 tools of
// about 1.3 KB of text each, on 10 stdio servers.
const (
	scaleServers        = 10
	scaleToolsPerServer = 1000
)

// catalogID is the letters-only id the catalog server ends tool i's name with (testdata/catalog).
func catalogID(prefix string, n int) string {
	var b []byte
	for {
		b = append(b, byte('a'+n%26))
		n /= 26
		if n == 0 {
			break
		}
	}
	return prefix + "q" + string(b)
}

// scaleQueries returns n requests composed from general English words (not the catalogue's own sentences, not a
// fixture's queries), with a seeded generator so that every run asks the same.
func scaleQueries(n int) []string {
	words := strings.Fields(`find send show list my recent open all new files messages reports for the team
		create a weekly budget chart check order status of customer update contact details book a meeting room
		download photos from album track shipment and delivery translate document into review pending invoices
		schedule posts on channel search songs by artist weather forecast for city export table to sheet`)
	r := rand.New(rand.NewPCG(11, 7))
	out := make([]string, n)
	for i := range out {
		k := 3 + r.IntN(6)
		q := make([]string, k)
		for j := range q {
			q[j] = words[r.IntN(len(words))]
		}
		out[i] = strings.Join(q, " ")
	}
	return out
}

type scaleDaemon struct {
	b    *testing.B
	base string // http://host:port
	cmd  *exec.Cmd
}

func (d *scaleDaemon) post(path string, body any) (*http.Response, error) {
	raw, _ := json.Marshal(body)
	return http.Post(d.base+path, "application/json", bytes.NewReader(raw))
}

// search runs one POST /api/v1/search and returns the names of the tools found.
func (d *scaleDaemon) search(query, strategy string, limit int) []string {
	d.b.Helper()
	body := map[string]any{"query": query, "limit": limit}
	if strategy != "" {
		body["strategy"] = strategy
	}
	resp, err := d.post("/api/v1/search", body)
	if err != nil {
		d.b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Tools []struct {
			Name         string `json:"name"`
			IsClassified bool   `json:"is_classified"`
		} `json:"tools"`
	}
	if resp.StatusCode != 200 {
		d.b.Fatalf("search %q: status %d", query, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		d.b.Fatal(err)
	}
	names := make([]string, len(out.Tools))
	for i, t := range out.Tools {
		names[i] = t.Name
	}
	return names
}

// register adds a stdio catalog server serving tools with ids prefix+"q…".
func (d *scaleDaemon) register(bin, name, prefix string, seed, tools int) {
	d.b.Helper()
	resp, err := d.post("/api/v1/aggregator/servers", map[string]any{"name": name, "transport_type": "STDIO",
		"connection_config": map[string]any{"command": bin,
			"args": []string{"-tools", strconv.Itoa(tools), "-seed", strconv.Itoa(seed), "-prefix", prefix}}})
	if err != nil || resp.StatusCode != 201 {
		d.b.Fatalf("register %s: %v %v", name, err, resp)
	}
	resp.Body.Close()
}

// waitSearchable waits until the first and the last tool of each named server are found by their id (a server's
// tools are indexed in one batch) and returns the time it took from start. Each round probes the pending servers
// in order and stops at the first one not searchable yet (they mostly finish in the order they were registered),
// then waits 50 ms: every probe is a search over all the tools, and probing every pending server every 20 ms took
// a third of the process's CPU (BENCHMARKS.md, issue 25) from the indexing it waits for, on 2 cores.
func (d *scaleDaemon) waitSearchable(start time.Time, prefixes []string, tools int) time.Duration {
	d.b.Helper()
	pending := append([]string(nil), prefixes...)
	for len(pending) > 0 {
		var still []string
		for k, p := range pending {
			if !d.searchable(p, tools) {
				still = append(still, pending[k:]...)
				break
			}
		}
		pending = still
		if time.Since(start) > 5*time.Minute {
			d.b.Fatalf("servers %v not searchable after 5 minutes; the servers: %s", pending, d.serverStates())
		}
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// serverStates describes every registered server (name, status, tool count, error) for a failure message.
func (d *scaleDaemon) serverStates() string {
	resp, err := http.Get(d.base + "/api/v1/aggregator/servers?limit=100")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Servers []struct {
			Name      string `json:"name"`
			Status    string `json:"status"`
			ToolCount int    `json:"tool_count"`
			Error     string `json:"error_message"`
		} `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, s := range out.Servers {
		fmt.Fprintf(&b, "\n  %s %s tools=%d %s", s.Name, s.Status, s.ToolCount, s.Error)
	}
	return b.String()
}

// searchable reports whether the last and the first tool of the server with this prefix are found by their ids.
func (d *scaleDaemon) searchable(prefix string, tools int) bool {
	for _, i := range []int{tools - 1, 0} {
		want := catalogID(prefix, i)
		// Ids stem alike ("cqa", "cqas"), so the tool is looked for among the first five, not only first.
		found := d.search(want, "direct", 5)
		if !slices.ContainsFunc(found, func(n string) bool { return strings.HasSuffix(n, "_"+want) }) {
			return false
		}
	}
	return true
}

// goMetric reads one of the Go runtime's gauges (go_memstats_heap_inuse_bytes, ...) from the daemon's /metrics.
func (d *scaleDaemon) goMetric(name string) float64 {
	d.b.Helper()
	return metricAt(d.b, d.base, name)
}

// metricAt reads one unlabelled gauge from the /metrics of the daemon at base (its metrics must be open).
func metricAt(b *testing.B, base, name string) float64 {
	b.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	b.Fatalf("no %s in /metrics", name)
	return 0
}

// BenchmarkSearchAtScale (issue 11) runs the real daemon binary (built without -race; embedded store, its own
// garbage-collection defaults: GOGC=400 and the memory policy of memory.go, unless the environment sets GOGC or
// GOMEMLIMIT) with a generated catalogue served by testdata/catalog over stdio: one server of
// 1,000 tools first (registration to searchable: s-index-1k), then 9 more (s-index-9k, to every tool searchable),
// then sequential POST /api/v1/search latency of the default strategy and of direct over 300 generated queries
// after 50 of warm-up, and the daemon's VmRSS and Go heap in use once classification has settled.
func BenchmarkSearchAtScale(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	catalog := peertest.GoBinary(b, "./testdata/catalog")
	queries := scaleQueries(350)
	for i := 0; i < b.N; i++ {
		port := peertest.FreePort(b)
		d := &scaleDaemon{b: b, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		d.cmd = exec.Command(bin, "serve")
		d.cmd.Env = append(os.Environ(), fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", port), "MCP_AGGREGATOR_DATA_DIR="+b.TempDir(),
			fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", peertest.FreePort(b)),
			"MCP_AGGREGATOR_LOG_LEVEL=warn", "MCP_AGGREGATOR_METRICS_OPEN=true", "DATABASE_URL=")
		d.cmd.Stderr = os.Stderr
		if err := d.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { // also when the benchmark fails half-way: a daemon left behind would load the machine
			if d.cmd.ProcessState != nil {
				return
			}
			_ = d.cmd.Process.Signal(syscall.SIGTERM) // it stops its stdio servers
			done := make(chan struct{})
			go func() { _ = d.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = d.cmd.Process.Kill()
				<-done
			}
		})
		waitHTTP(b, d.base+"/api/v1/aggregator/health")

		prefixes := make([]string, scaleServers)
		for j := range prefixes {
			prefixes[j] = string(rune('a' + j))
		}
		start := time.Now()
		d.register(catalog, "cat00", prefixes[0], 1, scaleToolsPerServer)
		b.ReportMetric(d.waitSearchable(start, prefixes[:1], scaleToolsPerServer).Seconds(), "s-index-1k")
		start = time.Now()
		cpu0 := procCPU(b, d.cmd.Process.Pid)
		for j := 1; j < scaleServers; j++ {
			d.register(catalog, fmt.Sprintf("cat%02d", j), prefixes[j], j+1, scaleToolsPerServer)
		}
		b.ReportMetric(d.waitSearchable(start, prefixes[1:], scaleToolsPerServer).Seconds(), "s-index-9k")
		// The daemon's own CPU over the same span (its stdio servers are other processes): what the catalogue costs,
		// which moves less than the time with what else the machine runs.
		b.ReportMetric((procCPU(b, d.cmd.Process.Pid) - cpu0).Seconds(), "daemon-cpu-s-index-9k")
		// The peak of RSS so far: indexing's, above what the daemon holds once it settles.
		b.ReportMetric(float64(procStatusKiB(b, d.cmd.Process.Pid, "VmHWM"))/1024, "daemon-RSS-peak-MiB")

		// Settle: wait until classification has finished (every tool's is_classified), then let the collector run.
		d.waitClassified()
		time.Sleep(3 * time.Second)
		b.ReportMetric(float64(rssKiB(b, d.cmd.Process.Pid))/1024, "daemon-RSS-MiB")
		b.ReportMetric(d.goMetric("go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-MiB")
		// The soft memory limit in force (the daemon's memory policy moves it after every collection) and the heap
		// size at which the next collection starts.
		b.ReportMetric(d.goMetric("go_gc_gomemlimit_bytes")/(1<<20), "gomemlimit-MiB")
		b.ReportMetric(d.goMetric("go_memstats_next_gc_bytes")/(1<<20), "next-gc-MiB")
		// Where the rest of RSS is: file-backed pages (the binary's text and data), anonymous pages, and the
		// runtime's own accounts (stacks, span and GC metadata) and heap pages it holds but does not use.
		pid := d.cmd.Process.Pid
		b.ReportMetric(float64(procStatusKiB(b, pid, "RssFile"))/1024, "rss-file-MiB")
		b.ReportMetric(float64(procStatusKiB(b, pid, "RssAnon"))/1024, "rss-anon-MiB")
		b.ReportMetric((d.goMetric("go_memstats_heap_idle_bytes")-d.goMetric("go_memstats_heap_released_bytes"))/(1<<20), "heap-idle-unreleased-MiB")
		b.ReportMetric((d.goMetric("go_memstats_stack_sys_bytes")+d.goMetric("go_memstats_mspan_sys_bytes")+d.goMetric("go_memstats_gc_sys_bytes")+d.goMetric("go_memstats_other_sys_bytes")+d.goMetric("go_memstats_buck_hash_sys_bytes")+d.goMetric("go_memstats_mcache_sys_bytes"))/(1<<20), "runtime-sys-MiB")

		for _, strategy := range []string{"", "direct"} {
			for _, q := range queries[:50] {
				d.search(q, strategy, 10)
			}
			var ds []time.Duration
			for _, q := range queries[50:] {
				t := time.Now()
				d.search(q, strategy, 10)
				ds = append(ds, time.Since(t))
			}
			name := "default"
			if strategy != "" {
				name = strategy
			}
			b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, name+"-p50-ms")
			b.ReportMetric(float64(percentile(ds, 0.95).Microseconds())/1000, name+"-p95-ms")
		}
		b.ReportMetric(float64(rssKiB(b, d.cmd.Process.Pid))/1024, "daemon-RSS-after-search-MiB")
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
}

// waitClassified waits until the skills' tool counts (GET /api/v1/skills) cover the catalogue and stop moving for
// a second, or stop moving for 10 s (tools without a skill).
func (d *scaleDaemon) waitClassified() {
	d.b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	last, stable := -1, 0
	for time.Now().Before(deadline) {
		n := d.classifiedCount()
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
		if n >= scaleServers*scaleToolsPerServer && stable >= 2 {
			return
		}
		if stable >= 20 { // 10 s without progress: some tools have no skill
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	d.b.Fatalf("classification did not settle (%d)", last)
}

// classifiedCount sums the tool counts of GET /api/v1/skills.
func (d *scaleDaemon) classifiedCount() int {
	resp, err := http.Get(d.base + "/api/v1/skills")
	if err != nil {
		d.b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Skills []struct {
			ToolCount int `json:"tool_count"`
		} `json:"skills"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	n := 0
	for _, s := range out.Skills {
		n += s.ToolCount
	}
	return n
}

// BenchmarkSearchAtScaleHeap runs the same catalogue as BenchmarkSearchAtScale in this process (embedded store,
// default configuration) to see where the memory goes: once classification has settled it collects garbage,
// reports the heap in use and, with SCALE_HEAP_PROFILE=file, writes a heap profile for `go tool pprof` (and
// SCALE_CPU_PROFILE=file a CPU profile of searches in the default strategy). SCALE_WITH_MCP=1 adds the MCP
// endpoint, which the daemon runs and which lists every tool; SCALE_DAEMON_GC=1 the daemon's garbage-collection
// defaults (memory.go) instead of the test binary's.
func BenchmarkSearchAtScaleHeap(b *testing.B) {
	catalog := peertest.GoBinary(b, "./testdata/catalog")
	if os.Getenv("SCALE_DAEMON_GC") != "" { // the daemon's garbage-collection defaults (GOGC=400, the memory policy)
		gc := debug.SetGCPercent(100)
		if p := memoryDefaults(os.LookupEnv); p != nil {
			b.Cleanup(p.stop)
		}
		b.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(math.MaxInt64) })
	}
	for i := 0; i < b.N; i++ {
		st := openBenchStore(b, "sqlite")
		sys, base := inProcess(b, st, actors.DefaultConfig())
		if os.Getenv("SCALE_WITH_MCP") != "" { // the MCP endpoint as the daemon runs it, listing every tool
			endpoint := mcpserver.New(sys, st, mcpserver.Options{})
			b.Cleanup(endpoint.Close)
		}
		d := &scaleDaemon{b: b, base: strings.TrimSuffix(base, "/api/v1/aggregator")}
		prefixes := make([]string, scaleServers)
		// With SCALE_INDEX_CPU_PROFILE=file, a CPU profile from the first registration to every tool searchable.
		var indexProfile *os.File
		if path := os.Getenv("SCALE_INDEX_CPU_PROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			indexProfile = f
			b.Cleanup(func() { // also when the tools never become searchable: where the time went is the question
				if indexProfile != nil {
					pprof.StopCPUProfile()
					_ = f.Close()
				}
			})
		}
		start := time.Now()
		for j := range prefixes {
			prefixes[j] = string(rune('a' + j))
			d.register(catalog, fmt.Sprintf("cat%02d", j), prefixes[j], j+1, scaleToolsPerServer)
		}
		b.ReportMetric(d.waitSearchable(start, prefixes, scaleToolsPerServer).Seconds(), "s-index-10k")
		if indexProfile != nil {
			pprof.StopCPUProfile()
			_ = indexProfile.Close()
			indexProfile = nil
		}
		d.waitClassified()
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-live-MiB") // after a collection: the live objects
		if path := os.Getenv("SCALE_HEAP_PROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		// With SCALE_CPU_PROFILE=file, a CPU profile of 300 searches in the default strategy.
		if path := os.Getenv("SCALE_CPU_PROFILE"); path != "" {
			queries := scaleQueries(350)
			for _, q := range queries[:50] {
				d.search(q, "", 10)
			}
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			for _, q := range queries[50:] {
				d.search(q, "", 10)
			}
			pprof.StopCPUProfile()
			_ = f.Close()
		}
	}
}
