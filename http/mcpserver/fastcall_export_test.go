package mcpserver

// FastCalls counts the tools/call requests the endpoint served on its fast path (fastcall.go).
func FastCalls(s *Server) uint64 { return s.fast.served.Load() }
