package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func reportLatencies(b *testing.B, ds []time.Duration) {
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(ds, 0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1000, "p99-ms")
}

func openBenchStore(b *testing.B, kind string) persistence.Store {
	ctx := context.Background()
	var st persistence.Store
	var err error
	if kind == "postgres" {
		st, err = postgres.Open(ctx, pgtest.NewDatabase(b))
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(b.TempDir(), "agg.db"))
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	return st
}

// inProcess runs the store, the actors and the REST API in this process on a loopback port.
func inProcess(b *testing.B, st persistence.Store, cfg actors.Config) (*actors.System, string) {
	quiet := slog.New(slog.DiscardHandler)
	if path := os.Getenv("BENCH_DAEMON_LOG"); path != "" { // the in-process daemon's debug log, for a failed run
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		quiet = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	app := api.New(api.Deps{Store: st, Control: sys, Logger: quiet, Config: api.Config{AskTimeout: 5 * time.Second}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	b.Cleanup(func() {
		_ = app.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	})
	return sys, "http://" + ln.Addr().String() + "/api/v1/aggregator"
}

// BenchmarkRegistration measures POST /servers end to end over loopback HTTP (validation, the registry actor, the
// store insert, the actor spawn) on each store: 200 registrations per run, latency percentiles reported.
func BenchmarkRegistration(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			const n = 200
			var all []time.Duration
			client := &http.Client{}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cfg := actors.DefaultConfig()
				cfg.MaxServers = n
				_, base := inProcess(b, openBenchStore(b, kind), cfg)
				b.StartTimer()
				for j := 0; j < n; j++ {
					body := fmt.Sprintf(`{"name":"bench-%d","transport_type":"HTTP","auto_connect":false,"connection_config":{"base_url":"http://127.0.0.1:1/mcp"}}`, j)
					start := time.Now()
					resp, err := client.Post(base+"/servers", "application/json", strings.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					all = append(all, time.Since(start))
					if resp.StatusCode != 201 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			}
			reportLatencies(b, all)
		})
	}
}

// BenchmarkConnect measures connect + initialize of one server per transport against server-everything, from the
// Connect request to the CONNECTED event, 20 times per run.
func BenchmarkConnect(b *testing.B) {
	for _, tr := range []string{persistence.TransportSTDIO, persistence.TransportSSE, persistence.TransportHTTP} {
		b.Run(tr, func(b *testing.B) {
			var config map[string]any
			switch tr {
			case persistence.TransportSTDIO:
				cmd, args := peertest.EverythingStdio(b)
				config = map[string]any{"command": cmd, "args": args}
			case persistence.TransportSSE:
				config = map[string]any{"url": peertest.StartEverything(b, "sse").URL()}
			default:
				config = map[string]any{"base_url": peertest.StartEverything(b, "streamableHttp").URL()}
			}
			sys, _ := inProcess(b, openBenchStore(b, "sqlite"), actors.DefaultConfig())
			events := make(chan *pb.ServerStatusChanged, 16)
			sub := sys.ActorSystem().EventStream.Subscribe(func(e any) {
				if ev, ok := e.(*pb.ServerStatusChanged); ok {
					events <- ev
				}
			})
			defer sys.ActorSystem().EventStream.Unsubscribe(sub)
			raw, _ := json.Marshal(config)
			s, err := sys.Register(context.Background(), actors.RegisterRequest{Name: "bench", TransportType: tr, ConnectionConfig: raw})
			if err != nil {
				b.Fatal(err)
			}
			var all []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < 20; j++ {
					start := time.Now()
					if _, err := sys.Connect(context.Background(), s.ID); err != nil {
						b.Fatal(err)
					}
					waitEvent(b, events, persistence.StatusConnected)
					all = append(all, time.Since(start))
					if _, err := sys.Disconnect(context.Background(), s.ID, true); err != nil {
						b.Fatal(err)
					}
					waitEvent(b, events, persistence.StatusDisconnected)
				}
			}
			reportLatencies(b, all)
		})
	}
}

func waitEvent(b *testing.B, ch chan *pb.ServerStatusChanged, to string) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.To == to {
				return
			}
			if ev.To == persistence.StatusError {
				b.Fatalf("server went to ERROR: %s", ev.Reason)
			}
		case <-timeout:
			b.Fatalf("no %s event", to)
		}
	}
}

// BenchmarkDaemonMemory50Stdio runs the real daemon binary (built without -race), connects 50 stdio
// server-everything servers and reports its resident memory and the time until all are CONNECTED.
func BenchmarkDaemonMemory50Stdio(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	cmdPath, args := peertest.EverythingStdio(b)
	for i := 0; i < b.N; i++ {
		port := peertest.FreePort(b)
		base := fmt.Sprintf("http://127.0.0.1:%d/api/v1/aggregator", port)
		d := exec.Command(bin, "serve")
		d.Env = append(os.Environ(), fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", port), "MCP_AGGREGATOR_DATA_DIR="+b.TempDir(),
			fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", peertest.FreePort(b)),
			"MCP_AGGREGATOR_LOG_LEVEL=warn", "MCP_AGGREGATOR_METRICS_OPEN=true", "DATABASE_URL=")
		if err := d.Start(); err != nil {
			b.Fatal(err)
		}
		waitHTTP(b, base+"/health")
		root := fmt.Sprintf("http://127.0.0.1:%d", port)
		peak := sampleRSS(d.Process.Pid) // every relSampleEvery (50 ms)
		start := time.Now()
		connectStdio50(b, base, cmdPath, args)
		b.ReportMetric(time.Since(start).Seconds(), "s-to-all-connected")
		time.Sleep(2 * time.Second) // let start-up garbage settle
		b.ReportMetric(float64(rssKiB(b, d.Process.Pid))/1024, "daemon-RSS-MiB")
		// Where it goes (as BenchmarkSearchAtScale reports it): the heap in use, the soft limit in force, and the
		// binary's file-backed pages against anonymous memory.
		b.ReportMetric(metricAt(b, root, "go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(metricAt(b, root, "go_gc_gomemlimit_bytes")/(1<<20), "gomemlimit-MiB")
		b.ReportMetric(float64(procStatusKiB(b, d.Process.Pid, "RssFile"))/1024, "rss-file-MiB")
		b.ReportMetric(float64(procStatusKiB(b, d.Process.Pid, "RssAnon"))/1024, "rss-anon-MiB")
		// And once the daemon has been idle a while longer (classification done, the policy relaxed), with what it
		// allocates meanwhile (keep-alive pings, health checks).
		allocs0, at0 := metricAt(b, root, "go_memstats_alloc_bytes_total"), time.Now()
		time.Sleep(10 * time.Second)
		b.ReportMetric((metricAt(b, root, "go_memstats_alloc_bytes_total")-allocs0)/(1<<20)/time.Since(at0).Seconds(), "idle-alloc-MiB/s")
		b.ReportMetric(float64(rssKiB(b, d.Process.Pid))/1024, "daemon-RSS-idle-MiB")
		b.ReportMetric(metricAt(b, root, "go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-idle-MiB")
		// The most it held at any moment of the run (sampled every 50 ms from before the first server was
		// registered until now).
		b.ReportMetric(peak.done(), "peak-rss-MiB")
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
	}
}

// connectStdio50 registers 50 stdio servers running cmdPath args through the REST API at base and waits until all
// are CONNECTED (at most 3 minutes).
func connectStdio50(b *testing.B, base, cmdPath string, args []string) {
	b.Helper()
	for j := 0; j < 50; j++ {
		body, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("s%02d", j), "transport_type": "STDIO",
			"connection_config": map[string]any{"command": cmdPath, "args": args}})
		resp, err := http.Post(base+"/servers", "application/json", bytes.NewReader(body))
		if err != nil || resp.StatusCode != 201 {
			b.Fatalf("register %d: %v %v", j, err, resp)
		}
		resp.Body.Close()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/servers?status=CONNECTED")
		if err != nil {
			b.Fatal(err)
		}
		var list struct{ Total int }
		_ = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if list.Total == 50 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of 50 connected", list.Total)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitHTTP(b *testing.B, url string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("%s did not answer", url)
}

func rssKiB(b *testing.B, pid int) int { return procStatusKiB(b, pid, "VmRSS") }

// procCPU is the CPU time (user and system) process pid has used so far, from /proc/pid/stat; a process's
// children are not in it until they exit.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: the fields counted from the last ')' (utime is field 14,
	// stime 15; the state after ')' is field 3).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// procStatusKiB reads one kB field of /proc/pid/status (VmRSS, RssAnon, RssFile, VmHWM).
func procStatusKiB(b *testing.B, pid int, field string) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
