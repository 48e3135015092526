package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// rig is one actor system on an embedded store in a temp dir.
type rig struct {
	t     *testing.T
	store persistence.Store
	sys   *actors.System
	cfg   actors.Config
	path  string
	mx    *metrics.Metrics // the system's metrics, when a test reads them (nil: none)
}

func testConfig() actors.Config {
	cfg := actors.DefaultConfig()
	cfg.ConnectionTimeout = 20 * time.Second
	cfg.RequestTimeout = 20 * time.Second
	return cfg
}

func newRig(t *testing.T, cfg actors.Config) *rig {
	t.Helper()
	return newMeteredRig(t, cfg, nil)
}

// newMeteredRig is newRig with the system's metrics in mx.
func newMeteredRig(t *testing.T, cfg actors.Config, mx *metrics.Metrics) *rig {
	t.Helper()
	path := t.TempDir() + "/agg.db"
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	r := &rig{t: t, store: st, cfg: cfg, path: path, mx: mx}
	r.start()
	t.Cleanup(func() {
		r.stop()
		st.Close()
	})
	return r
}

func (r *rig) start() {
	r.t.Helper()
	sys, err := actors.Start(context.Background(), actors.Deps{Store: r.store, Config: r.cfg, Metrics: r.mx})
	if err != nil {
		r.t.Fatalf("start actors: %v", err)
	}
	r.sys = sys
}

func (r *rig) stop() {
	if r.sys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.sys.Shutdown(ctx); err != nil {
		r.t.Errorf("shutdown: %v", err)
	}
	r.sys = nil
}

func (r *rig) register(name, transport string, cfg map[string]any, health *string, auto bool) persistence.Server {
	r.t.Helper()
	raw, _ := json.Marshal(cfg)
	s, err := r.sys.Register(context.Background(), actors.RegisterRequest{
		Name: name, TransportType: transport, ConnectionConfig: raw, HealthCheckURL: health, AutoConnect: auto,
	})
	if err != nil {
		r.t.Fatalf("register %s: %v", name, err)
	}
	return s
}

// waitStatus polls the store until the server reaches want, and returns how long it took.
func (r *rig) waitStatus(id, want string, within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	var last persistence.Server
	for time.Since(start) < within {
		s, err := r.store.GetServer(context.Background(), id)
		if err == nil {
			last = s
			if s.Status == want {
				return time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("server %s did not reach %s within %v (status %s, error %v)", id, want, within, last.Status, ptr(last.ErrorMessage))
	return 0
}

// waitServer is waitStatus returning the row it saw in that status (a second read could already see the next one:
// a server in ERROR is retried after about a second).
func (r *rig) waitServer(id, want string, within time.Duration) persistence.Server {
	r.t.Helper()
	start := time.Now()
	var last persistence.Server
	for time.Since(start) < within {
		if s, err := r.store.GetServer(context.Background(), id); err == nil {
			last = s
			if s.Status == want {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("server %s did not reach %s within %v (status %s)", id, want, within, last.Status)
	return last
}

func ptr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func (r *rig) echo(id, msg string) (*pb.CallToolReply, error) {
	args, _ := json.Marshal(map[string]string{"message": msg})
	return r.sys.CallTool(context.Background(), id, "echo", args)
}

func mustEcho(t *testing.T, r *rig, id, msg string) {
	t.Helper()
	rep, err := r.echo(id, msg)
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if rep.Error != nil {
		t.Fatalf("echo error: %v", rep.Error)
	}
	if !strings.Contains(string(rep.ResultJson), msg) {
		t.Fatalf("echo result %s does not contain %q", rep.ResultJson, msg)
	}
}

// backend is one server-everything reachable over a transport, which the test can kill and bring back.
type backend struct {
	transport string
	config    map[string]any
	kill      func()
	revive    func()
}

func newBackend(t *testing.T, transport, marker string) backend {
	switch transport {
	case persistence.TransportSTDIO:
		cmd, args := peertest.EverythingStdio(t)
		// The marker argument lets the test find (and kill) exactly this server's child process.
		args = append(args, marker)
		b := backend{transport: transport, config: map[string]any{"command": cmd, "args": args}}
		b.kill = func() {
			for _, pid := range peertest.ProcessesWithArg(marker) {
				_ = syscallKill(pid)
			}
		}
		b.revive = func() {} // the actor restarts the command itself
		return b
	default:
		mode := "sse"
		key := "url"
		if transport == persistence.TransportHTTP {
			mode, key = "streamableHttp", "base_url"
		}
		p := peertest.StartEverything(t, mode)
		return backend{transport: transport, config: map[string]any{key: p.URL()}, kill: p.Kill, revive: p.Start}
	}
}

var transports = []string{persistence.TransportSTDIO, persistence.TransportSSE, persistence.TransportHTTP}

// TestLifecycleAgainstServerEverything walks each transport through register -> CONNECTED -> call -> disconnect
// -> reconnect -> backend killed -> ERROR (timed) -> CONNECTED again with no admin action -> delete.
func TestLifecycleAgainstServerEverything(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, testConfig())
			marker := fmt.Sprintf("marker-%s-%d", strings.ToLower(tr), time.Now().UnixNano())
			b := newBackend(t, tr, marker)
			s := r.register("every-"+strings.ToLower(tr), tr, b.config, nil, true)
			if s.Status != persistence.StatusConnecting {
				t.Fatalf("registration answered status %s, want CONNECTING", s.Status)
			}
			r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
			mustEcho(t, r, s.ID, "hello "+tr)

			// Disconnect and reconnect by admin.
			d, err := r.sys.Disconnect(context.Background(), s.ID, false)
			if err != nil || d.Status != persistence.StatusDisconnected {
				t.Fatalf("disconnect: %+v %v", d, err)
			}
			if rep, err := r.echo(s.ID, "x"); err != nil || rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable {
				t.Fatalf("call while disconnected: want SERVER_UNAVAILABLE, got %+v %v", rep, err)
			}
			c, err := r.sys.Connect(context.Background(), s.ID)
			if err != nil || c.Status != persistence.StatusConnecting {
				t.Fatalf("connect: %+v %v", c, err)
			}
			r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
			c, err = r.sys.Connect(context.Background(), s.ID)
			if err != nil || c.Message != "Server already connected" {
				t.Fatalf("second connect must be idempotent: %+v %v", c, err)
			}
			mustEcho(t, r, s.ID, "again")

			// The backend dies: ERROR within 2 s, on every transport.
			b.kill()
			died := time.Now()
			got := r.waitServer(s.ID, persistence.StatusError, 10*time.Second)
			took := time.Since(died)
			t.Logf("%s: ERROR %v after the backend died", tr, took)
			if took > 2*time.Second {
				t.Errorf("%s: backend death noticed after %v, want within 2s", tr, took)
			}
			if got.ErrorMessage == nil || *got.ErrorMessage == "" {
				t.Errorf("ERROR without error_message")
			}
			if tr == persistence.TransportSTDIO && !strings.Contains(ptr(got.ErrorMessage), "killed") {
				t.Errorf("stdio error_message should carry the exit status, got %q", ptr(got.ErrorMessage))
			}

			// It comes back: CONNECTED again without an admin touching it.
			b.revive()
			r.waitStatus(s.ID, persistence.StatusConnected, 20*time.Second)
			mustEcho(t, r, s.ID, "back")

			// Delete: gone from the store, with no child process left.
			if err := r.sys.Remove(context.Background(), s.ID); err != nil {
				t.Fatalf("remove: %v", err)
			}
			if _, err := r.store.GetServer(context.Background(), s.ID); !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("server still stored after remove: %v", err)
			}
			if tr == persistence.TransportSTDIO {
				waitNoProcess(t, marker)
			}
			if _, err := r.sys.Connect(context.Background(), s.ID); !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("connect after remove: want ErrNotFound, got %v", err)
			}
		})
	}
}

func waitNoProcess(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := peertest.ProcessesWithArg(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan processes left: %v", pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClosedPortFollowsBackoffSchedule registers an HTTP server on a port nobody listens on and reads the retry
// schedule back from the connection history: 1 s, 2 s, 4 s apart (+-20 % jitter).
func TestClosedPortFollowsBackoffSchedule(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	port := peertest.FreePort(t)
	s := r.register("closed-port", persistence.TransportHTTP, map[string]any{"base_url": fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}, nil, true)
	deadline := time.Now().Add(15 * time.Second)
	var starts []time.Time
	for time.Now().Before(deadline) {
		hist, err := r.store.ListHistory(context.Background(), s.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		starts = starts[:0]
		for i := len(hist) - 1; i >= 0; i-- { // oldest first
			if hist[i].EventType == persistence.StatusConnecting {
				starts = append(starts, hist[i].Timestamp)
			}
		}
		if len(starts) >= 4 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(starts) < 4 {
		t.Fatalf("want 4 connection attempts within 15s, saw %d", len(starts))
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		gap := starts[i+1].Sub(starts[i])
		lo, hi := time.Duration(float64(want)*0.75), time.Duration(float64(want)*1.25)+300*time.Millisecond
		if gap < lo || gap > hi {
			t.Errorf("gap %d = %v, want about %v", i+1, gap, want)
		}
	}
	// Between attempts the server is in ERROR with the reason (CONNECTING clears it): read it there.
	got := r.waitServer(s.ID, persistence.StatusError, 10*time.Second)
	if !strings.Contains(ptr(got.ErrorMessage), "refused") {
		t.Errorf("error_message %q should say the connection was refused", ptr(got.ErrorMessage))
	}
}

// TestHealthURLFailuresDegradeThenError drives CONNECTED -> DEGRADED -> ERROR with a health URL answering 500, and
// back to CONNECTED once it answers 200 again.
func TestHealthURLFailuresDegradeThenError(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	code := http.StatusOK
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(code)
	}))
	defer hs.Close()
	setCode := func(c int) { mu.Lock(); code = c; mu.Unlock() }

	cfg := testConfig()
	cfg.HealthInterval = 150 * time.Millisecond
	cfg.Retry.Backoff.Initial = 300 * time.Millisecond
	r := newRig(t, cfg)
	cmd, args := peertest.EverythingStdio(t)
	url := hs.URL + "/health"
	s := r.register("health-500", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, &url, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)

	// A 4xx is a configuration problem: it is not counted.
	setCode(http.StatusNotFound)
	time.Sleep(5 * cfg.HealthInterval)
	if got, _ := r.store.GetServer(context.Background(), s.ID); got.Status != persistence.StatusConnected || got.ConsecutiveFailures != 0 {
		t.Fatalf("4xx must not count: status %s failures %d", got.Status, got.ConsecutiveFailures)
	}

	setCode(http.StatusInternalServerError)
	r.waitStatus(s.ID, persistence.StatusDegraded, 5*time.Second)
	got := r.waitServer(s.ID, persistence.StatusError, 5*time.Second)
	if got.LastHealthCheck == nil || got.ConsecutiveFailures < 3 {
		t.Fatalf("health not recorded: last %v failures %d", got.LastHealthCheck, got.ConsecutiveFailures)
	}
	setCode(http.StatusOK)
	r.waitStatus(s.ID, persistence.StatusConnected, 10*time.Second)

	hist, _ := r.store.ListHistory(context.Background(), s.ID, 100)
	var seq []string
	for i := len(hist) - 1; i >= 0; i-- {
		seq = append(seq, hist[i].EventType)
	}
	joined := strings.Join(seq, ",")
	if !strings.Contains(joined, "CONNECTED,DEGRADED,ERROR,CONNECTING,CONNECTED") {
		t.Fatalf("history %s lacks CONNECTED,DEGRADED,ERROR,CONNECTING,CONNECTED", joined)
	}
}

// TestSlowCallBlocksNeitherSameServerNorOthers runs a 3 s call and, meanwhile, fast calls to the same server and
// to another server: they all return at once.
func TestSlowCallBlocksNeitherSameServerNorOthers(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	a := r.register("slow-a", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	b := r.register("slow-b", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	r.waitStatus(a.ID, persistence.StatusConnected, 30*time.Second)
	r.waitStatus(b.ID, persistence.StatusConnected, 30*time.Second)

	slowDone := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		rep, err := r.sys.CallTool(context.Background(), a.ID, "trigger-long-running-operation", []byte(`{"duration":3,"steps":3}`))
		if err != nil || rep.Error != nil {
			t.Errorf("slow call: %v %v", err, rep.GetError())
		}
		slowDone <- time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{a.ID, b.ID} {
		start := time.Now()
		mustEcho(t, r, id, "fast")
		// Blocked behind the 3 s call it would take at least 2.7 s; 2 s leaves room for a loaded machine.
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("fast call took %v while a slow call was running", d)
		}
	}
	// The slow call is pending: a disconnect without force reports it and drains.
	d, err := r.sys.Disconnect(context.Background(), a.ID, false)
	if err != nil || d.Status != persistence.StatusDisconnecting || d.PendingRequests != 1 {
		t.Fatalf("disconnect with a pending call: %+v %v", d, err)
	}
	if rep, _ := r.echo(a.ID, "late"); rep == nil || rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable {
		t.Fatalf("call while DISCONNECTING must be refused, got %+v", rep)
	}
	if took := <-slowDone; took < 2500*time.Millisecond {
		t.Fatalf("slow call returned after %v: it was not slow", took)
	}
	r.waitStatus(a.ID, persistence.StatusDisconnected, 5*time.Second)
}

// TestRestartSafety stops the actor system and starts another one on the same store: the connected server
// reconnects by itself, the disconnected one stays disconnected, and no child process survives the shutdown.
func TestRestartSafety(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("restart-marker-%d", time.Now().UnixNano())
	on := r.register("keep-on", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	off := r.register("keep-off", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, false)
	r.waitStatus(on.ID, persistence.StatusConnected, 30*time.Second)

	r.stop()
	waitNoProcess(t, marker)
	if s, _ := r.store.GetServer(context.Background(), on.ID); s.Status != persistence.StatusDisconnected || !s.AutoConnect {
		t.Fatalf("after shutdown: status %s auto_connect %v, want DISCONNECTED and true", s.Status, s.AutoConnect)
	}
	r.start()
	r.waitStatus(on.ID, persistence.StatusConnected, 30*time.Second)
	mustEcho(t, r, on.ID, "after restart")
	if s, _ := r.store.GetServer(context.Background(), off.ID); s.Status != persistence.StatusDisconnected {
		t.Fatalf("server registered without auto_connect is %s after restart", s.Status)
	}
}

// TestStdioCommandThatFailsReportsStderr: a command that exits at once ends in ERROR with its stderr in the message.
func TestStdioCommandThatFailsReportsStderr(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	s := r.register("bad-cmd", persistence.TransportSTDIO, map[string]any{"command": "sh", "args": []string{"-c", "echo boom-on-stderr >&2; exit 3"}}, nil, true)
	got := r.waitServer(s.ID, persistence.StatusError, 10*time.Second)
	if !strings.Contains(ptr(got.ErrorMessage), "boom-on-stderr") {
		t.Fatalf("error_message %q lacks the child's stderr", ptr(got.ErrorMessage))
	}
}

// TestEnvReferencesResolvedAtConnect: ${VAR} in the config is resolved from the environment when connecting, and
// the stored config keeps the reference.
func TestEnvReferencesResolvedAtConnect(t *testing.T) {
	r := newRig(t, testConfig())
	cmd, args := peertest.EverythingStdio(t)
	t.Setenv("AGG_TEST_SECRET", "s3cr3t-value")
	cfg := map[string]any{"command": cmd, "args": args, "env": map[string]string{"PEER_SECRET": "${AGG_TEST_SECRET}"}}
	s := r.register("env-ref", persistence.TransportSTDIO, cfg, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	got, _ := r.store.GetServer(context.Background(), s.ID)
	if !strings.Contains(string(got.ConnectionConfig), "${AGG_TEST_SECRET}") || strings.Contains(string(got.ConnectionConfig), "s3cr3t") {
		t.Fatalf("stored config must keep the reference unresolved: %s", got.ConnectionConfig)
	}
	// get-env returns the child's environment: the reference was resolved for the process.
	rep, err := r.sys.CallTool(context.Background(), s.ID, "get-env", []byte(`{}`))
	if err != nil || rep.Error != nil {
		t.Fatalf("get-env: %v %v", err, rep.GetError())
	}
	if !strings.Contains(string(rep.ResultJson), "s3cr3t-value") {
		t.Fatalf("child did not get the resolved variable")
	}

	os.Unsetenv("AGG_TEST_MISSING")
	cfg["env"] = map[string]string{"X": "${AGG_TEST_MISSING}"}
	m := r.register("env-missing", persistence.TransportSTDIO, cfg, nil, true)
	got = r.waitServer(m.ID, persistence.StatusError, 10*time.Second)
	if !strings.Contains(ptr(got.ErrorMessage), "AGG_TEST_MISSING") {
		t.Fatalf("error_message %q should name the missing variable", ptr(got.ErrorMessage))
	}
}

// TestMaxServers: registrations beyond MaxServers are refused with ErrMaxServers; a removal makes room again.
func TestMaxServers(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxServers = 3
	r := newRig(t, cfg)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, r.register(fmt.Sprintf("cap-%d", i), persistence.TransportHTTP, map[string]any{"base_url": "http://127.0.0.1:1/mcp"}, nil, false).ID)
	}
	raw := json.RawMessage(`{"base_url":"http://127.0.0.1:1/mcp"}`)
	req := actors.RegisterRequest{Name: "cap-over", TransportType: persistence.TransportHTTP, ConnectionConfig: raw}
	if _, err := r.sys.Register(context.Background(), req); !errors.Is(err, actors.ErrMaxServers) {
		t.Fatalf("4th registration: want ErrMaxServers, got %v", err)
	}
	if err := r.sys.Remove(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sys.Register(context.Background(), req); err != nil {
		t.Fatalf("registration after a removal: %v", err)
	}
}

// TestConnectionTimeout: a backend that never answers initialize ends in ERROR after the connection timeout, and
// its process is gone.
func TestConnectionTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ConnectionTimeout = 700 * time.Millisecond
	r := newRig(t, cfg)
	marker := fmt.Sprintf("mute-marker-%d", time.Now().UnixNano())
	start := time.Now()
	s := r.register("mute", persistence.TransportSTDIO, map[string]any{"command": "sh", "args": []string{"-c", "sleep 60", marker}}, nil, true)
	r.waitStatus(s.ID, persistence.StatusError, 10*time.Second)
	if took := time.Since(start); took < 600*time.Millisecond || took > 5*time.Second {
		t.Fatalf("ERROR after %v, want about the 700ms connection timeout", took)
	}
	got, _ := r.store.GetServer(context.Background(), s.ID)
	if !strings.Contains(ptr(got.ErrorMessage), "timed out") {
		t.Fatalf("error_message %q should say the connection timed out", ptr(got.ErrorMessage))
	}
	if _, err := r.sys.Disconnect(context.Background(), s.ID, true); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, marker)
}

// TestPingHealthOnFrozenBackend: without a health URL and without traffic, health checks ping the session; a frozen
// (SIGSTOP) backend fails them: DEGRADED, then ERROR; thawed (SIGCONT), it is reconnected.
func TestPingHealthOnFrozenBackend(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.HealthInterval = 200 * time.Millisecond
	cfg.HealthTimeout = 300 * time.Millisecond
	r := newRig(t, cfg)
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("frozen-marker-%d", time.Now().UnixNano())
	s := r.register("frozen", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	// Idle past the interval, checks ping: wait for a recorded ping (a loaded machine may take a few intervals).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, _ := r.store.GetServer(context.Background(), s.ID)
		if got.LastHealthCheck != nil && got.HealthResponseMs != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle server was not pinged within 10 s: last_health_check %v, health_response_ms %v", got.LastHealthCheck, got.HealthResponseMs)
		}
	}
	pids := peertest.ProcessesWithArg(marker)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	thawed := false
	defer func() {
		if !thawed {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	}()
	r.waitStatus(s.ID, persistence.StatusDegraded, 5*time.Second)
	got := r.waitServer(s.ID, persistence.StatusError, 5*time.Second)
	if !strings.Contains(ptr(got.ErrorMessage), "ping") {
		t.Fatalf("error_message %q should name the failed ping", ptr(got.ErrorMessage))
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	thawed = true
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	waitOneProcess(t, marker)
}

func waitOneProcess(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(peertest.ProcessesWithArg(marker)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("want exactly one process for the server, have %v", peertest.ProcessesWithArg(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNoOrphansAfterDisconnectAndCrashLoop: a disconnect ends the child; a command that keeps crashing is retried
// on the schedule and leaves no process behind.
func TestNoOrphansAfterDisconnectAndCrashLoop(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Retry.Backoff.Initial = 100 * time.Millisecond
	cfg.Retry.Backoff.Max = 200 * time.Millisecond
	r := newRig(t, cfg)
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("disc-marker-%d", time.Now().UnixNano())
	s := r.register("disc", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	if _, err := r.sys.Disconnect(context.Background(), s.ID, false); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, marker)

	// The crashing command spawns a grandchild (sleep) before dying: the whole group must go.
	crash := fmt.Sprintf("crash-marker-%d", time.Now().UnixNano())
	c := r.register("crashy", persistence.TransportSTDIO, map[string]any{"command": "sh", "args": []string{"-c", "sleep 30 & exit 1", crash}}, nil, true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		hist, _ := r.store.ListHistory(context.Background(), c.ID, 100)
		n := 0
		for _, h := range hist {
			if h.EventType == persistence.StatusError {
				n++
			}
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crash loop did not retry 3 times: %d errors", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := r.sys.Disconnect(context.Background(), c.ID, true); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, crash)
}
