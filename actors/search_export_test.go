package actors

// IndexedTools is how many tools the search engine holds: a test waits for it to reach the catalogue's size.
func (s *System) IndexedTools() int { return s.searcher.Len() }
