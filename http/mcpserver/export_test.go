package mcpserver

import (
	"context"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SessionCount is how many sessions the go-sdk server holds for clients (the fast path's learnt sessions are
// none), for the black-box tests of the session caps.
func SessionCount(s *Server) int {
	n := 0
	for ss := range s.mcp.Sessions() {
		if !s.fast.isLearnt(ss) {
			n++
		}
	}
	return n
}

// HeldCalls is how many calls wait for a 2026-07-28 client's retry.
func (s *Server) HeldCalls() int { return s.held.held() }

// Serve runs the endpoint's go-sdk server over t (stdio's way), for tests of io transports.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// ServeStdio serves one stdio client on in and out as RunStdio does with tasks on (the task filter in front).
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	return s.runStdioTasks(ctx, in, out)
}
