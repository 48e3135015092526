package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/internal/toolresult"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The server actor's requests on a live session: tools/call and tools/list, each run in a goroutine that answers
// the asker, and the mapping of their failures to the contract's error codes.

// CallObject answers a CallTool with want_object from a caller on the same node: the result as the go-sdk object.
type CallObject struct {
	Reply  *pb.CallToolReply
	Result *mcp.CallToolResult
}

func (a *serverActor) unavailable(detail string) *pb.ErrorInfo {
	return &pb.ErrorInfo{Code: errcode.ServerUnavailable, Message: detail, ServerStatus: a.status, ServerName: a.rec.Name}
}

// callTool starts the call on the session in a goroutine and answers the asker from there: the mailbox is free for
// the next call at once, and the session multiplexes them.
func (a *serverActor) callTool(ctx actor.Context, m *pb.CallTool) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&pb.CallToolReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	if a.shuttingDown {
		ctx.Respond(&pb.CallToolReply{Error: a.unavailable(fmt.Sprintf("The aggregator is shutting down and takes no new calls (%s on %s)", m.Tool, a.rec.Name))})
		return
	}
	if max := a.deps.Config.MaxCallsPerServer; max > 0 && a.pending.len() >= max {
		a.deps.Metrics.Call(a.rec.Name, metrics.OutcomeUnavailable, 0)
		ctx.Respond(&pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerBusy, ServerName: a.rec.Name, ServerStatus: a.status,
			Message: fmt.Sprintf("Server %s is busy: %d calls in flight, the limit (MCP_AGGREGATOR_MAX_CALLS_PER_SERVER); retry shortly", a.rec.Name, max)}})
		return
	}
	// A per_user server runs the call on the caller's own session (proxy_user.go), opened on demand: userCall; so
	// does a shared server that sends requests to its client, for a client that can answer them (key, the client's
	// own session). Every other call goes to the server's own session, without a closure of its own.
	sess, tw := a.sess.session, a.sess.tasks
	var userCall func(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, func(string) string, error)
	var key string
	if perUser(a.rec) {
		if info := a.userSessionCheck(m.Subject); info != nil {
			ctx.Respond(&pb.CallToolReply{Error: info})
			return
		}
		key = m.Subject
	} else if a.clientSession(m) {
		key = clientSessionKey(m.RelayClient)
	}
	// The request id follows the call to the backend: in the call's _meta, and (through the HTTP client's transport,
	// which reads the context) as X-Request-ID.
	cctx, id, deadline, release := a.beginRequest(m.DeadlineUnixMs, m.RequestId, m.CallId)
	relay, relayed := &a.relay, m.RelayTo != nil
	if key == "" {
		relay.begin(id, m.RelayTo)
	}
	cctx = telemetry.Extract(cctx, m.TraceContext) // the caller's trace goes on to the backend (ClientMiddleware)
	if m.SentUnixNano > 0 {
		telemetry.Waited(cctx, "server_actor.mailbox", time.Unix(0, m.SentUnixNano), a.rec.Name, a.id)
	}
	sender, sys, self := ctx.Sender(), a.sys, a.self
	// A caller on this node that asked for it gets the result object itself: no JSON round trip.
	local := m.WantObject && sender != nil && sender.Address == a.sys.Address()
	name, status := a.rec.Name, a.status
	args := json.RawMessage(m.ArgumentsJson)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// The fast hop (fasthop.go) takes a plain call on the server's own streamable HTTP session, decided here, before
	// anything is sent: the go-sdk session serves everything else.
	var hop *fastHop
	var hopSess *mcp.ClientSession
	if key == "" && m.ResumeBackendTask == "" && m.ProgressTo == nil && !(m.TaskTtlMs > 0 && tw.supported(m.Tool)) &&
		!a.relay.asked.Load() && !trace.SpanContextFromContext(cctx).IsValid() && json.Valid(args) {
		if s, ok := a.sess.hop.ready(); ok && s == sess {
			hop, hopSess = a.sess.hop, s
		}
	}
	// The go-sdk's params, for every way but the hop's, which writes the request itself: a call it takes allocates
	// neither them nor the map of their _meta (issue 26).
	var params *mcp.CallToolParams
	var token string
	if hop == nil {
		params = &mcp.CallToolParams{Name: m.Tool, Arguments: args}
		if m.RequestId != "" {
			params.Meta = mcp.Meta{RequestIDMetaKey: m.RequestId}
		}
		if m.ProgressTo != nil {
			token = fmt.Sprintf("%s/%d/%d", a.id, a.gen, id)
			params.SetProgressToken(token)
			a.progress.Store(token, actor.NewPID(m.ProgressTo.Address, m.ProgressTo.Id))
		}
	}
	stdio := a.sess.b != nil && a.sess.b.Stdio()
	var recordTask func(string)
	if m.TaskId != "" && a.deps.Store != nil {
		// The backend's task is recorded on ours at once: when this node dies, another resumes following it.
		store, log, taskID, serverID := a.deps.Store, a.deps.Logger, m.TaskId, a.rec.ID
		recordTask = func(backendTaskID string) {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(cctx), 10*time.Second)
			defer cancel()
			if err := store.SetTaskBackend(wctx, taskID, backendTaskID, serverID); err != nil {
				log.WarnContext(wctx, "backend task not recorded on its task", "task", taskID, "server", name, "error", err)
			}
		}
	}
	if key != "" {
		subject := ""
		if perUser(a.rec) {
			subject = m.Subject
		}
		var task *taskCall
		if m.TaskTtlMs > 0 && tw.supported(m.Tool) { // the server's own session knows the tool's taskSupport
			task = &taskCall{ttl: time.Duration(m.TaskTtlMs) * time.Millisecond, onTask: recordTask}
		}
		userCall, relay = a.callerCall(ctx, key, subject, cctx, deadline, params, id, m.RelayTo, task)
	}
	progress, mx, sec, rec, pending := a.progress, a.deps.Metrics, a.secrets, a.rec, a.pending
	mx.InFlight(name, 1)
	a.workers.Go(func() {
		defer release()
		if token != "" {
			defer progress.Delete(token)
		}
		start := time.Now()
		var res *mcp.CallToolResult
		var scrub func(string) string
		var err error
		var tail hopTail // the rest of a fast call's stream, read once the answer is on its way
		switch {
		case m.ResumeBackendTask != "": // a task whose node died, followed again here (tasks_backend.go)
			res, err = resumeBackendTask(cctx, tw, sess, m.Tool, m.ResumeBackendTask, name, stdio)
		case userCall != nil:
			res, scrub, err = userCall(cctx, params)
			scrubToolError(res, scrub) // a tool error echoing the caller's credential, as an error's text
		case hop != nil:
			var raw json.RawMessage
			if raw, err = hop.call(cctx, hopSess, m.Tool, args, m.RequestId, &tail); err == nil {
				res, err = decodeResult(raw)
			}
		case m.TaskTtlMs > 0 && tw.supported(m.Tool): // a task's call to a backend with tasks (tasks_backend.go)
			res, err = followBackendTask(cctx, tw, sess, params, time.Duration(m.TaskTtlMs)*time.Millisecond, recordTask)
		default:
			res, err = sess.CallTool(cctx, params)
		}
		took := time.Since(start)
		reply := &pb.CallToolReply{ExecutionMs: float64(took.Microseconds()) / 1000}
		if err == nil {
			a.lastOK.Store(time.Now().UnixNano())
			if !local {
				reply.ResultJson, err = toolresult.Marshal(res) // json.Marshal's bytes, text results without reflection
			}
		}
		if err != nil {
			reply.Error = backendError(cctx, err, rec, status, m.Tool, scrub, sec)
			a.deps.Logger.WarnContext(cctx, "tool call failed", "server", name, "tool", m.Tool, "request_id", m.RequestId,
				"code", reply.Error.Code, "error", reply.Error.Message)
		}
		mx.Call(name, callOutcome(res, reply.Error, cctx), took)
		// Count the call done before answering (in the gauge, the relay and the actor), so that whatever the asker
		// does next sees it finished: a next call's backend request must not count this one as still in flight, nor
		// the in-flight gauge a call answered while the rest of its stream is read (finishTail).
		mx.InFlight(name, -1)
		relay.end(id, relayed)
		if pending.done(id, m.CallId) {
			sys.Root.Send(self, &callDone{})
		}
		switch {
		case sender == nil:
		case local:
			sys.Root.Send(sender, &CallObject{Reply: reply, Result: res})
		default:
			sys.Root.Send(sender, reply)
		}
		tail.finishTail(release)
	})
}

// beginRequest counts a backend request (a call, a feature request) among those in flight (a.pending, under the id
// it returns, and under callID for a call that has one) and gives it its context: ended at the asker's deadline
// (deadlineUnixMs; the configured request timeout from now when 0), cancelled with a cause by cancelPending, and
// carrying requestID. release frees the context once the request is done; the request's worker takes it out of
// a.pending (pendingRequests.done).
func (a *serverActor) beginRequest(deadlineUnixMs int64, requestID, callID string) (ctx context.Context, id uint64, deadline time.Time, release func()) {
	deadline = time.Now().Add(a.deps.Config.RequestTimeout)
	if deadlineUnixMs > 0 {
		deadline = time.UnixMilli(deadlineUnixMs)
	}
	dctx, cancelDeadline := context.WithDeadline(context.Background(), deadline)
	ctx, cancelCause := context.WithCancelCause(dctx)
	a.nextCall++
	id = a.nextCall
	a.pending.add(id, cancelCause, callID)
	if requestID != "" {
		ctx = requestid.With(ctx, requestID)
	}
	return ctx, id, deadline, func() {
		cancelCause(nil)
		cancelDeadline()
	}
}

// classifyCallError maps what went wrong with a call to the contract's codes.
// backendError is what a reply carries for err from a backend request (a call, a feature request): the caller's own
// failure (classifyUserError: no credential, a refused one) or the backend's (classifyCallError), its message
// scrubbed of the caller's secret (scrub, set for a caller's own session) and of the server's (sec).
func backendError(ctx context.Context, err error, rec persistence.Server, status, what string, scrub func(string) string, sec *backend.Secrets) *pb.ErrorInfo {
	info, user := classifyUserError(err, rec, status)
	if !user {
		info = classifyCallError(ctx, err, rec.Name, status, what)
	}
	if scrub != nil {
		info.Message = scrub(info.Message)
	}
	info.Message = sec.Scrub(info.Message)
	return info
}

func classifyCallError(ctx context.Context, err error, server, status, tool string) *pb.ErrorInfo {
	info := &pb.ErrorInfo{ServerName: server, ServerStatus: status}
	var rpcErr *jsonrpc.Error
	switch {
	case errors.Is(context.Cause(ctx), ErrShuttingDown):
		info.Code, info.Message = errcode.ServerUnavailable,
			fmt.Sprintf("The aggregator is shutting down: the call to %s on %s did not finish within the drain time", tool, server)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		info.Code, info.Message = errcode.RequestTimeout, fmt.Sprintf("Tool call %s on %s timed out", tool, server)
	case errors.Is(ctx.Err(), context.Canceled):
		info.Code, info.Message = errcode.ServerUnavailable,
			fmt.Sprintf("Server %s was disconnected while %s was in progress", server, tool)
	case errors.As(err, &rpcErr) && msglimit.TooLarge(rpcErr.Code, rpcErr.Message):
		info.Code, info.Message = errcode.ResponseTooLarge, fmt.Sprintf("Answer of %s to %s refused: %s", server, tool, rpcErr.Message)
	case localTransportError(err):
		info.Code, info.Message = errcode.ServerUnavailable,
			fmt.Sprintf("Server %s (status %s) is unavailable: the call to %s did not reach it: %v", server, status, tool, err)
	case errors.As(err, &rpcErr):
		info.Code, info.Message = errcode.ExecutionFailed, fmt.Sprintf("Server %s returned an error: %s", server, rpcErr.Message)
	default:
		info.Code, info.Message = errcode.ServerUnavailable,
			fmt.Sprintf("Connection to %s was lost while %s was in progress: %v", server, tool, err)
	}
	return info
}

// connectionBroken reports an error that means the session's connection is gone, not that one exchange failed.
func connectionBroken(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, mcp.ErrConnectionClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || // a write to a child that exited, a reset stream
		errors.Is(err, os.ErrClosed) // a write to the stdin of a child already reaped: its pipe is closed
}

// localTransportError reports whether err carries one of the JSON-RPC codes the go-sdk gives errors it makes itself
// (-32003 client closing, -32004 server closing, -32005 rejected by the transport: connection refused, a 4xx/5xx
// HTTP answer, a closed stream). They are *jsonrpc.Error values like a backend's answer, but say the backend was not
// reached: SERVER_UNAVAILABLE. A backend's JSON-RPC body inside a rejected HTTP answer still counts as rejected.
func localTransportError(err error) bool {
	return errors.Is(err, &jsonrpc.Error{Code: -32003}) || errors.Is(err, &jsonrpc.Error{Code: -32004}) ||
		errors.Is(err, &jsonrpc.Error{Code: -32005})
}

// listTools pages through tools/list to the end in a goroutine (a large server must not hold the mailbox).
func (a *serverActor) listTools(ctx actor.Context) {
	// CONNECTING with a session: its first discovery, which CONNECTED waits for.
	if a.sess == nil || !callable(a.status) && a.status != persistence.StatusConnecting {
		ctx.Respond(&pb.ListToolsReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	sess, sender, sys, timeout, sec := a.sess.session, ctx.Sender(), a.sys, a.deps.Config.RequestTimeout, a.secrets
	gen, self, tw := a.sess.gen, a.self, a.sess.tasks
	var hop *backend.Conn // a stdio session lists on the stdio hop (stdiolist.go)
	if init := sess.InitializeResult(); a.sess.b.Stdio() && !a.deps.Config.NoFastHop && init != nil && init.ProtocolVersion < "2026-07-28" {
		hop = a.sess.b
	}
	go func() {
		lctx, cancel := context.WithTimeout(withWireWatch(context.Background()), timeout) // tasks_backend.go
		defer cancel()
		reply := &pb.ListToolsReply{}
		failed := func(err error) {
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || localTransportError(err) {
				sys.Root.Send(self, &toolsListFailed{gen: gen, err: err})
			}
			reply.ToolsJson = nil
			reply.Error = &pb.ErrorInfo{Code: errcode.ExecutionFailed, Message: sec.Scrub(err.Error())}
			if rpcErr := (*jsonrpc.Error)(nil); errors.As(err, &rpcErr) && msglimit.TooLarge(rpcErr.Code, rpcErr.Message) {
				reply.Error.Code = errcode.ResponseTooLarge
			}
		}
		listed := false
		if hop != nil {
			tools, err := listStdioTools(lctx, hop, tw)
			switch {
			case err == nil:
				reply.ToolsJson, listed = tools, true
			case errors.Is(err, errHeaderAnnotations), errors.Is(err, backend.ErrNoStdioHop):
				// the go-sdk's way below
			default:
				failed(err)
				listed = true
			}
		}
		if !listed {
			reply.ToolsJson = nil
			for tool, err := range sess.Tools(lctx, nil) {
				if err != nil {
					failed(err)
					break
				}
				b, err := json.Marshal(tool)
				if err != nil {
					reply.Error = &pb.ErrorInfo{Code: errcode.ExecutionFailed, Message: err.Error()}
					break
				}
				reply.ToolsJson = append(reply.ToolsJson, tw.withExecution(tool.Name, b)) // tasks_backend.go
			}
		}
		if sender != nil {
			sys.Root.Send(sender, reply)
		}
	}()
}

// callOutcome names how a call ended, for the tool call counter.
func callOutcome(res *mcp.CallToolResult, e *pb.ErrorInfo, ctx context.Context) string {
	switch {
	case e == nil && res != nil && res.IsError:
		return metrics.OutcomeToolError
	case e == nil:
		return metrics.OutcomeOK
	case e.Code == errcode.ExecutionFailed:
		return metrics.OutcomeFailed
	case e.Code == errcode.RequestTimeout:
		return metrics.OutcomeTimeout
	case errors.Is(ctx.Err(), context.Canceled):
		return metrics.OutcomeCancelled
	}
	return metrics.OutcomeUnavailable
}
