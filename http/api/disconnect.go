package api

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/sys/unix"
)

// Timing of the client-disconnect watcher of REST tool calls.
const (
	// disconnectWatchDelay: calls that finish sooner never start a watcher (most calls take milliseconds).
	disconnectWatchDelay = 200 * time.Millisecond
	// disconnectPollInterval is how often a running call's connection is checked for a hang-up.
	disconnectPollInterval = 100 * time.Millisecond
)

// watchDisconnect runs before the tool call handler. Fasthttp never tells a handler that its client went away, and
// Fiber's user context never ends, so a client that gave up would leave its backend call running (and counted in
// flight) until the request timeout. For a call still running after disconnectWatchDelay, a goroutine polls the
// connection's socket for a peer hang-up (POLLRDHUP/POLLHUP/POLLERR, no data consumed) and cancels the request's
// context when it sees one, which cancels the backend call. A client that only half-closes its sending side counts
// as gone too (HTTP clients do not do that while waiting for an answer).
func (s *server) watchDisconnect(c *fiber.Ctx) error {
	sc, ok := c.Context().Conn().(syscall.Conn)
	if !ok {
		return c.Next() // not a socket (tests' in-memory connections, TLS wrappers): nothing to watch
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c.Next()
	}
	ctx, cancel := context.WithCancel(c.UserContext())
	defer cancel()
	c.SetUserContext(ctx)
	done := make(chan struct{})
	rid := requestIDOf(c)
	// A timer, not a goroutine, per call (issue 26): the watcher's goroutine starts only for a call still running
	// after disconnectWatchDelay.
	watch := time.AfterFunc(disconnectWatchDelay, func() {
		if watchPeer(done, raw, 0, disconnectPollInterval) {
			s.log.LogAttrs(ctx, slog.LevelInfo, "client disconnected during a tool call; cancelling it",
				slog.String("request_id", rid))
			cancel()
		}
	})
	defer func() { // runs before cancel: the watcher stops without cancelling a finished call
		watch.Stop()
		close(done)
	}()
	return c.Next()
}

// watchPeer waits delay, then polls raw every interval until done closes (false) or the peer has hung up (true).
func watchPeer(done <-chan struct{}, raw syscall.RawConn, delay, interval time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-done:
			return false
		case <-t.C:
		}
		if peerGone(raw) {
			return true
		}
		t.Reset(interval)
	}
}

// peerGone polls the socket once without blocking and without reading.
func peerGone(raw syscall.RawConn) bool {
	gone := false
	err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		if err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			gone = true
		}
	})
	return err == nil && gone
}

// compile-time check that the connections fasthttp hands over expose their socket.
var _ syscall.Conn = (*net.TCPConn)(nil)
