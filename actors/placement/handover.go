package placement

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The hand-over on a cluster node's graceful stop (SIGTERM; System.HandOver in package actors carries it out): the
// node marks itself leaving (Members.MarkLeaving, so that Choose passes it over and it hosts nothing new), retires
// each server actor it hosts after the server's calls in flight drained (HandOverDrain), and asks the successor
// (Successor) to activate it, once its session is closed and its lease released: one session at a time.

// HandOverDrain is how long a leaving node lets each server's calls in flight finish: at most max (the drain
// timeout), and at most half of what is left of ctx's deadline, so that the successors have the other half.
func HandOverDrain(ctx context.Context, max time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(max, time.Until(dl)/2)
	}
	return max
}

// Successor is the member a leaving node hands server id over to (the rendezvous choice among the members not
// leaving); false when there is none other than this node (the server then waits for a member to come: the
// reconciler of the next node takes it).
func (v *Members) Successor(id string) (node, addr string, ok bool) {
	node, addr = v.Choose(id)
	if node == "" || node == v.self {
		return "", "", false
	}
	return node, addr, true
}

// HandOverAll hands every server of ids over at once with one (which retires the server here and activates it on
// its successor; true: it moved) and returns how many moved.
func HandOverAll(ids []string, one func(id string) bool) int {
	var wg sync.WaitGroup
	var moved atomic.Int64
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if one(id) {
				moved.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(moved.Load())
}
