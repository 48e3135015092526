package actors

import (
	"context"

	"github.com/mcpgw/aggregator/actors/placement"
)

// The cross-process feed (placement.Feed): this process's events go to the other processes through the store,
// and theirs come to this process's router as if its own actors had published them (deliver, not local). When the
// feed reconnects after a break, the router reloads from the store and hands the indexer and the classifier the
// deltas of what changed (the one writer of the served catalogue), and the task manager re-reads the tasks its
// callers follow (OnTaskFeedGap).

// startFeed connects the system to the store's feed, when the store has one; it runs until ctx ends.
func (s *System) startFeed(ctx context.Context) {
	feed, ok := placement.StartFeed(ctx, s.deps.Store, s.deps.NodeID, s.deps.Logger, func(evt any) { s.deliver(evt, false) }, func() {
		s.sys.Root.Send(s.router, &resync{})
		s.sys.Root.Send(s.policyActor, &resync{})
		s.taskGaps.Call(struct{}{}) // the task manager catches up on the status changes it missed (tasks.go)
	})
	if ok {
		s.feed = feed
	}
}

// resync makes the router (or the policy actor) reload everything from the store (the feed missed notices).
type resync struct{}
