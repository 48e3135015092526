package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The call path: a tool call goes from the front end (REST, /mcp, the per-server endpoint) straight to the server
// actor that owns the backend's session, with a deadline, and the answer comes back the same way. No other actor
// is on the path (the router only publishes the RouteTable the caller resolved the name in), and nothing blocks
// but this call: the server actor runs it on a goroutine of its own over the multiplexed MCP session.

// Call runs a tool through the server actor the route names, straight from the caller: no other actor is on the
// path, and nothing blocks but this call. progress, when set, receives the backend's progress notifications. The
// result comes back as JSON (ResultJson), as it would across nodes.
func (s *System) Call(ctx context.Context, r Route, argsJSON []byte, progress func(*pb.Progress)) (*pb.CallToolReply, error) {
	reply, _, err := s.call(ctx, r, argsJSON, progress, false)
	return reply, err
}

// CallResult is Call for a caller that wants the go-sdk result object: on this node it skips the JSON round trip
// (the MCP endpoint hands the object straight to its own session).
func (s *System) CallResult(ctx context.Context, r Route, argsJSON []byte, progress func(*pb.Progress)) (*mcp.CallToolResult, *pb.CallToolReply, error) {
	reply, res, err := s.call(ctx, r, argsJSON, progress, true)
	if err != nil || reply.Error != nil || res != nil {
		return res, reply, err
	}
	// Answered as JSON (the server actor runs on another node).
	var out mcp.CallToolResult
	if err := json.Unmarshal(reply.ResultJson, &out); err != nil {
		return nil, reply, fmt.Errorf("decode result of %s: %w", r.Name, err)
	}
	return &out, reply, nil
}

func (s *System) call(ctx context.Context, r Route, argsJSON []byte, progress func(*pb.Progress), object bool) (*pb.CallToolReply, *mcp.CallToolResult, error) {
	deadline := s.callDeadline(ctx)
	msg := &pb.CallTool{Tool: r.Tool, ArgumentsJson: argsJSON, DeadlineUnixMs: deadline.UnixMilli(), WantObject: object}
	if progress != nil {
		pid := s.sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if p, ok := c.Message().(*pb.Progress); ok {
				progress(p)
			}
		}))
		defer s.sys.Root.Stop(pid)
		msg.ProgressTo = &pb.PID{Address: pid.Address, Id: pid.Id}
	}
	res, err := s.askServer(ctx, r.ServerID, msg, deadline)
	if err != nil {
		return nil, nil, err
	}
	switch v := res.(type) {
	case *pb.CallToolReply:
		return v, nil, nil
	case *callObject:
		return v.reply, v.result, nil
	}
	return nil, nil, fmt.Errorf("unexpected reply %T to call", res)
}

// callDeadline is when a call started now must end: the request timeout, or ctx's earlier deadline.
func (s *System) callDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(s.deps.Config.RequestTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// askServer asks a server actor directly; an actor that is gone (deleted) is persistence.ErrNotFound. The actor
// answers within the deadline itself, so the ask waits a little longer to hear its REQUEST_TIMEOUT. When ctx ends
// first (the caller left), a CallTool is cancelled at the backend.
func (s *System) askServer(ctx context.Context, id string, msg any, deadline time.Time) (any, error) {
	pid := s.serverPID(id)
	if call, ok := msg.(*pb.CallTool); ok {
		if !s.calls.enter() {
			return s.shutdownReply(id, call.Tool), nil
		}
		defer s.calls.leave()
		call.CallId = s.sys.ID + "-" + strconv.FormatUint(s.callSeq.Add(1), 10)
		if call.RequestId == "" {
			call.RequestId = requestid.From(ctx)
		}
		if ctx.Done() != nil {
			// The caller left: cancel the backend call; the actor then answers at once with the call's end.
			stop := context.AfterFunc(ctx, func() { s.sys.Root.Send(pid, &pb.CancelCall{CallId: call.CallId}) })
			defer stop()
			res, err := s.askActor(context.WithoutCancel(ctx), pid, msg, time.Until(deadline)+time.Second)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("call cancelled by its caller: %w", ctx.Err())
			}
			if errors.Is(err, ErrShuttingDown) {
				return nil, fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
			}
			return res, err
		}
	}
	res, err := s.askActor(ctx, pid, msg, time.Until(deadline)+time.Second)
	if errors.Is(err, ErrShuttingDown) {
		return nil, fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
	}
	return res, err
}
