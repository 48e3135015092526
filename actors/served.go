package actors

import "context"

// ServedVersion is the version of a server's served tools in the routing table, and the version the search index
// has acknowledged: its tools are searchable as served once indexed reaches served (both 0: it serves no tools,
// or has not been loaded yet).
func (s *System) ServedVersion(id string) (served, indexed uint64) { return s.served.Of(id) }

// AwaitSearchable waits until the search index has acknowledged the served tools of the given servers (nil: of
// every server) as the routing table has them now, or ctx ends.
func (s *System) AwaitSearchable(ctx context.Context, ids []string) error {
	return s.served.AwaitIndexed(ctx, ids)
}
