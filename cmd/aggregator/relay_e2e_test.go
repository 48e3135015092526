package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// stdioProc is `aggregator stdio` run the way a desktop client runs it: a child process spoken to over its stdin
// and stdout; its stderr (the logs) is kept.
type stdioProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	logs   *syncBuf
	done   chan struct{}
}

func startStdio(t *testing.T, env []string) *stdioProc {
	t.Helper()
	p := &stdioProc{t: t, cmd: exec.Command(binary, "stdio"), logs: &syncBuf{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stderr = p.logs
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if p.stdout, err = p.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start aggregator stdio: %v", err)
	}
	go func() {
		// StdoutPipe: Wait closes the pipe, so it runs once the client stopped reading (the process exited).
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// connect opens an MCP session with the go-sdk client (its default options: it probes server/discover first).
func (p *stdioProc) connect(ctx context.Context) *mcp.ClientSession {
	p.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "relay-e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: p.stdout, Writer: p.stdin}, nil)
	if err != nil {
		p.t.Fatalf("connect to aggregator stdio: %v\nlogs:\n%s", err, p.logs)
	}
	return cs
}

// exit waits for the process to end within limit and returns its exit code.
func (p *stdioProc) exit(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		p.t.Fatalf("aggregator stdio still runs after %v; logs:\n%s", limit, p.logs)
	}
	return 0
}

// children lists the processes aggregator stdio started (a relay starts none).
func (p *stdioProc) children() []int { return peertest.ChildrenOf(p.cmd.Process.Pid) }

// waitForCond polls cond until it holds, or fails after limit.
func waitForCond(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// withEnv returns env without the variables named in drop, plus add.
func withEnv(env []string, drop []string, add ...string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, name)
	})
	return append(out, add...)
}

// registerEverything registers server-everything over stdio with a marker argument that counts its processes, and
// waits until it is CONNECTED with its tools discovered.
func registerEverything(t *testing.T, d *daemon, token, marker string) string {
	t.Helper()
	cmd, args := peertest.EverythingStdio(t)
	code, s, raw := d.authDo(token, "POST", "/servers", map[string]any{"name": "every", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": append(args, marker)}})
	if code != 201 {
		t.Fatalf("register: %d %s", code, raw)
	}
	id := s["id"].(string)
	d.waitStatusToken(token, id, "CONNECTED", 60*time.Second)
	waitForCond(t, 30*time.Second, "tools discovered", func() bool {
		_, tools, _ := d.authDo(token, "GET", "/servers/"+id+"/tools", nil)
		n, _ := tools["total"].(float64)
		return n > 0
	})
	return id
}

// TestStdioRelaysThroughServe: `aggregator stdio` started beside a running `serve` on the same store (SQLite, and
// PostgreSQL with auth on, admin token or client token from a tokens file) starts no backend: it relays the client's
// session to serve's MCP endpoint. tools/list shows the backend's tools, a tools/call works, and exactly one backend
// process exists at every sample; when serve stops, stdio exits non-zero saying the session is lost.
func TestStdioRelaysThroughServe(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	tokensFile := t.TempDir() + "/tokens"
	if err := os.WriteFile(tokensFile, []byte("# relay e2e\nclient desk "+e2eClientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		db      func() string
		env     []string // of both processes
		token   string   // for the REST calls of the test
		wantLog string   // where the relay's token comes from, as logged
	}{
		{name: "sqlite", db: func() string { return "" }, wantLog: `"token":"none"`},
		{name: "postgres-admin-token", db: func() string { return pgtest.NewDatabase(t) },
			env:   []string{"MCP_AGGREGATOR_ADMIN_TOKENS=ops:" + e2eAdminToken, "MCP_AGGREGATOR_CLIENT_TOKENS=ci:" + e2eClientToken},
			token: e2eAdminToken, wantLog: `"token":"MCP_AGGREGATOR_ADMIN_TOKENS entry 1"`},
		{name: "sqlite-client-token-file", db: func() string { return "" },
			env:     []string{"MCP_AGGREGATOR_ADMIN_TOKENS=ops:" + e2eAdminToken, "MCP_AGGREGATOR_TOKENS_FILE=" + tokensFile},
			token:   e2eAdminToken,
			wantLog: `"token":"MCP_AGGREGATOR_TOKENS_FILE ` + tokensFile + ` line 2"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDaemon(t, tc.db())
			d.env = append(d.env, tc.env...)
			d.start()
			marker := fmt.Sprintf("relay-e2e-%s-%d", tc.name, time.Now().UnixNano())
			registerEverything(t, d, tc.token, marker)

			stdioEnv := d.env
			if tc.name == "sqlite-client-token-file" {
				// The stdio process has only the file's client token: it relays with that one.
				stdioEnv = withEnv(d.env, []string{"MCP_AGGREGATOR_ADMIN_TOKENS"})
			}
			p := startStdio(t, stdioEnv)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cs := p.connect(ctx)
			defer cs.Close()

			// serve's own session of server-everything, and, once the backend has asked its client for roots (it
			// does 350 ms after initialize) and a client that declares roots called, that client's own session
			// (README, "Requests from a backend to its client"): both are serve's children, never the relay's.
			sample := func(when string, max int) {
				t.Helper()
				if got := peertest.ProcessesWithArg(marker); len(got) < 1 || len(got) > max {
					t.Fatalf("%s: %d backend processes %v, want 1 to %d (serve's)", when, len(got), got, max)
				}
				if kids := p.children(); len(kids) != 0 {
					t.Fatalf("%s: aggregator stdio started processes %v; a relay starts none", when, kids)
				}
			}
			sample("after connect", 1)
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var names []string
			for _, tool := range tools.Tools {
				names = append(names, tool.Name)
			}
			for _, want := range []string{"every__echo", "every__get-sum", "search_aggregated_tools"} {
				if !slices.Contains(names, want) {
					t.Fatalf("tools/list through the relay lacks %s: %v", want, names)
				}
			}
			sample("after tools/list", 1)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__echo", Arguments: map[string]any{"message": "via-relay"}})
			if err != nil {
				t.Fatalf("tools/call: %v", err)
			}
			if text, _ := res.Content[0].(*mcp.TextContent); res.IsError || text == nil || !strings.Contains(text.Text, "via-relay") {
				t.Fatalf("tools/call through the relay: %+v", res)
			}
			sample("after tools/call", 2)
			logs := p.logs.String()
			if !strings.Contains(logs, "mode: relay") || !strings.Contains(logs, tc.wantLog) {
				t.Fatalf("stdio log does not say it relays with %s:\n%s", tc.wantLog, logs)
			}
			for _, secret := range []string{e2eAdminToken, e2eClientToken} {
				if strings.Contains(logs, secret) {
					t.Fatalf("stdio log shows a token:\n%s", logs)
				}
			}

			// serve stops: the relayed session is lost, and stdio says so and exits non-zero.
			d.signal(syscall.SIGTERM, 30*time.Second)
			if code := p.exit(30 * time.Second); code == 0 {
				t.Fatalf("aggregator stdio exited 0 after serve stopped; logs:\n%s", p.logs)
			}
			if logs := p.logs.String(); !strings.Contains(logs, "lost the session with the aggregator process") {
				t.Fatalf("stdio log does not say the session is lost:\n%s", logs)
			}
			waitGone(t, marker)
			_ = cs.Wait() // the client sees its session end (it does not hang)
		})
	}
}

// TestStdioRelayTokenRefused: beside a serve with auth on, a stdio process without a token, or with one serve does
// not accept, exits at once with an error that names the variables to set, never showing the token, and starts
// nothing.
func TestStdioRelayTokenRefused(t *testing.T) {
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+e2eAdminToken)
	d.start()
	const wrong = "not-the-token-of-serve-1234"
	for _, tc := range []struct {
		name string
		add  []string
		want string
	}{
		{"no token", nil, "this command has no token"},
		{"wrong token", []string{"MCP_AGGREGATOR_CLIENT_TOKENS=" + wrong}, "refused the token of MCP_AGGREGATOR_CLIENT_TOKENS entry 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startStdio(t, withEnv(d.env, []string{"MCP_AGGREGATOR_ADMIN_TOKENS"}, tc.add...))
			if code := p.exit(60 * time.Second); code == 0 {
				t.Fatalf("exit code 0; logs:\n%s", p.logs)
			}
			logs := p.logs.String()
			for _, want := range []string{tc.want, "401", "MCP_AGGREGATOR_ADMIN_TOKENS", "MCP_AGGREGATOR_CLIENT_TOKENS"} {
				if !strings.Contains(logs, want) {
					t.Errorf("stdio log lacks %q:\n%s", want, logs)
				}
			}
			if strings.Contains(logs, wrong) || strings.Contains(logs, e2eAdminToken) {
				t.Errorf("stdio log shows a token:\n%s", logs)
			}
			if strings.Contains(logs, "mode: standalone") {
				t.Errorf("stdio fell back to serving by itself beside a live serve:\n%s", logs)
			}
		})
	}
}

// TestStdioRelayEndsWhenServeHangs: a serve that stops answering and heartbeating (SIGSTOP) keeps its stream open;
// the relay notices the missing heartbeat and exits non-zero.
func TestStdioRelayEndsWhenServeHangs(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_LEASE_TTL=2")
	d.start()
	marker := fmt.Sprintf("relay-e2e-hang-%d", time.Now().UnixNano())
	registerEverything(t, d, "", marker)
	p := startStdio(t, d.env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(ctx)
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__echo", Arguments: map[string]any{"message": "m"}}); err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		d.signal(syscall.SIGTERM, 30*time.Second)
	}()
	if code := p.exit(60 * time.Second); code == 0 {
		t.Fatalf("exit code 0; logs:\n%s", p.logs)
	}
	if logs := p.logs.String(); !strings.Contains(logs, "recorded no heartbeat") {
		t.Fatalf("stdio log does not say the node stopped heartbeating:\n%s", logs)
	}
}

// TestStdioFallsBackWhenServeDied: serve was killed (its heartbeat is still fresh, nothing listens at its address):
// stdio does not relay to it but serves by itself, starting the backend once.
func TestStdioFallsBackWhenServeDied(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.start()
	marker := fmt.Sprintf("relay-e2e-dead-%d", time.Now().UnixNano())
	registerEverything(t, d, "", marker)
	d.signal(syscall.SIGKILL, 10*time.Second)
	waitGone(t, marker)

	p := startStdio(t, d.env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(ctx)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__echo", Arguments: map[string]any{"message": "by-itself"}})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if text, _ := res.Content[0].(*mcp.TextContent); res.IsError || text == nil || !strings.Contains(text.Text, "by-itself") {
		t.Fatalf("tools/call of a standalone stdio: %+v", res)
	}
	if got := peertest.ProcessesWithArg(marker); len(got) != 1 {
		t.Fatalf("%d backend processes %v, want 1 (stdio's own)", len(got), got)
	}
	logs := p.logs.String()
	for _, want := range []string{"does not answer: not relaying to it", "mode: standalone"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("stdio log lacks %q:\n%s", want, logs)
		}
	}
	cs.Close()
	if code := p.exit(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after the client left; logs:\n%s", code, p.logs)
	}
	waitGone(t, marker)
}

// TestStdioRelayAsItsOwnBackend: `aggregator stdio` registered as a stdio backend of the serve it would relay to
// is that serve itself: the instance id in the relayed initialize result puts the server in ERROR (LOOP_DETECTED),
// as for any other path back to the daemon.
func TestStdioRelayAsItsOwnBackend(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.start()
	var dataDir string
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, "MCP_AGGREGATOR_DATA_DIR="); ok {
			dataDir = v
		}
	}
	code, s, raw := d.authDo("", "POST", "/servers", map[string]any{"name": "self", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": binary, "args": []string{"stdio"},
			"env": map[string]string{"MCP_AGGREGATOR_DATA_DIR": dataDir}}})
	if code != 201 {
		t.Fatalf("register: %d %s", code, raw)
	}
	id := s["id"].(string)
	d.waitStatus(id, "ERROR", 60*time.Second)
	_, got := d.do("GET", "/servers/"+id, nil)
	if msg, _ := got["error_message"].(string); !strings.Contains(msg, "LOOP_DETECTED") {
		t.Fatalf("error_message %q does not say LOOP_DETECTED; logs:\n%s", msg, d.logs)
	}
	d.signal(syscall.SIGTERM, 30*time.Second)
}
