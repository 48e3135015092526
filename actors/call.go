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
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/actors/server"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/telemetry"
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
func (s *System) Call(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*pb.CallToolReply, error) {
	reply, _, err := s.call(ctx, r, argsJSON, progress, false)
	return reply, err
}

// CallResult is Call for a caller that wants the go-sdk result object: on this node it skips the JSON round trip
// (the MCP endpoint hands the object straight to its own session).
func (s *System) CallResult(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*mcp.CallToolResult, *pb.CallToolReply, error) {
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

func (s *System) call(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress), object bool) (*pb.CallToolReply, *mcp.CallToolResult, error) {
	deadline := s.callDeadline(ctx)
	if dl, ok := ctx.Deadline(); ok && tasks.BackendTaskTTL(ctx) > 0 {
		deadline = dl // a task's call lasts as long as its task (its TTL), not a request's timeout
	}
	msg := &pb.CallTool{Tool: r.Tool, ArgumentsJson: argsJSON, DeadlineUnixMs: deadline.UnixMilli(), WantObject: object,
		TraceContext: telemetry.Inject(ctx), Subject: gateway.CallerSubject(ctx),
		TaskTtlMs: tasks.BackendTaskTTL(ctx).Milliseconds(), // a task's call (issue 30): see server/tasks_backend.go
		TaskId:    tasks.TaskID(ctx), ResumeBackendTask: tasks.ResumeBackendTask(ctx)}
	if msg.TraceContext != nil {
		msg.SentUnixNano = time.Now().UnixNano() // the server actor's mailbox span starts here
	}
	if progress != nil {
		pid := s.sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if p, ok := c.Message().(*pb.Progress); ok {
				progress(p)
			}
		}))
		defer s.sys.Root.Stop(pid)
		msg.ProgressTo = &pb.PID{Address: pid.Address, Id: pid.Id}
	}
	if stop := server.AttachRelay(ctx, s.sys, msg, s.relayEnds); stop != nil {
		defer stop()
	}
	res, err := s.askServer(ctx, r.ServerID, msg, deadline)
	if err != nil {
		return nil, nil, err
	}
	switch v := res.(type) {
	case *pb.CallToolReply:
		return v, nil, nil
	case *server.CallObject:
		return v.Reply, v.Result, nil
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

// askServer asks a server's actor wherever it lives (lookup.go, placement.Lookup): an actor that is gone (a dead letter) or that says
// the server moved is looked up again and asked again (it ran nothing), a few times within the deadline; a server
// that does not exist is persistence.ErrNotFound. The actor answers within the deadline itself, so the ask waits a
// little longer to hear its REQUEST_TIMEOUT. When ctx ends first (the caller left), a CallTool is cancelled at the
// backend. A request to an actor on another node fails at once when that node leaves the cluster.
func (s *System) askServer(ctx context.Context, id string, msg any, deadline time.Time) (any, error) {
	if call, ok := msg.(*pb.CallTool); ok {
		if !s.calls.enter() {
			return s.shutdownReply(id, call.Tool), nil
		}
		defer s.calls.leave()
		call.CallId = s.sys.ID + "-" + strconv.FormatUint(s.callSeq.Add(1), 10)
		if call.RequestId == "" {
			call.RequestId = requestid.From(ctx)
		}
	}
	for attempt := 1; ; attempt++ {
		pid, err := s.resolveBy(ctx, id, deadline)
		if err != nil {
			return nil, err // ErrShuttingDown: the placement is gone with the actor system
		}
		res, err := s.askServerOnce(ctx, id, pid, msg, deadline)
		again := errors.Is(err, ErrShuttingDown) || err == nil && moved(res)
		// A server being handed over answers SERVER_MOVED until its new owner has it: wait for that, with a
		// growing pause, within the request's deadline.
		pause := min(time.Duration(1<<min(attempt, 5))*10*time.Millisecond, 250*time.Millisecond)
		if !again || time.Now().Add(pause).After(deadline) || ctx.Err() != nil {
			if errors.Is(err, ErrShuttingDown) {
				return nil, fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
			}
			if err == nil && moved(res) {
				return nil, &routing.UnavailableError{Server: routing.ServerEntry{ID: id}, Detail: "Server unavailable: it is moving between nodes; retry"}
			}
			return res, err
		}
		s.forget(id)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// resolveBy is resolve within deadline. A server whose actor runs on this node (one node) is found without a
// context of its own: that is every call of a single daemon.
func (s *System) resolveBy(ctx context.Context, id string, deadline time.Time) (*actor.PID, error) {
	if s.cluster == nil {
		if pid, ok := s.hostedPID(id); ok {
			return pid, nil
		}
	}
	lctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return s.resolve(lctx, id)
}

// resolve is the actor of a server: on one node its fixed local name once it is active (activating it first when
// it is not), in a cluster wherever the lookup finds (and caches) it.
func (s *System) resolve(ctx context.Context, id string) (*actor.PID, error) {
	if s.cluster != nil {
		return s.locate(ctx, id)
	}
	if pid, ok := s.hostedPID(id); ok {
		return pid, nil
	}
	return s.activateLocal(ctx, id, "")
}

// moved reports whether a server actor's answer says it did not take the request because the server is elsewhere
// (or is not there at all): the request can be sent again after a lookup.
func moved(res any) bool {
	var info *pb.ErrorInfo
	switch r := res.(type) {
	case *pb.CallToolReply:
		info = r.Error
	case *pb.ListToolsReply:
		info = r.Error
	case *pb.ListFeaturesReply:
		info = r.Error
	case *pb.FeatureReply:
		info = r.Error
	case *pb.ConnectReply:
		info = r.Error
	case *pb.DisconnectReply:
		info = r.Error
	case *pb.StatusReply:
		info = r.Error
	}
	return info != nil && info.Code == errcode.ServerMoved
}

// askServerOnce asks one server actor once.
func (s *System) askServerOnce(ctx context.Context, id string, pid *actor.PID, msg any, deadline time.Time) (any, error) {
	timeout := time.Until(deadline) + time.Second
	w := s.watchRemote(pid)
	call, isCall := msg.(*pb.CallTool)
	if isCall && ctx.Done() != nil {
		// The caller left: cancel the backend call; the actor then answers at once with the call's end.
		stop := context.AfterFunc(ctx, func() { s.sys.Root.Send(pid, &pb.CancelCall{CallId: call.CallId}) })
		defer stop()
		res, err := s.askWatching(context.WithoutCancel(ctx), pid, msg, timeout, w)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("call cancelled by its caller: %w", ctx.Err())
		}
		return s.departedReply(id, msg, res, err)
	}
	res, err := s.askWatching(ctx, pid, msg, timeout, w)
	return s.departedReply(id, msg, res, err)
}

var (
	// errDeparted: the node that hosts the server left the cluster while the request was in flight.
	errDeparted = errors.New("the cluster node serving the server left while the request was in flight")
	// errLinkBroken: a connection with the node that hosts the server broke while the request was in flight (the
	// request, or its answer, may have been lost with it: placement.Links).
	errLinkBroken = errors.New("the connection with the cluster node serving the server broke while the request was in flight")
)

// remoteWatch is what a request to another node gives up on: that node leaving the membership (departed), or a
// connection with it breaking (broken). Both nil: the actor is on this node (or there is no cluster).
type remoteWatch struct {
	departed, broken <-chan struct{}
}

// watchRemote starts watching the node of pid for a request about to be sent to it.
func (s *System) watchRemote(pid *actor.PID) remoteWatch {
	if s.members == nil || pid.Address == s.sys.Address() {
		return remoteWatch{}
	}
	return remoteWatch{departed: s.members.Departure(pid.Address), broken: s.links.Watch(pid.Address)}
}

// askWatching is askActor that also gives up when the node of pid leaves or a connection with it breaks
// (errDeparted, errLinkBroken).
func (s *System) askWatching(ctx context.Context, pid *actor.PID, msg any, timeout time.Duration, w remoteWatch) (any, error) {
	if w.departed == nil && w.broken == nil {
		return s.askActor(ctx, pid, msg, timeout)
	}
	done := make(chan askResult, 1)
	go func() {
		res, err := s.askActor(ctx, pid, msg, timeout)
		done <- askResult{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-w.departed:
		return graceWait(done, w.broken, errDeparted)
	case <-w.broken:
		return graceWait(done, w.departed, errLinkBroken)
	}
}

type askResult struct { // what askActor returned, from the goroutine that waits for it
	res any
	err error
}

// graceWait waits up to linkGrace for the answer of a request whose node left or whose connection broke: an answer
// already in (select picks among ready cases at random), or that comes within the grace, wins; the other sign
// (end) ends the wait with errDeparted at once; the grace running out ends it with late. After a break: the answer
// may have come with the connection's last messages (a node that hands its servers over answers, then exits); the
// node leaving the membership means no answer is coming (a SIGKILLed node is confirmed dead by a refused dial
// within tens of milliseconds: placement.Suspicion). After a departure: a node handing its servers over on SIGTERM
// leaves the membership before it closes its connections, so its answer (a retired actor's SERVER_MOVED) may still
// be on its way; a dead node's connection breaks at once, which ends the wait.
func graceWait(done <-chan askResult, end <-chan struct{}, late error) (any, error) {
	select {
	case r := <-done:
		return r.res, r.err
	default:
	}
	grace := time.NewTimer(linkGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-end:
		select {
		case r := <-done:
			return r.res, r.err
		default:
			return nil, errDeparted
		}
	case <-grace.C:
		return nil, late
	}
}

// linkGrace is how long a request whose connection broke, with a node still a member, waits for an answer that
// arrived just before; and how long one to a node that left the membership while its connection stands waits for
// the answer the node sent as it left.
const linkGrace = 250 * time.Millisecond

// departedReply turns errDeparted and errLinkBroken into the answer the caller expects: a call's
// SERVER_UNAVAILABLE saying the call may not have completed (it may have run on the other node), or an
// UnavailableError (retry shortly, when the connection broke).
func (s *System) departedReply(id string, msg any, res any, err error) (any, error) {
	if !errors.Is(err, errDeparted) && !errors.Is(err, errLinkBroken) {
		return res, err
	}
	srv, _ := s.Routes().Server(id)
	detail := fmt.Sprintf("Server unavailable: %s: %s", srv.Name, err.Error())
	if c, ok := msg.(*pb.CallTool); ok {
		return &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerUnavailable, ServerName: srv.Name, ServerStatus: srv.Status,
			Message: detail + "; the call " + c.Tool + " may or may not have run, and will not be retried"}}, nil
	}
	ue := &routing.UnavailableError{Server: srv, Detail: detail}
	if errors.Is(err, errLinkBroken) {
		ue.RetryAfter = time.Second
	}
	return nil, ue
}

// activateSoon has a server activated where the lookup places it (after a registration with auto_connect); a
// failure is logged: the reconciler tries again.
func (s *System) activateSoon(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.deps.Config.AskTimeout)
	defer cancel()
	if _, err := s.locate(ctx, id); err != nil && !errors.Is(err, ErrShuttingDown) {
		s.deps.Logger.Warn("activate server", "server_id", id, "error", err)
	}
}

// tellActive sends msg to the server's actor if one is active anywhere (a server nobody serves reads its
// registration afresh when it activates).
func (s *System) tellActive(id string, msg any) {
	if s.cluster == nil {
		if pid, ok := s.hostedPID(id); ok {
			s.sys.Root.Send(pid, msg)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deps.Config.AskTimeout)
	defer cancel()
	if pid, ok := s.activePID(ctx, id); ok {
		s.sys.Root.Send(pid, msg)
	}
}

// activePID is the actor of a server that a cluster member serves now (its lease is live), if any.
func (s *System) activePID(ctx context.Context, id string) (*actor.PID, bool) {
	if pid, ok := s.lookup.Cached(id); ok {
		return pid, true
	}
	l, now, err := s.deps.Store.GetLease(ctx, id)
	if err != nil || !l.ExpiresAt.After(now) {
		return nil, false
	}
	if _, member := s.members.Addr(l.Owner); !member {
		return nil, false
	}
	pid, err := s.locate(ctx, id)
	return pid, err == nil
}

// deactivate stops a server's actor wherever it is active and waits until its session is closed and its lease
// released (drain: how long its calls in flight may go on; 0 cancels them).
func (s *System) deactivate(ctx context.Context, id string, drain time.Duration, reason string) error {
	pid, ok := s.hostedPID(id)
	if s.cluster != nil {
		pid, ok = s.activePID(ctx, id)
	}
	if !ok {
		return nil
	}
	timeout := s.deps.Config.AskTimeout + drain + 3*s.deps.Config.TerminateDuration
	res, err := s.askActor(ctx, pid, &pb.Deactivate{Reason: reason, DrainMs: drain.Milliseconds()}, timeout)
	s.forget(id)
	switch {
	case errors.Is(err, ErrShuttingDown):
		return nil // not active here
	case err != nil:
		return err
	}
	if ack, ok := res.(*pb.Ack); ok && ack.Error != "" {
		return errors.New(ack.Error)
	}
	return nil
}
