package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/gopool"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Relaying a backend's requests to its client (elicitation, sampling) and its log messages to the one aggregator
// client whose call caused them (issue 14, part B). The aggregator holds ONE session per backend, shared by every
// client, and the go-sdk client does not say which of our outgoing calls a backend's request belongs to (over
// streamable HTTP the backend sends it on that call's response stream, but the go-sdk hides that; over stdio and
// SSE nothing ties them at all). So the correlation is by the calls in flight: while exactly one tool call is in
// flight on the session, a backend's request goes to that call's client (relay_to); when several are, the
// aggregator cannot tell and answers the backend with an error saying so; when the calling client did not declare
// the capability, the backend gets -32601 (method not found), as that client would answer. Never a hang: the
// relay is bounded by the request timeout. Log messages follow the same rule and are dropped when they cannot be
// attributed.
//
// That limit ends once the backend has shown it sends such requests (issue 28): the first elicitation, sampling or
// roots request the server's own session receives (in a call or not, relayed or refused) switches the server to
// sessions per calling client (callerCall, proxy_user.go): from then on the calls of a client that can answer
// (relay_to, relay_client) run on a backend session of that client's own, whose requests all go to that client.

// relayState is a session's calls in flight, as the relay needs them; its methods are safe from any goroutine.
type relayState struct {
	inflight atomic.Int64
	relays   sync.Map // pending call id -> *actor.PID of calls whose client can answer
	last     atomic.Pointer[endedCall]
	timeout  time.Duration
	// oneClient: every call on the session is one client's (a session per client): any call in flight can answer.
	oneClient bool
	// asked: the backend has sent a request (elicitation, sampling, roots) on the session.
	asked atomic.Bool
}

// begin counts a call in flight (with the PID that answers its backend's requests, or nil); end uncounts it.
func (r *relayState) begin(id uint64, to *pb.PID) {
	r.inflight.Add(1)
	if to != nil {
		r.relays.Store(id, actor.NewPID(to.Address, to.Id))
	}
}

func (r *relayState) end(id uint64, had bool) {
	if had {
		// The go-sdk hands a backend's notifications to their handler on a goroutine of its own, so a log message
		// the backend sent just before its result may be handled just after it: the call that ended last stays
		// the target of log messages for relayGrace while no call is in flight (its caller keeps its relay actor
		// as long). Requests are never late: the backend waits for their answer before it returns.
		if pid, ok := r.relays.LoadAndDelete(id); ok {
			r.last.Store(&endedCall{pid: pid.(*actor.PID), at: time.Now()})
		}
	}
	r.inflight.Add(-1)
}

// endedCall is the relayed call that ended last.
type endedCall struct {
	pid *actor.PID
	at  time.Time
}

// logTarget is where a backend's log message goes: the sole call in flight, or else the call that ended last, if
// within relayGrace.
func (r *relayState) logTarget() (*actor.PID, bool) {
	if pid, err := r.target("notifications/message"); err == nil {
		return pid, true
	}
	if r.inflight.Load() != 0 {
		return nil, false
	}
	if last := r.last.Load(); last != nil && time.Since(last.at) < relayGrace {
		return last.pid, true
	}
	return nil, false
}

// relayGrace is how long a relayed call's log messages are still attributed to it after its result (see end).
const relayGrace = 200 * time.Millisecond

// NewRelayLater is the node's runner of relays' ends for AttachRelay: after relayGrace.
func NewRelayLater() *gopool.Later { return gopool.NewLater(relayGrace) }

// target is the PID of the sole call in flight, or an error for the backend.
func (r *relayState) target(method string) (*actor.PID, error) {
	n := r.inflight.Load()
	var pid *actor.PID
	found := 0
	r.relays.Range(func(_, v any) bool {
		pid = v.(*actor.PID)
		found++
		return found < 2
	})
	switch {
	case r.oneClient && found > 0:
		return pid, nil // every call in flight is the same client's
	case n == 0:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: method + " outside of a tool call: the aggregator relays a backend's requests only to the client whose call is in flight"}
	case n > 1 || found > 1:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s during %d concurrent tool calls on the aggregator's shared session: it cannot tell which client the request is for", method, n)}
	case found == 0:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + ": the client of the call in flight did not declare the capability"}
	}
	return pid, nil
}

// relayHandlers are the client options that pass a backend's elicitation and sampling requests and its log
// messages to the client of the call in flight on the session r tracks; log messages beyond the server's rate are
// dropped (limit).
func relayHandlers(opts *mcp.ClientOptions, r *relayState, sys *actor.ActorSystem, limit *floodguard.Limiter) {
	opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		var out mcp.ElicitResult
		if err := r.ask(ctx, sys, "elicitation/create", req.Params, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		var out mcp.CreateMessageResult
		if err := r.ask(ctx, sys, "sampling/createMessage", req.Params, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	opts.LoggingMessageHandler = func(_ context.Context, req *mcp.LoggingMessageRequest) {
		pid, ok := r.logTarget()
		if !ok || req.Params == nil {
			return // not attributable to one client: dropped
		}
		if !limit.Allow(floodguard.KindLog) {
			return // beyond the server's rate: dropped and counted
		}
		if raw, err := json.Marshal(req.Params); err == nil {
			sys.Root.Send(pid, &pb.RelayLog{ParamsJson: raw})
		}
	}
}

// relayMiddleware is the receiving middleware of a backend's session that passes on, to the client of the call in
// flight, the two requests the go-sdk client would not hand to a handler as they are: roots/list (the client would
// answer it from its own root list, which is empty: the backend must see the calling client's roots) and an
// elicitation whose schema go-sdk v1.8.0 refuses before any handler runs although SEP-1330 allows it (see
// TitledMultiSelect; the backend that asked validates the answer). Everything else goes on to the handlers.
func relayMiddleware(r *relayState, sys *actor.ActorSystem) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return relayMethod(r, sys, next)
	}
}

func relayMethod(r *relayState, sys *actor.ActorSystem, next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "roots/list":
			var out mcp.ListRootsResult
			if err := r.ask(ctx, sys, method, req.GetParams(), &out); err != nil {
				return nil, err
			}
			if out.Roots == nil {
				out.Roots = []*mcp.Root{}
			}
			return &out, nil
		case "elicitation/create":
			if p, ok := req.GetParams().(*mcp.ElicitParams); ok && p != nil && TitledMultiSelect(p.RequestedSchema) {
				var out mcp.ElicitResult
				if err := r.ask(ctx, sys, method, p, &out); err != nil {
					return nil, err
				}
				return &out, nil
			}
		}
		return next(ctx, method, req)
	}
}

// ask sends a backend's request to the client of the call in flight and decodes the answer into out.
func (r *relayState) ask(ctx context.Context, sys *actor.ActorSystem, method string, params any, out any) error {
	r.asked.Store(true)
	pid, err := r.target(method)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	timeout := r.timeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	deadline := time.Now().Add(timeout)
	var tried []*actor.PID
	for {
		res, err := sys.Root.RequestFuture(pid, &pb.RelayRequest{Method: method, ParamsJson: raw}, time.Until(deadline)).Result()
		if err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s: the client did not answer: %v", method, err)}
		}
		reply, ok := res.(*pb.RelayReply)
		if !ok {
			return fmt.Errorf("unexpected reply %T to %s", res, method)
		}
		if reply.Error == "" {
			return json.Unmarshal(reply.ResultJson, out)
		}
		code := reply.RpcCode
		if code == 0 {
			code = jsonrpc.CodeInternalError
		}
		// On a client's own session any of its calls in flight can carry the request, but the one picked may have
		// answered meanwhile (over streamable HTTP the request then has no stream to go on: -32005): another one
		// of the client's calls still in flight carries it.
		if r.oneClient && code == codeRejected {
			tried = append(tried, pid)
			if next := r.another(tried); next != nil {
				pid = next
				continue
			}
		}
		return &jsonrpc.Error{Code: code, Message: reply.Error}
	}
}

// codeRejected is the go-sdk's code for a message its transport refused (a closed stream among others).
const codeRejected = -32005

// another is a call in flight other than those tried, nil when none.
func (r *relayState) another(tried []*actor.PID) *actor.PID {
	var out *actor.PID
	r.relays.Range(func(_, v any) bool {
		pid := v.(*actor.PID)
		if slices.ContainsFunc(tried, pid.Equal) {
			return true
		}
		out = pid
		return false
	})
	return out
}

// Relay answers a backend's requests to its client during a call, and takes its log messages: the session of the
// client that made the call (see WithRelay).
type Relay interface {
	// Supports reports whether the client declared what method needs (elicitation/create, sampling/createMessage,
	// roots/list).
	Supports(method string) bool
	Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	ListRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
	Log(ctx context.Context, p *mcp.LoggingMessageParams)
}

type relayKey struct{}

// RelayClient is a Relay that can name its client session: the calls of one client session name the same key
// (unique on its node), so that a backend which sends requests gets a session per client (see relay_client).
type RelayClient interface {
	ClientKey() string
}

// WithRelay makes the tool calls made with ctx relay their backend's requests and log messages to r.
func WithRelay(ctx context.Context, r Relay) context.Context {
	return context.WithValue(ctx, relayKey{}, r)
}

// AttachRelay gives a call a relay actor when its caller has a Relay; the returned function stops it (nil: none).
// Most relayed calls never hear from their backend (a client that declares roots, as the go-sdk's does by
// default, has every call relayed), so the actor is spawned only when the backend first asks or logs something:
// until then the call's relay PID names a lazyRelay, a bare process in the registry (no mailbox, no goroutine).
//
// later runs the relay's end after relayGrace (nil: a timer of the call's own); one for the node, so that a call
// does not cost a timer and a goroutine of its own for it (issue 26).
func AttachRelay(ctx context.Context, sys *actor.ActorSystem, call *pb.CallTool, later *gopool.Later) func() {
	r, ok := ctx.Value(relayKey{}).(Relay)
	if !ok || r == nil {
		return nil
	}
	rctx := context.WithoutCancel(ctx)
	lazy := &lazyRelay{reg: sys.ProcessRegistry}
	lazy.spawn = func() *actor.PID {
		return sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *pb.RelayRequest:
				sender, root := c.Sender(), c.ActorSystem().Root
				go func() {
					// A task's backend asking for input makes the task input_required until answered (issue 30).
					answered, qctx := func() {}, rctx
					if watch := tasks.InputWatch(rctx); watch != nil && (m.Method == "elicitation/create" || m.Method == "sampling/createMessage") {
						m.ParamsJson = relatedToTask(m.ParamsJson, tasks.TaskID(rctx))
						qctx, answered = watch(rctx, m.Method, m.ParamsJson)
					}
					reply := runRelay(qctx, r, m)
					answered() // before the backend hears the answer: the task works again
					if sender != nil {
						root.Send(sender, reply)
					}
				}()
			case *pb.RelayLog:
				var p mcp.LoggingMessageParams
				if json.Unmarshal(m.ParamsJson, &p) == nil {
					// While the call runs, with its context (over streamable HTTP the message goes on the call's
					// own stream, before the result); once it has answered, that stream is gone: the session's own.
					lctx := rctx
					if lazy.done.Load() {
						lctx = context.Background()
					}
					r.Log(lctx, &p)
				}
			}
		}))
	}
	pid, _ := sys.ProcessRegistry.Add(lazy, "relay"+sys.ProcessRegistry.NextId())
	call.RelayTo = &pb.PID{Address: pid.Address, Id: pid.Id}
	if c, ok := r.(RelayClient); ok {
		if key := c.ClientKey(); key != "" {
			call.RelayClient = sys.Address() + "/" + key
		}
	}
	// Kept for relayGrace after the call (the actor, if any, then poisoned, so what is queued is still delivered):
	// a log message the backend sent just before its result may arrive just after it.
	root := sys.Root
	return func() {
		lazy.done.Store(true)
		end := func() {
			sys.ProcessRegistry.Remove(pid)
			if actorPID := lazy.spawned(); actorPID != nil {
				root.Poison(actorPID)
			}
		}
		if later != nil {
			later.After(end)
		} else {
			time.AfterFunc(relayGrace, end)
		}
	}
}

// relatedToTask is a relayed request's params tied to the caller's task id (its
// _meta["io.modelcontextprotocol/related-task"], which the 2025-11-25 tasks revision asks of a task's requests):
// the backend tied them to its own task, whose id the client does not know. params is returned unchanged when it
// is not a JSON object or id is empty.
func relatedToTask(params json.RawMessage, id string) json.RawMessage {
	if id == "" {
		return params
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(params, &doc) != nil || doc == nil {
		return params
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(doc["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[tasks.RelatedTaskMetaKey], _ = json.Marshal(map[string]string{"taskId": id})
	var err error
	if doc["_meta"], err = json.Marshal(meta); err != nil {
		return params
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return params
	}
	return out
}

// lazyRelay is the process a call's relay PID names: it spawns the call's relay actor on the first message and
// hands it every message, in the order they come (envelopes intact, so a request's answer goes to its sender).
type lazyRelay struct {
	reg   *actor.ProcessRegistryValue
	spawn func() *actor.PID
	once  sync.Once
	pid   atomic.Pointer[actor.PID]
	done  atomic.Bool // the call answered
}

func (l *lazyRelay) target() (*actor.PID, actor.Process) {
	l.once.Do(func() { l.pid.Store(l.spawn()) })
	pid := l.pid.Load()
	proc, _ := l.reg.Get(pid)
	return pid, proc
}

// spawned is the relay actor, nil when none was needed; no message spawns one after it was asked.
func (l *lazyRelay) spawned() *actor.PID {
	l.once.Do(func() {})
	return l.pid.Load()
}

func (l *lazyRelay) SendUserMessage(self *actor.PID, message any) {
	pid, proc := l.target()
	if pid == nil { // too late: the call's relay is gone
		l.reg.ActorSystem.DeadLetter.SendUserMessage(self, message)
		return
	}
	proc.SendUserMessage(pid, message)
}

func (l *lazyRelay) SendSystemMessage(_ *actor.PID, message any) {
	if pid := l.pid.Load(); pid != nil {
		if proc, ok := l.reg.Get(pid); ok {
			proc.SendSystemMessage(pid, message)
		}
	}
}

func (l *lazyRelay) Stop(pid *actor.PID) { l.reg.Remove(pid) }

// runRelay has the client answer one backend request.
func runRelay(ctx context.Context, r Relay, m *pb.RelayRequest) *pb.RelayReply {
	if !r.Supports(m.Method) {
		return &pb.RelayReply{Error: m.Method + ": the client did not declare the capability", RpcCode: jsonrpc.CodeMethodNotFound}
	}
	var res any
	var err error
	switch m.Method {
	case "elicitation/create":
		var p mcp.ElicitParams
		if err = json.Unmarshal(m.ParamsJson, &p); err == nil {
			res, err = r.Elicit(ctx, &p)
		}
	case "sampling/createMessage":
		var p mcp.CreateMessageParams
		if err = json.Unmarshal(m.ParamsJson, &p); err == nil {
			res, err = r.CreateMessage(ctx, &p)
		}
	case "roots/list":
		var p mcp.ListRootsParams
		if err = json.Unmarshal(m.ParamsJson, &p); err == nil {
			res, err = r.ListRoots(ctx, &p)
		}
	default:
		return &pb.RelayReply{Error: "not relayed: " + m.Method, RpcCode: jsonrpc.CodeMethodNotFound}
	}
	if err != nil {
		reply := &pb.RelayReply{Error: err.Error()}
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			reply.RpcCode, reply.Error = rpcErr.Code, rpcErr.Message
		}
		return reply
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return &pb.RelayReply{Error: err.Error()}
	}
	return &pb.RelayReply{ResultJson: raw}
}

// backendLogging asks a backend that declares logging for every level, so that its log messages during a call can
// reach the caller (whose session then applies the level its client set); off the mailbox.
func (a *serverActor) backendLogging(sess *mcp.ClientSession) <-chan struct{} {
	return backendLogging(sess, a.deps.Config.RequestTimeout, a.log())
}

// backendLogging asks a backend that logs to send every level (its messages are relayed to the clients whose calls
// they belong to, and a go-sdk backend sends none before a level is set), off the caller's goroutine. The channel
// closes once the backend answered (or refused, or timeout passed).
func backendLogging(sess *mcp.ClientSession, timeout time.Duration, log interface{ Info(string, ...any) }) <-chan struct{} {
	done := make(chan struct{})
	init := sess.InitializeResult()
	if init == nil || init.Capabilities == nil || init.Capabilities.Logging == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			log.Info("backend refused logging/setLevel; its log messages are not relayed", "error", err)
		}
	}()
	return done
}
