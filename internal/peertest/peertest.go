// Package peertest starts the real MCP servers the tests talk to (npm's @modelcontextprotocol/server-everything over
// stdio, SSE and streamable HTTP), installed by `make peers` from testdata/peers/package-lock.json. When they are
// missing a test skips, except under CI=true where it fails: CI must never pass by skipping its real peers.
package peertest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/freeport"
)

// RepoRoot finds the directory holding go.mod, walking up from the working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// missing skips (or fails under CI=true) for a peer that is not installed.
func missing(t testing.TB, what string) {
	t.Helper()
	msg := what + " is not installed: run `make peers`"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// missingTool skips (or fails under CI=true) for a system tool that is not installed.
func missingTool(t testing.TB, what string) {
	t.Helper()
	msg := what + " is not installed: `make test` installs it"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Node returns the node binary that runs the peers.
func Node(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node")
	}
	return p
}

// EverythingScript is the path of server-everything's entry point.
func EverythingScript(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "testdata", "peers", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(p); err != nil {
		missing(t, "@modelcontextprotocol/server-everything")
	}
	return p
}

// EverythingStdio returns the command and arguments that run server-everything over stdio.
func EverythingStdio(t testing.TB) (string, []string) {
	t.Helper()
	return Node(t), []string{EverythingScript(t), "stdio"}
}

// FreePort returns a loopback TCP port that nothing listens on now, outside the kernel's ephemeral range
// (freeport.Pick: an outgoing connection of the busy test machine cannot take it before the process binds it).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return p
}

// Process is a peer server running in the background; it is killed when the test ends.
type Process struct {
	t      testing.TB
	script string // the entry point (server-everything's when empty)
	mode   string
	port   int
	mu     sync.Mutex
	cmd    *exec.Cmd
	alive  bool
}

// StartEverything runs server-everything in mode "sse" or "streamableHttp" on a free loopback port and waits until
// it listens.
func StartEverything(t testing.TB, mode string) *Process {
	t.Helper()
	p := &Process{t: t, mode: mode, port: FreePort(t)}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// StartTaskBackend runs testdata/peers/task-backend.mjs, a streamable HTTP server on the TypeScript SDK whose
// tasks (tools countdown, quick, plain) any session may follow, on a free loopback port, and waits until it
// listens. Its URL is /mcp.
func StartTaskBackend(t testing.TB) *Process {
	t.Helper()
	EverythingScript(t) // the SDK it runs on comes with server-everything
	p := &Process{t: t, script: filepath.Join(RepoRoot(t), "testdata", "peers", "task-backend.mjs"), mode: "streamableHttp",
		port: FreePort(t)}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// URL is the endpoint a client connects to: /sse for SSE, /mcp for streamable HTTP.
func (p *Process) URL() string {
	if p.mode == "sse" {
		return fmt.Sprintf("http://127.0.0.1:%d/sse", p.port)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", p.port)
}

// Port is the TCP port the peer listens on.
func (p *Process) Port() int { return p.port }

// Start (re)starts the peer on its port and waits until it accepts connections.
func (p *Process) Start() {
	t := p.t
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	script := p.script
	if script == "" {
		script = EverythingScript(t)
	}
	cmd := exec.Command(Node(t), script, p.mode)
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", p.port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("pipe: %v", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", filepath.Base(script), p.mode, err)
	}
	go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(out)) }()
	p.cmd, p.alive = cmd, true
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s did not listen on %d: %v", filepath.Base(script), p.mode, p.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill ends the peer at once (SIGKILL to its process group), as a crash would.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.alive {
		return
	}
	p.alive = false
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// processes calls fn with each live (not zombie) process's pid, parent pid and /proc directory.
func processes(fn func(pid, ppid int, dir string)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...; comm may contain spaces, so split after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var parent int
		if _, err := fmt.Sscanf(s[i+1:], " %s %d", &state, &parent); err != nil || state == "Z" {
			continue
		}
		fn(pid, parent, dir)
	}
}

// ChildrenOf lists the pids whose parent is ppid (from /proc), to count processes a daemon started.
func ChildrenOf(ppid int) []int {
	var out []int
	processes(func(pid, parent int, _ string) {
		if parent == ppid {
			out = append(out, pid)
		}
	})
	return out
}

// ProcessesWithArg lists live pids whose command line contains arg, to find orphans by a marker argument.
func ProcessesWithArg(arg string) []int {
	var out []int
	processes(func(pid, _ int, dir string) {
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), arg) {
			out = append(out, pid)
		}
	})
	return out
}
