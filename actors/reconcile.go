package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/placement"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The reconciler makes sure every server that should be served has an owner: at start, after every change of the
// cluster's membership, and every lease TTL (a process on the same store may have stopped). A server should be
// served when the admin wants it connected (auto_connect), or when its stored status still says an earlier owner
// had a session (the new owner resets it). On one node this node activates them all; in a cluster, a server whose
// lease no live member holds is activated by the one member the rendezvous hash chooses (taking the lease over
// from a member that left), so the members do not race for it. An activated actor that finds the lease held by a
// process outside the cluster stands by (server_lease.go).

// startReconciler runs a first pass now (the servers start connecting before Start returns) and then keeps
// reconciling in the background until Shutdown.
func (s *System) startReconciler(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.Background())
	s.stopReconcile = cancel
	s.reconciling.Store(true)
	activated, err := s.reconcile(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("activate servers: %w", err)
	}
	// Before the daemon answers anyone, the servers it activated have read their registration, taken their lease
	// and reset the status an earlier run left behind: nobody reads that stale status as live.
	s.awaitActivated(ctx, activated)
	go func() {
		tick := time.NewTicker(s.deps.owners.TTL())
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			case <-s.reconcileNow:
			}
			if _, err := s.reconcile(rctx); err != nil && rctx.Err() == nil {
				s.deps.Logger.Warn("reconcile: cannot activate servers now", "error", err)
			}
		}
	}()
	return nil
}

// reconcileSoon asks for a reconciliation pass (coalesced with one already asked for).
func (s *System) reconcileSoon() {
	select {
	case s.reconcileNow <- struct{}{}:
	default:
	}
}

// reconcile is one pass: it activates every server that should be served and that this node should host, and
// returns the actors it activated.
func (s *System) reconcile(ctx context.Context) ([]*actor.PID, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pass, err := placement.PlanPass(sctx, s.deps.Store, s.members, func(id string) bool {
		_, here := s.hostedPID(id)
		return here
	})
	if err != nil || pass == nil {
		return nil, err // (nil, nil: out of the membership, it hosts nothing until it rejoins)
	}
	s.unowned.Store(pass.Unowned)
	var activated []*actor.PID
	for _, a := range pass.Activate {
		pid, err := s.activateLocal(sctx, a.ServerID, a.Dead)
		if err != nil {
			if errors.Is(err, ErrShuttingDown) || ctx.Err() != nil {
				return activated, nil
			}
			s.deps.Logger.Warn("reconcile: activate server", "server_id", a.ServerID, "server", pass.Names[a.ServerID], "error", err)
			continue
		}
		activated = append(activated, pid)
	}
	return activated, nil
}

// awaitActivated waits (at most the ask timeout) until the actors have activated: a status ask is answered once
// an actor knows whether it owns its server and has persisted the reset of a stale status.
func (s *System) awaitActivated(ctx context.Context, pids []*actor.PID) {
	var wg sync.WaitGroup
	for _, pid := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.askActor(ctx, pid, &pb.GetStatus{}, 0)
		}()
	}
	wg.Wait()
}
