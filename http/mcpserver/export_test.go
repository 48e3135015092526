package mcpserver

// SessionCount is how many sessions the go-sdk server holds, for the black-box tests of the session caps.
func SessionCount(s *Server) int {
	n := 0
	for range s.mcp.Sessions() {
		n++
	}
	return n
}

// HeldCalls is how many calls wait for a 2026-07-28 client's retry.
func (s *Server) HeldCalls() int { return s.held.held() }
