package placement

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The exchange with a node's placement actor (at PlacementName), which hosts that node's server actors: asked to
// host a server (pb.Activate), it answers with the actor, or with why it hosts none (pb.Activated, which crosses
// nodes). The actor (actors/placement.go) spawns; the rules and the wire form are here.

// MayHost says whether a node may host a server it does not host yet: not while it hands its servers over
// (ErrLeaving), not while it is out of the membership (ErrNotMember; m is nil on a single node).
func MayHost(m *Members, leaving bool) error {
	if leaving {
		return ErrLeaving
	}
	if m != nil {
		if _, joined := m.Status(); !joined {
			return ErrNotMember
		}
	}
	return nil
}

// HostReply is a placement actor's answer: the server's actor (pid), or why it hosts none (err: ErrLeaving,
// ErrNotMember, or why spawning it failed).
func HostReply(pid *actor.PID, err error) *pb.Activated {
	switch {
	case err == nil:
		return &pb.Activated{Pid: &pb.PID{Address: pid.Address, Id: pid.Id}}
	case errors.Is(err, ErrLeaving):
		return &pb.Activated{Leaving: true}
	}
	return &pb.Activated{Error: err.Error()}
}

// HostedPID reads a placement actor's answer (HostReply): the server's actor, or ErrLeaving, ErrNotMember, or an
// error with the message it carries.
func HostedPID(a *pb.Activated) (*actor.PID, error) {
	switch {
	case a.Pid != nil:
		return actor.NewPID(a.Pid.Address, a.Pid.Id), nil
	case a.Leaving:
		return nil, ErrLeaving
	case a.Error == ErrNotMember.Error():
		return nil, ErrNotMember
	}
	return nil, errors.New(a.Error)
}
