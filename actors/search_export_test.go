package actors

import "context"

// IndexedTools is how many tools the search engine holds: a test waits for it to reach the catalogue's size.
func (s *System) IndexedTools() int { return s.searcher.Len() }

// IndexedVectors is how many tools have a vector in the index: the engine commits a batch's lexical side first,
// then embeds it, so a tool counted by IndexedTools may not be ranked by its vector yet.
func (s *System) IndexedVectors() int {
	n, err := s.searcher.Index().Count(context.Background())
	if err != nil {
		return -1
	}
	return n
}

// CrashServerForTest makes a server actor panic inside its mailbox, the way a bug would.
func (s *System) CrashServerForTest(id string) { s.sys.Root.Send(s.serverPID(id), &panicForTest{}) }
