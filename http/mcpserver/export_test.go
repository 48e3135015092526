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

// ToolDescriptions is the description of every tool the endpoint's go-sdk server holds (the exposed backend tools
// by alias and the meta-tools as registered: search_aggregated_tools' as followCatalogue last rendered it for the
// whole catalogue), for tests that wait until the endpoint has followed a change of the catalogue.
func ToolDescriptions(s *Server) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.exposed)+len(s.metaTools))
	for alias, e := range s.exposed {
		if e.tool != nil {
			out[alias] = e.tool.Description
		}
	}
	for name, m := range s.metaTools {
		out[name] = m.tool.Description
	}
	return out
}

// PromptNames is the alias of every prompt the endpoint exposes (syncFeatures), for tests of when it follows the
// routing table.
func PromptNames(s *Server) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.feat == nil {
		return nil
	}
	out := make([]string, 0, len(s.feat.prompts))
	for alias := range s.feat.prompts {
		out = append(out, alias)
	}
	return out
}

// ViewsMade is how many scoped endpoints v holds.
func ViewsMade(v *Views) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.scoped)
}
