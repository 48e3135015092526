package backend

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
)

// stdioTransport runs a stdio MCP server as a child process it watches itself, unlike the go-sdk's
// CommandTransport: the moment the direct child exits, its whole process group is killed. A wrapper (sh, npx) that
// dies would otherwise leave grandchildren holding the pipes open, and the session would never see the end. The
// exit status is kept for the server's error_message.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration
	guard     *msglimit.Guard // bounds every line read from stdout

	exited  chan struct{} // closed when the process has exited and been reaped
	mu      sync.Mutex
	exitErr error
	started bool

	// group records the process group while it runs, for the reaper of a later daemon (nil: not recorded).
	group *groupChild

	line *lineConn // the connection, once started (guarded by mu): the stdio hop sends on it
}

func newStdioTransport(cmd *exec.Cmd, terminate time.Duration, guard *msglimit.Guard) *stdioTransport {
	return &stdioTransport{cmd: cmd, terminate: terminate, guard: guard, exited: make(chan struct{})}
}

// Connect starts the process and speaks newline-delimited JSON-RPC over its stdin and stdout.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	// Recorded before the start too, so that a daemon that dies right after the fork leaves a trace (the marker).
	t.group.record(0)
	if err := t.cmd.Start(); err != nil {
		t.group.remove()
		return nil, fmt.Errorf("start %s: %w", t.cmd.Path, err)
	}
	t.mu.Lock()
	t.started = true
	t.mu.Unlock()
	pid := t.cmd.Process.Pid
	t.group.record(pid)
	go func() {
		// Learn of the exit without reaping (WNOWAIT), so the process group still exists to be killed; then reap.
		// Every way a session ends (close, kill, the child's own exit) comes through here: the group is killed
		// once its leader has gone, and only then is its record removed.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		t.group.remove()
		err := t.cmd.Wait()
		t.mu.Lock()
		t.exitErr = err
		t.mu.Unlock()
		close(t.exited)
	}()
	// The guard bounds every line at the message limit (an oversized answer becomes an error response for its id);
	// lineConn decodes each line from the guard's buffer and hands the buffer back at once.
	// Notifications beyond floodguard.ReadRate wait: a flooding child blocks on its own writes.
	conn := newLineConn(t.guard.LineMessages(stdout), stdout, stdin, floodguard.NewPacer(floodguard.ReadRate))
	t.mu.Lock()
	t.line = conn
	t.mu.Unlock()
	return &stdioConn{Connection: conn, t: t}, nil
}

// exitStatus reports whether the process has exited, and how.
func (t *stdioTransport) exitStatus() (bool, error) {
	select {
	case <-t.exited:
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.exitErr == nil {
			return true, errors.New("exit status 0")
		}
		return true, t.exitErr
	default:
		return false, nil
	}
}

// kill ends the whole process group now and waits (briefly) for the reaping.
func (t *stdioTransport) kill() {
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started {
		return
	}
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-t.exited:
	case <-time.After(2 * time.Second):
	}
}

// stdioConn closes the way the MCP spec asks of a client: close the child's stdin, wait for it to exit, then
// SIGTERM, then SIGKILL, to the whole process group.
type stdioConn struct {
	mcp.Connection
	t    *stdioTransport
	once sync.Once
}

// Close implements mcp.Connection.
func (c *stdioConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.Connection.Close() // closes stdin (and our end of stdout)
		pid := c.t.cmd.Process.Pid
		for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
			if sig != 0 {
				_ = syscall.Kill(-pid, sig)
			}
			select {
			case <-c.t.exited:
				return
			case <-time.After(c.t.terminate):
			}
		}
	})
	return err
}
