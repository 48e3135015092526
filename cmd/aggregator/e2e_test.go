package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// binary is built once per test run, in TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aggregator-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is the aggregator binary running as its own process.
type daemon struct {
	t    *testing.T
	env  []string
	base string
	mcp  string // base URL of the MCP listener
	cmd  *exec.Cmd
	logs *syncBuf
	done chan error
}

func newDaemon(t *testing.T, databaseURL string) *daemon {
	port, mcpPort := peertest.FreePort(t), peertest.FreePort(t)
	env := append(os.Environ(),
		fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", port),
		fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", mcpPort),
		"MCP_AGGREGATOR_DATA_DIR="+t.TempDir(),
		"MCP_AGGREGATOR_SHUTDOWN_TIMEOUT=10",
		"DATABASE_URL="+databaseURL,
	)
	return &daemon{t: t, env: env, base: fmt.Sprintf("http://127.0.0.1:%d/api/v1/aggregator", port),
		mcp: fmt.Sprintf("http://127.0.0.1:%d", mcpPort)}
}

func (d *daemon) start() {
	d.t.Helper()
	d.cmd = exec.Command(binary, "serve")
	d.cmd.Env = d.env
	d.logs = &syncBuf{}
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start daemon: %v", err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	logs := d.logs
	d.t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		// The binary is built with -race: a race in the daemon fails the test that ran it.
		if races := ourRaces(logs.String()); len(races) > 0 {
			d.t.Errorf("the daemon reported %d data races:\n%s", len(races), strings.Join(races, "\n"))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(d.base + "/health"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("daemon did not answer /health; logs:\n%s", d.logs)
}

// signal sends sig and waits for the process to exit within limit.
func (d *daemon) signal(sig syscall.Signal, limit time.Duration) time.Duration {
	d.t.Helper()
	start := time.Now()
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
		return time.Since(start)
	case <-time.After(limit):
		d.t.Fatalf("daemon did not exit within %v of %v; logs:\n%s", limit, sig, d.logs)
	}
	return 0
}

// ourRaces returns the race reports of a daemon's output where code of ours makes one of the two conflicting
// accesses (the innermost frame of an access stack is in this module). The cluster of protoactor-go
// v0.0.0-20240822202345 (the newest the module proxy serves) races with itself under the race detector (its member
// list, block list, gossip and etcd provider touch shared fields without their locks; README, "Where we work
// around protoactor-go"); a report whose two accesses are both made inside it is left out, even when our code
// called into it. Every other report fails the test that ran the daemon.
func ourRaces(out string) []string {
	var races []string
	for _, r := range strings.Split(out, "WARNING: DATA RACE")[1:] {
		if end := strings.Index(r, "=================="); end >= 0 {
			r = r[:end]
		}
		ours := false
		for _, section := range strings.Split(r, "\n\n") {
			lines := strings.Split(strings.TrimSpace(section), "\n")
			head := lines[0]
			access := strings.HasPrefix(head, "Read at") || strings.HasPrefix(head, "Write at") ||
				strings.HasPrefix(head, "Previous read at") || strings.HasPrefix(head, "Previous write at")
			if access && len(lines) > 1 && strings.Contains(lines[1], "github.com/mcpgw/aggregator") {
				ours = true
			}
		}
		if ours {
			races = append(races, "WARNING: DATA RACE"+r)
		}
	}
	return races
}

// syncBuf collects a daemon's output; the process writes while the test may read.
type syncBuf = syncbuf.Buffer

func (d *daemon) do(method, path string, body any) (int, map[string]any) {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.base+path, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func (d *daemon) waitStatus(id, want string, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	var last map[string]any
	for time.Now().Before(deadline) {
		_, last = d.do("GET", "/servers/"+id, nil)
		if last["status"] == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("server %s not %s within %v: %v", id, want, within, last)
}

// stores names the two stores a test runs on, each with the function that gives a (sub)test its database URL: ""
// for the embedded store, a database of the test's own (dropped with it) on PostgreSQL.
func stores() map[string]func(*testing.T) string {
	return map[string]func(*testing.T) string{
		"sqlite":   func(*testing.T) string { return "" },
		"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
	}
}

// TestDaemonRestartSafety: a server registered on one daemon comes back connected on the next, SIGTERM stops the
// daemon within its shutdown timeout leaving no child process, and after SIGKILL no child survives either.
func TestDaemonRestartSafety(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			d := newDaemon(t, dbURL(t))
			d.start()
			cmd, args := peertest.EverythingStdio(t)
			marker := fmt.Sprintf("e2e-marker-%s-%d", name, time.Now().UnixNano())
			code, s := d.do("POST", "/servers", map[string]any{
				"name": "everything", "transport_type": "STDIO",
				"connection_config": map[string]any{"command": cmd, "args": append(args, marker)},
			})
			if code != 201 {
				t.Fatalf("register: %d %v", code, s)
			}
			id := s["id"].(string)
			d.waitStatus(id, "CONNECTED", 30*time.Second)
			if len(peertest.ProcessesWithArg(marker)) == 0 {
				t.Fatalf("no child process with the marker while CONNECTED")
			}

			took := d.signal(syscall.SIGTERM, 15*time.Second)
			t.Logf("SIGTERM: exited in %v", took)
			waitGone(t, marker)

			d.start()
			d.waitStatus(id, "CONNECTED", 30*time.Second)
			_, list := d.do("GET", "/servers", nil)
			if list["total"].(float64) != 1 {
				t.Fatalf("after restart: %v", list)
			}

			// A crash (SIGKILL) of the daemon takes its children with it.
			d.signal(syscall.SIGKILL, 5*time.Second)
			waitGone(t, marker)

			d.start()
			d.waitStatus(id, "CONNECTED", 30*time.Second)
			if code, _ := d.do("DELETE", "/servers/"+id, nil); code != 204 {
				t.Fatalf("delete: %d", code)
			}
			waitGone(t, marker)
			if code, body := d.do("GET", "/servers/"+id, nil); code != 404 || body["error_code"] != "SERVER_NOT_FOUND" {
				t.Fatalf("after delete: %d %v", code, body)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}

func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(peertest.ProcessesWithArg(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("orphan child processes: %v", peertest.ProcessesWithArg(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentDuplicateRegistration (EC-004): 20 simultaneous registrations of one name give exactly one 201;
// the rest are 409 SERVER_ALREADY_EXISTS, on both stores.
func TestConcurrentDuplicateRegistration(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			d := newDaemon(t, dbURL(t))
			d.start()
			var wg sync.WaitGroup
			codes := make(chan int, 20)
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, body := d.do("POST", "/servers", map[string]any{
						"name": "same-name", "transport_type": "HTTP", "auto_connect": false,
						"connection_config": map[string]any{"base_url": "http://127.0.0.1:1/mcp"},
					})
					if code == 409 && (body["error_code"] != "SERVER_ALREADY_EXISTS" || !strings.Contains(fmt.Sprint(body["detail"]), "same-name")) {
						t.Errorf("409 body: %v", body)
					}
					codes <- code
				}()
			}
			wg.Wait()
			close(codes)
			count := map[int]int{}
			for c := range codes {
				count[c]++
			}
			if count[201] != 1 || count[409] != 19 {
				t.Fatalf("status counts %v, want one 201 and nineteen 409", count)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}

// inspector runs @modelcontextprotocol/inspector's CLI (a real MCP client, on the Node 22 that npm installed).
func inspector(t *testing.T, env []string, args ...string) string {
	t.Helper()
	root := peertest.RepoRoot(t)
	node := filepath.Join(root, "testdata", "peers", "node_modules", ".bin", "node")
	cli := filepath.Join(root, "testdata", "peers", "node_modules", ".bin", "mcp-inspector")
	if _, err := os.Stat(cli); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("inspector not installed: %v", err)
		}
		t.Skip("inspector not installed: run make peers")
	}
	cmd := exec.Command(node, append([]string{cli, "--cli"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "catalog.json"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inspector %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestRealClientThroughMCPEndpoint: the MCP Inspector CLI lists and calls tools through the daemon's /mcp, and
// through `aggregator stdio` the way a desktop client launches it.
func TestRealClientThroughMCPEndpoint(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.start()
	cmd, args := peertest.EverythingStdio(t)
	code, s := d.do("POST", "/servers", map[string]any{"name": "every", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args}})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	d.waitStatus(s["id"].(string), "CONNECTED", 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, tools := d.do("GET", "/servers/"+s["id"].(string)+"/tools", nil)
		if n, _ := tools["total"].(float64); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools never discovered")
		}
		time.Sleep(50 * time.Millisecond)
	}

	out := inspector(t, nil, d.mcp+"/mcp", "--transport", "http", "--method", "tools/list")
	for _, want := range []string{"every__echo", "every__get-sum", "search_aggregated_tools"} {
		if !strings.Contains(out, want) {
			t.Fatalf("tools/list through /mcp lacks %s:\n%s", want, out)
		}
	}
	out = inspector(t, nil, d.mcp+"/mcp", "--transport", "http", "--method", "tools/call", "--tool-name", "every__get-sum", "--tool-arg", "a=2", "b=3")
	if !strings.Contains(out, "5") {
		t.Fatalf("tools/call through /mcp:\n%s", out)
	}
	// Prompts and resources of the backend, listed and used through /mcp (issue 14).
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, prompts := d.do("GET", "/servers/"+s["id"].(string)+"/prompts", nil)
		if n, _ := prompts["total"].(float64); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prompts never discovered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out = inspector(t, nil, d.mcp+"/mcp", "--transport", "http", "--method", "prompts/list")
	if !strings.Contains(out, "every__simple-prompt") {
		t.Fatalf("prompts/list through /mcp lacks every__simple-prompt:\n%s", out)
	}
	out = inspector(t, nil, d.mcp+"/mcp", "--transport", "http", "--method", "resources/read", "--uri", "demo://resource/static/document/architecture.md")
	if !strings.Contains(out, "demo://resource/static/document/architecture.md") || !strings.Contains(out, "text") {
		t.Fatalf("resources/read through /mcp:\n%s", out)
	}
	d.signal(syscall.SIGTERM, 15*time.Second)

	// The same store, served over stdio by a fresh process the client starts itself.
	var env []string
	for _, e := range d.env {
		// The inspector refuses an empty value (KEY=): pass only set variables.
		if (strings.HasPrefix(e, "MCP_AGGREGATOR_") || strings.HasPrefix(e, "DATABASE_URL=")) && !strings.HasSuffix(e, "=") {
			env = append(env, e)
		}
	}
	envArgs := []string{}
	for _, e := range env {
		envArgs = append(envArgs, "-e", e)
	}
	// The first tools/call of a freshly started stdio daemon already sees the backend: stdio waits for its
	// servers to reconnect and be discovered before serving.
	out = inspector(t, nil, append(envArgs, binary, "stdio", "--method", "tools/call", "--tool-name", "every__echo", "--tool-arg", "message=over-stdio")...)
	if !strings.Contains(out, "over-stdio") || strings.Contains(out, `"isError": true`) {
		t.Fatalf("tools/call over aggregator stdio:\n%s", out)
	}
	out = inspector(t, nil, append(envArgs, binary, "stdio", "--method", "prompts/get", "--prompt-name", "every__simple-prompt")...)
	if !strings.Contains(out, "messages") {
		t.Fatalf("prompts/get over aggregator stdio:\n%s", out)
	}
}

// TestMetricsEndpoint: after real traffic, /metrics shows the contract's metrics, the actor runtime's instruments
// (asked for: MCP_AGGREGATOR_ACTOR_METRICS) and the Go runtime's, and no label carries a tool name, an id or a raw
// path.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_HEALTH_INTERVAL=0.3", "MCP_AGGREGATOR_ACTOR_METRICS=true")
	d.start()
	cmd, args := peertest.EverythingStdio(t)
	code, s := d.do("POST", "/servers", map[string]any{"name": "every", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args}})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	id := s["id"].(string)
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest("POST", strings.TrimSuffix(d.base, "/aggregator")+"/tools/call", strings.NewReader(`{"name":"every.echo","arguments":{"message":"m"}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo never succeeded")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a few health checks
	resp, err := http.Get(strings.TrimSuffix(d.base, "/api/v1/aggregator") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(raw)
	for _, want := range []string{
		`mcp_aggregator_servers_total{status="connected"} 1`,
		`mcp_aggregator_tools_total `, `mcp_aggregator_tools_classified `,
		`mcp_aggregator_routing_duration_seconds_bucket`,
		`mcp_aggregator_execution_duration_seconds_bucket{server="every"`,
		`mcp_aggregator_health_check_duration_seconds{server="every"}`,
		`mcp_aggregator_health_check_failures_total{server="every"} 0`,
		`mcp_aggregator_tool_calls_total{outcome="ok",server="every"}`,
		`mcp_aggregator_http_requests_total{listener="rest",method="POST",route="/api/v1/tools/call",status="200"}`,
		`mcp_aggregator_state_transitions_total{to="CONNECTED"}`,
		`mcp_aggregator_server_mailbox_depth{server="every"} `,
		`protoactor_`, `go_goroutines`, `process_resident_memory_bytes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Bounded labels: no label value is a tool name, a server id or a raw path with an id.
	labelValue := regexp.MustCompile(`="([^"]*)"`)
	for _, m := range labelValue.FindAllStringSubmatch(text, -1) {
		v := m[1]
		if strings.Contains(v, "echo") || strings.Contains(v, id) || strings.Contains(v, "/servers/0") {
			t.Errorf("unbounded label value %q", v)
		}
	}
}
