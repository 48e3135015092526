package mcpserver

// FastCalls counts the tools/call requests the endpoint served on its fast path (fastcall.go).
func FastCalls(s *Server) uint64 { return s.fast.served.Load() }

// FastModernCalls counts the 2026-07-28 tools/call requests served on the fast path (fastcall_modern.go).
func FastModernCalls(s *Server) uint64 { return s.fast.servedModern.Load() }

// SetFastCalls turns the fast path on (the default) or off, to compare its answers with the go-sdk path's.
func SetFastCalls(s *Server, on bool) { s.fast.off.Store(!on) }

// LearntSessions is how many 2026-07-28 _meta variants the fast path has learnt a session for.
func LearntSessions(s *Server) int {
	s.fast.mu.Lock()
	defer s.fast.mu.Unlock()
	return len(s.fast.learnt)
}
