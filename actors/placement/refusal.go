package placement

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/internal/errcode"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Refused names the server a refusal speaks of: its id, name and status as its actor knows them, and the process
// that holds its lease when it is not this one (Holder; empty: none known).
type Refused struct {
	ID, Name, Status, Holder string
}

// Refusal is the answer to msg, a command a server actor did not run (code: why not, errcode.ServerMoved,
// ServerUnavailable or ServerNotFound; why: the detail, empty for the usual one): an ErrorInfo in the reply type msg
// expects, so that it can cross nodes. reply is nil when msg expects no reply of its own; info is the error either
// way.
func Refusal(msg any, code, why string, s Refused) (reply any, info *pb.ErrorInfo) {
	if why == "" {
		switch {
		case code == errcode.ServerMoved:
			why = "being handed over to another node"
		case s.Holder != "":
			why = fmt.Sprintf("served by another aggregator process (%s) on the same store", s.Holder)
		default:
			why = "not served by this aggregator process (it does not hold the server's lease)"
		}
	}
	name := s.Name
	if name == "" {
		name = s.ID
	}
	info = &pb.ErrorInfo{Code: code, ServerName: s.Name, ServerStatus: s.Status,
		Message: fmt.Sprintf("Server unavailable: %s is %s", name, why)}
	if code == errcode.ServerNotFound {
		info.Message = "Server not found: " + s.ID
	}
	switch msg.(type) {
	case *pb.CallTool:
		return &pb.CallToolReply{Error: info}, info
	case *pb.ListTools:
		return &pb.ListToolsReply{Error: info}, info
	case *pb.ListFeatures:
		return &pb.ListFeaturesReply{Error: info}, info
	case *pb.FeatureRequest:
		return &pb.FeatureReply{Error: info}, info
	case *pb.Connect:
		return &pb.ConnectReply{ServerId: s.ID, Status: s.Status, Error: info}, info
	case *pb.Disconnect:
		return &pb.DisconnectReply{ServerId: s.ID, Status: s.Status, Error: info}, info
	case *pb.GetStatus:
		return &pb.StatusReply{ServerId: s.ID, Name: s.Name, Status: s.Status, Error: info}, info
	case *pb.Reload, *pb.Deactivate:
		return &pb.Ack{Error: info.Message}, info
	}
	return nil, info
}

// Stashed is a command a server actor keeps for later: it arrived before the actor knew whether it owns its
// server, or (a call) while the server connects right after activation.
type Stashed struct {
	Msg    any
	Sender *actor.PID
}

// MaxStash bounds the commands an actor keeps while it activates or connects; beyond it they are answered at once.
const MaxStash = 1024

// Live is the stashed commands still worth running at now, in order: a call whose caller's deadline passed
// meanwhile is dropped (nobody waits for its answer).
func Live(stash []Stashed, now time.Time) []Stashed {
	ms := now.UnixMilli()
	out := make([]Stashed, 0, len(stash))
	for _, s := range stash {
		if c, ok := s.Msg.(*pb.CallTool); ok && c.DeadlineUnixMs > 0 && c.DeadlineUnixMs < ms {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Unstash removes the stashed call of callID (its caller has left); false when there was none.
func Unstash(stash []Stashed, callID string) ([]Stashed, bool) {
	for i, s := range stash {
		if c, ok := s.Msg.(*pb.CallTool); ok && c.CallId == callID {
			return append(stash[:i], stash[i+1:]...), true
		}
	}
	return stash, false
}

// Admission is what decides whether a server actor takes a command now: whether it is leaving (with the code it
// answers then), owns the server (holds its lease), is still activating, has a session, and whether calls wait for
// the first connect after activation (AwaitConnect while Connecting).
type Admission struct {
	Leaving                                              string
	Owner, Activating, Session, AwaitConnect, Connecting bool
}

// Verdicts of Admission.Admit.
const (
	Serve  = iota // act on the command now
	Keep          // stash it (when the stash is full, refuse it with the reason Admit gives)
	Refuse        // answer it at once with the code Admit gives
)

// Admit decides about msg: Serve; Keep while the actor activates, and for a call (or a listing) while it waits for
// the first connect after activation, which a restart, failover or hand-over makes (the server is about to be
// back); otherwise Refuse, SERVER_MOVED while leaving, SERVER_UNAVAILABLE (naming the owner) while standing by.
// The first listing of a new session is served: the calls kept wait for it.
func (a Admission) Admit(msg any) (verdict int, code, full string) {
	switch {
	case a.Leaving != "":
		return Refuse, a.Leaving, ""
	case a.Owner:
		if _, listing := msg.(*pb.ListTools); listing && a.Session {
			return Serve, "", ""
		}
		if a.AwaitConnect && a.Connecting {
			switch msg.(type) {
			case *pb.CallTool, *pb.ListTools, *pb.ListFeatures, *pb.FeatureRequest:
				return Keep, errcode.ServerUnavailable, "too many calls wait for the server to connect"
			}
		}
		return Serve, "", ""
	case a.Activating:
		return Keep, errcode.ServerUnavailable, "too many requests while the server's actor activates"
	}
	return Refuse, errcode.ServerUnavailable, ""
}
