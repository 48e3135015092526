package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mcpgw/aggregator/internal/freeport"
	"github.com/mcpgw/aggregator/internal/syncbuf"
)

// Buffer collects a process's output; the process writes while the caller may read.
type Buffer = syncbuf.Buffer

// Process is a child process; it is killed if this process dies (Linux: parent-death signal).
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd (its output goes where cmd says) and watches it.
func Start(cmd *exec.Cmd) (*Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stop sends SIGTERM, waits up to grace, then kills the process; it returns once the process has ended.
func (p *Process) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// FreePort returns a loopback TCP port that nothing listens on now, outside the kernel's ephemeral range
// (freeport.Pick: an outgoing connection cannot take it before the process binds it).
func FreePort() (int, error) {
	return freeport.Pick()
}

// WaitHTTP waits until a GET of url gets any HTTP answer, or the process ends, or timeout passes.
func WaitHTTP(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, err := http.NewRequestWithContext(rctx, "GET", url, nil)
		if err != nil {
			cancel()
			return fmt.Errorf("request %s: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", url, ctx.Err())
		case <-p.Exited():
			return fmt.Errorf("wait for %s: the process exited", url)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer within %v", url, timeout)
}

// StartEcho runs cmd/mcp-echo-backend (bin) on a free loopback port with extraTools tools besides echo and
// returns it with the URL of its MCP endpoint; its stderr goes to logs.
func StartEcho(bin string, extraTools int, logs io.Writer) (*Process, string, error) {
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-tools", fmt.Sprint(extraTools))
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", fmt.Errorf("echo backend stdout: %w", err)
	}
	p, err := Start(cmd)
	if err != nil {
		return nil, "", err
	}
	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		first <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case url := <-first:
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			p.Stop(time.Second)
			return nil, "", fmt.Errorf("echo backend printed %q, not its URL", url)
		}
		return p, url, nil
	case <-time.After(15 * time.Second):
		p.Stop(time.Second)
		return nil, "", errors.New("echo backend printed no URL within 15s")
	}
}

// Daemon is the aggregator binary serving REST and /mcp on two loopback ports.
type Daemon struct {
	*Process
	API  string // REST API base: http://127.0.0.1:port/api/v1/aggregator
	Call string // POST /api/v1/tools/call
	MCP  string // the MCP endpoint: http://127.0.0.1:port/mcp
}

// StartDaemon runs `aggregator serve` (bin) with the embedded store in dataDir, no tokens (auth off), the
// per-client rate limit disabled and logs at logLevel (JSON) to logs, and waits until its REST API answers.
func StartDaemon(ctx context.Context, bin, dataDir, logLevel string, logs io.Writer) (*Daemon, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	mcpPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	rest := fmt.Sprintf("http://127.0.0.1:%d", port)
	d := &Daemon{API: rest + "/api/v1/aggregator", Call: rest + "/api/v1/tools/call",
		MCP: fmt.Sprintf("http://127.0.0.1:%d/mcp", mcpPort)}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(),
		fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", port),
		fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", mcpPort),
		"MCP_AGGREGATOR_DATA_DIR="+dataDir,
		"MCP_AGGREGATOR_LOG_LEVEL="+logLevel,
		"MCP_AGGREGATOR_LOG_FORMAT=json",
		"MCP_AGGREGATOR_RATE_LIMIT=0", // the per-client limit would answer most benchmark calls 429
		"DATABASE_URL=",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	if d.Process, err = Start(cmd); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if err := WaitHTTP(ctx, d.Process, d.API+"/health", 20*time.Second); err != nil {
		d.Stop(10 * time.Second)
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return d, nil
}
