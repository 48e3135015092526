package placement

import (
	"errors"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestMayHost: a node hosts nothing new while leaving or out of the membership.
func TestMayHost(t *testing.T) {
	joined := NewMembers("node-a", "a:1")
	joined.Update(map[string]string{"node-a": "a:1"})
	outside := NewMembers("node-a", "a:1")
	for _, tc := range []struct {
		name    string
		m       *Members
		leaving bool
		want    error
	}{
		{"single node", nil, false, nil},
		{"single node leaving", nil, true, ErrLeaving},
		{"member", joined, false, nil},
		{"member leaving", joined, true, ErrLeaving},
		{"not joined", outside, false, ErrNotMember},
		{"not joined and leaving", outside, true, ErrLeaving},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := MayHost(tc.m, tc.leaving); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("MayHost = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestHostReply: a placement actor's answer, as it crosses nodes and is read back.
func TestHostReply(t *testing.T) {
	pid := actor.NewPID("10.0.0.1:7000", "placement/server-s1-3")
	spawn := errors.New("activate server s1: name taken")
	for _, tc := range []struct {
		name    string
		pid     *actor.PID
		err     error
		wire    *pb.Activated
		wantErr error
	}{
		{"hosted", pid, nil, &pb.Activated{Pid: &pb.PID{Address: pid.Address, Id: pid.Id}}, nil},
		{"leaving", nil, ErrLeaving, &pb.Activated{Leaving: true}, ErrLeaving},
		{"not a member", nil, ErrNotMember, &pb.Activated{Error: ErrNotMember.Error()}, ErrNotMember},
		{"spawn failed", nil, spawn, &pb.Activated{Error: spawn.Error()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire := HostReply(tc.pid, tc.err)
			if wire.GetPid().GetId() != tc.wire.GetPid().GetId() || wire.GetPid().GetAddress() != tc.wire.GetPid().GetAddress() ||
				wire.Leaving != tc.wire.Leaving || wire.Error != tc.wire.Error {
				t.Fatalf("HostReply = %v, want %v", wire, tc.wire)
			}
			got, err := HostedPID(wire)
			switch {
			case tc.err == nil:
				if err != nil || !got.Equal(tc.pid) {
					t.Errorf("HostedPID = %v, %v; want %v", got, err, tc.pid)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("HostedPID error = %v, want %v", err, tc.wantErr)
				}
			default:
				if err == nil || err.Error() != tc.err.Error() {
					t.Errorf("HostedPID error = %v, want the message %q", err, tc.err)
				}
			}
		})
	}
}
