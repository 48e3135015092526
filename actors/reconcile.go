package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The reconciler (placement.Reconciler) makes sure every server that should be served has an owner: at start,
// after every change of the cluster's membership, and every lease TTL (a process on the same store may have
// stopped). A server should be served when the admin wants it connected (auto_connect), or when its stored status
// still says an earlier owner had a session (the new owner resets it). On one node this node activates them all;
// in a cluster, a server whose lease no live member holds is activated by the one member the rendezvous hash
// chooses (taking the lease over from a member that left), so the members do not race for it. An activated actor
// that finds the lease held by a process outside the cluster stands by (server/server_lease.go).

// startReconciler runs a first pass now (the servers start connecting before Start returns) and then keeps
// reconciling in the background until Shutdown.
func (s *System) startReconciler(ctx context.Context) error {
	r := s.reconciler
	r.Store, r.Members, r.Every, r.Logger = s.deps.Store, s.members, s.deps.owners.TTL(), s.deps.Logger
	r.Hosted = func(id string) bool {
		_, here := s.hostedPID(id)
		return here
	}
	r.Activate = s.activateLocal
	r.Stopping = func(err error) bool { return errors.Is(err, ErrShuttingDown) }
	activated, err := r.Start(ctx)
	if err != nil {
		return fmt.Errorf("activate servers: %w", err)
	}
	// Before the daemon answers anyone, the servers it activated have read their registration, taken their lease
	// and reset the status an earlier run left behind: nobody reads that stale status as live.
	s.awaitActivated(ctx, activated)
	r.Run()
	return nil
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
