package actors

// IndexedTools is how many tools the search engine holds: a test waits for it to reach the catalogue's size.
func (s *System) IndexedTools() int { return s.searcher.Len() }

// CrashServerForTest makes a server actor panic inside its mailbox, the way a bug would.
func (s *System) CrashServerForTest(id string) { s.sys.Root.Send(s.serverPID(id), &panicForTest{}) }
