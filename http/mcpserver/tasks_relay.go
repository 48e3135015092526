package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway/tasks"
)

// A task's backend requests (input_required: elicitation, sampling, roots) go to the client session that started
// the task (2025-11-25). That session may go away while the task runs (its client closed it, it idled out): the
// task's owner may have other sessions, and the request is then sent again to one of them (ownerRelay). The
// sessions of an owner are those that served one of its task requests on this node (ownerSessions): the session
// that started a task, and those that read a task (tasks/get, tasks/result, tasks/list) or cancelled one.

// ownerRetry is how often a request whose sessions all went away looks again for a session of the task's owner.
const ownerRetry = 250 * time.Millisecond

// ownerSessions are the sessions (streamable; SSE and stdio by our id for them), by id, that served task requests
// of each owner on this node.
type ownerSessions struct {
	mu    sync.Mutex
	owner map[string]string // session id -> owner (tasks.Owner)
	prune int               // the size past which note forgets the sessions that ended
}

// minOwnerPrune is the smallest size of ownerSessions at which note looks for sessions that ended.
const minOwnerPrune = 64

func newOwnerSessions() *ownerSessions {
	return &ownerSessions{owner: map[string]string{}, prune: minOwnerPrune}
}

// noteTaskSession records that session sid served a task request of owner; a session new to owner is asked about
// the pending requests of owner's tasks on other nodes this node heard input_required (relayWaiting,
// tasks_remote.go). Past a size (twice what was live at the last look), the sessions that ended are forgotten.
func (s *Server) noteTaskSession(sid, owner string) {
	if sid == "" {
		return
	}
	if s.noteOwnerSession(sid, owner) {
		s.relayWaiting(owner, sid)
	}
}

// noteOwnerSession is noteTaskSession's record; it reports whether sid is new to owner.
func (s *Server) noteOwnerSession(sid, owner string) bool {
	o := s.taskSessions
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.owner[sid] == owner {
		return false
	}
	o.owner[sid] = owner
	if len(o.owner) <= o.prune {
		return true
	}
	live := map[string]bool{}
	for ss := range s.mcp.Sessions() {
		live[ss.ID()] = true
	}
	for id := range o.owner {
		if !live[id] && !s.streams.has(id) { // an SSE session lives while its stream does (tasks_sse.go)
			delete(o.owner, id)
		}
	}
	o.prune = max(2*len(o.owner), minOwnerPrune)
	return true
}

// sessionOf is a live session of owner, other than those in skip, whose client declared what method needs; nil
// when there is none. Sessions that ended are forgotten on the way.
func (s *Server) sessionOf(owner, method string, skip map[*mcp.ServerSession]bool) *mcp.ServerSession {
	live := s.fronts.sessions() // the SSE and stdio sessions, by our id for them (tasks_front.go)
	for ss := range s.mcp.Sessions() {
		if id := ss.ID(); id != "" {
			live[id] = ss
		}
	}
	o := s.taskSessions
	o.mu.Lock()
	defer o.mu.Unlock()
	var pick *mcp.ServerSession
	for sid, who := range o.owner {
		ss, ok := live[sid]
		if !ok {
			if !s.streams.has(sid) { // an SSE session lives while its stream does (tasks_sse.go), before its initialize too
				delete(o.owner, sid)
			}
			continue
		}
		if pick == nil && who == owner && !skip[ss] && (sessionRelay{ss}).Supports(method) {
			pick = ss
		}
	}
	return pick
}

// alive reports whether the go-sdk still serves ss.
func (s *Server) alive(ss *mcp.ServerSession) bool {
	for live := range s.mcp.Sessions() {
		if live == ss {
			return true
		}
	}
	return false
}

// ownerRelay is the actors.Relay of a 2025-11-25 task's call: the session that started the task, then, when it
// went away with a request pending or before the backend asked, another session of the task's owner (the same
// request sent again; the backend waits for one answer). With no such session, the request waits for one while
// the task runs (its row says input_required with the request, so a client that comes back sees why).
type ownerRelay struct {
	s     *Server
	first sessionRelay
	owner string
	task  string
	ttl   time.Duration
}

func (r *ownerRelay) Supports(method string) bool { return r.first.Supports(method) }
func (r *ownerRelay) ClientKey() string           { return r.first.ClientKey() }

// Log goes to the session that started the task while it lives.
func (r *ownerRelay) Log(ctx context.Context, p *mcp.LoggingMessageParams) { r.first.Log(ctx, p) }

func (r *ownerRelay) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return sendToOwner(ctx, r, "elicitation/create", func(ctx context.Context, sr sessionRelay) (*mcp.ElicitResult, error) {
		return sr.Elicit(ctx, p)
	})
}

func (r *ownerRelay) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	return sendToOwner(ctx, r, "sampling/createMessage", func(ctx context.Context, sr sessionRelay) (*mcp.CreateMessageResult, error) {
		return sr.CreateMessage(ctx, p)
	})
}

func (r *ownerRelay) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	return sendToOwner(ctx, r, "roots/list", func(ctx context.Context, sr sessionRelay) (*mcp.ListRootsResult, error) {
		return sr.ListRoots(ctx, p)
	})
}

// sendOn sends a request on ss with a context its session's DELETE cancels (as it cancels the session's calls):
// the go-sdk's session close waits for its requests in flight. gone reports that the session ended first.
func sendOn[T any](ctx context.Context, s *Server, ss *mcp.ServerSession, send func(context.Context, sessionRelay) (T, error)) (res T, err error, gone bool) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &inflightCall{session: ss.ID(), cancel: cancel}
	t := s.sessions
	t.mu.Lock()
	t.calls[c] = struct{}{}
	t.mu.Unlock()
	defer t.untrack(c)
	res, err = send(cctx, sessionRelay{ss})
	if err != nil && ((cctx.Err() != nil && ctx.Err() == nil) || !s.alive(ss)) {
		return res, err, true
	}
	return res, err, false
}

// sendToOwner sends a request to the session that started the task and, each time the session it went to ends
// without an answer, to another live session of the owner that declared what method needs; for as long as the
// task runs here (at most its TTL). Meanwhile the request also takes an answer that a session of the owner on
// another node gave (that node relays the task's pending request to it: tasks_remote.go; the answer reaches this
// node through tasks.Manager.Answer and TakeInput): the first answer wins, and the request to a session here is
// then withdrawn.
func sendToOwner[T any](ctx context.Context, r *ownerRelay, method string, send func(context.Context, sessionRelay) (T, error)) (T, error) {
	var zero T
	key := tasks.InputKey(ctx) // set for the requests the task's row stores (elicitation, sampling)
	if key == "" || r.task == "" {
		return sendToOwnerHere(ctx, r, method, send)
	}
	remote, stop := r.s.opts.Tasks.AwaitInput(r.owner, r.task, key)
	defer stop()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel() // withdraws the request sent here when the answer came from another node
	type answer struct {
		res T
		err error
	}
	local := make(chan answer, 1)
	go func() {
		res, err := sendToOwnerHere(lctx, r, method, send)
		local <- answer{res, err}
	}()
	select {
	case a := <-local:
		return a.res, a.err
	case raw := <-remote:
		var res T
		if err := json.Unmarshal(raw, &res); err != nil {
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the client's response does not fit " + method + ": " + err.Error()}
		}
		return res, nil
	}
}

// sendToOwnerHere is sendToOwner's part on this node: the sessions of the owner here.
func sendToOwnerHere[T any](ctx context.Context, r *ownerRelay, method string, send func(context.Context, sessionRelay) (T, error)) (T, error) {
	var zero T
	tried := map[*mcp.ServerSession]bool{}
	ss := r.first.ss
	deadline := time.Now().Add(r.ttl)
	var done <-chan struct{}
	if r.task != "" {
		done = r.s.opts.Tasks.Done(r.task)
	}
	for {
		if ss != nil && !tried[ss] && r.s.alive(ss) {
			res, err, gone := sendOn(ctx, r.s, ss, send)
			switch {
			case !gone && !rejected(err):
				return res, err // the client's answer (or its error: a live session answered)
			case gone:
				r.s.log.Info("a task's session went away with a request pending; sending it to another session of the owner",
					"task", r.task, "method", method, "session", ss.ID())
			default:
				r.s.log.Info("a task's session has no stream open to take its request; waiting for another session of the owner",
					"task", r.task, "method", method, "session", ss.ID())
			}
		}
		tried[ss] = true
		if ss = r.s.sessionOf(r.owner, method, tried); ss != nil {
			continue
		}
		if !time.Now().Before(deadline) {
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no session of the task's owner to answer " + method}
		}
		select {
		case <-done:
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task ended"}
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(ownerRetry):
		}
	}
}

// rejected reports whether err is the go-sdk's refusal to send a request on a session with no stream open to carry
// it (a client that never opened its standalone stream): the client did not see the request, and another session
// (or another node's: tasks_remote.go) may answer it.
func rejected(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je) && je.Code == codeRejectedByTransport
}

// codeRejectedByTransport is the code of the go-sdk's "rejected by transport" error (its internal jsonrpc2's
// ErrRejected), which a session answers a request it could not deliver with.
const codeRejectedByTransport = -32005

// withOwnerRelay relays the backend's requests during a task's call to ss, the session that started the task, or
// another session of the task's owner (ownerRelay), when ss's client declared elicitation, sampling or roots.
func (s *Server) withOwnerRelay(ctx context.Context, ss *mcp.ServerSession, owner string, ttl time.Duration) context.Context {
	first := sessionRelay{ss}
	if !first.Supports("elicitation/create") && !first.Supports("sampling/createMessage") && !first.Supports("roots/list") {
		return ctx
	}
	return actors.WithRelay(ctx, &ownerRelay{s: s, first: first, owner: owner, task: tasks.TaskID(ctx), ttl: ttl})
}
