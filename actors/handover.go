package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/placement"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// HandOver is the first step of a cluster node's graceful stop (SIGTERM): the node stops taking servers, and each
// server it owns moves to the member the rendezvous hash chooses among the others. A server's calls in flight may
// finish first (up to half of what is left of ctx's deadline, and at most the drain timeout); meanwhile new calls
// for it, from any node, are answered SERVER_MOVED and their callers wait and look the server up again; once its
// session is closed and its lease released, the successor activates it, takes the lease and connects, and the
// waiting calls go there. One session at a time: the successor connects after this node has closed its own. It
// returns how many servers moved. On a single node it does nothing.
func (s *System) HandOver(ctx context.Context) int {
	if s.members == nil {
		return 0
	}
	s.members.MarkLeaving(s.deps.NodeID)
	res, err := s.askActor(ctx, s.placement, &placementLeaving{}, 0)
	if err != nil {
		s.deps.Logger.Warn("hand-over: placement did not answer", "error", err)
		return 0
	}
	ids, _ := res.([]string)
	if len(ids) == 0 {
		return 0
	}
	drain := placement.HandOverDrain(ctx, s.deps.Config.DrainTimeout)
	start := time.Now()
	s.deps.Logger.Info("hand-over: moving this node's servers to the other members", "servers", len(ids), "drain", drain.String())
	moved := placement.HandOverAll(ids, func(id string) bool { return s.handOverOne(ctx, id, drain) })
	s.deps.Logger.Info("hand-over done", "servers", len(ids), "moved", moved, "took", time.Since(start).Round(time.Millisecond).String())
	return moved
}

// handOverOne retires the server's actor here (after its calls drained) and activates the server on its successor.
func (s *System) handOverOne(ctx context.Context, id string, drain time.Duration) bool {
	if pid, ok := s.hostedPID(id); ok {
		timeout := s.deps.Config.AskTimeout + drain + 3*s.deps.Config.TerminateDuration
		if _, err := s.askActor(ctx, pid, &pb.Deactivate{Reason: "node leaving the cluster", DrainMs: drain.Milliseconds()}, timeout); err != nil {
			s.deps.Logger.Warn("hand-over: server actor did not confirm", "server_id", id, "error", err)
		}
	}
	s.forget(id)
	successor, addr, ok := s.members.Successor(id)
	if !ok {
		return false // no other member: the server waits for one (the reconciler of the next node takes it)
	}
	if _, err := s.askPlacement(ctx, actor.NewPID(addr, placement.PlacementName), id, ""); err != nil {
		s.deps.Logger.Warn("hand-over: successor did not activate the server", "server_id", id, "successor", successor, "error", err)
		return false
	}
	return true
}
