package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/routing"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Where a server's actor lives. On one node: in this node's placement actor, at a fixed name, so a call addresses
// it with no lookup at all; it is activated on first use or by the reconciler. In a cluster the server's lease
// decides, through the identity lookup of package placement (placement.Lookup), which asks the chosen node's
// placement actor to host it (askPlacement).

// hostedPID is the actor of a server that this node hosts now.
func (s *System) hostedPID(id string) (*actor.PID, bool) {
	v, ok := s.hosted.Load(id)
	if !ok {
		return nil, false
	}
	return v.(*actor.PID), true
}

// serverPID addresses a server actor without a lookup: the cached one in a cluster, else the one this node hosts,
// else nil.
func (s *System) serverPID(id string) *actor.PID {
	if s.lookup != nil {
		if pid, ok := s.lookup.Cached(id); ok {
			return pid
		}
	}
	pid, _ := s.hostedPID(id)
	return pid
}

// activateLocal has this node's placement host the server's actor (dead: a departed member whose lease the actor may
// take over) and returns the actor.
func (s *System) activateLocal(ctx context.Context, id, dead string) (*actor.PID, error) {
	return s.askPlacement(ctx, s.placement, id, dead)
}

// askPlacement asks a node's placement actor to host a server. Asking another node gives up when it leaves or a
// connection with it breaks (placement.ErrUnreachable: the request or its answer may be lost), or when it does not
// answer within the ask deadline (placement.ErrNoAnswer).
func (s *System) askPlacement(ctx context.Context, to *actor.PID, id, dead string) (*actor.PID, error) {
	res, err := s.askWatching(ctx, to, &pb.Activate{ServerId: id, DeadOwner: dead}, 0, s.watchRemote(to))
	switch {
	case errors.Is(err, errDeparted), errors.Is(err, errLinkBroken):
		return nil, fmt.Errorf("%w: %w", placement.ErrUnreachable, err)
	case errors.Is(err, ErrAskTimeout) && to.Address != s.sys.Address():
		return nil, fmt.Errorf("%w: %w", placement.ErrNoAnswer, err)
	case err != nil:
		return nil, err
	}
	a, ok := res.(*pb.Activated)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T to activate", res)
	}
	return placement.HostedPID(a)
}

// locate finds (activating if need be) the actor of a server: on one node in its placement, in a cluster with the
// lookup (placement.Lookup.Locate).
func (s *System) locate(ctx context.Context, id string) (*actor.PID, error) {
	if s.lookup == nil {
		return s.activateLocal(ctx, id, "")
	}
	return s.lookup.Locate(ctx, id)
}

// unplaceable is the answer to a request for a server that no node can host now: 503, retry shortly.
func (s *System) unplaceable(id, why string) error {
	srv, _ := s.Routes().Server(id)
	if srv.ID == "" {
		srv.ID = id
	}
	name := srv.Name
	if name == "" {
		name = id
	}
	return &routing.UnavailableError{Server: srv, RetryAfter: time.Second,
		Detail: fmt.Sprintf("Server unavailable: %s cannot be placed now: %s; retry", name, why)}
}

// forget drops a cached PID that turned out dead or moved.
func (s *System) forget(id string) {
	if s.lookup != nil {
		s.lookup.Forget(id)
	}
}
