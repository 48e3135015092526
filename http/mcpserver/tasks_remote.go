package mcpserver

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/persistence"
)

// The pending request of a task that runs on another node (2025-11-25). A task's backend request (input_required:
// elicitation, sampling) is sent by the node running the task to the sessions of the task's owner there
// (ownerRelay). A client that comes back through another node would never see it: so this node, when it learns
// that a task of another node waits on its client (the status change announced, or caught up on after a break of
// the feed; or the owner reading the task here with tasks/get or tasks/result), reads the pending request from the
// task's row and sends it to a session of the owner here that declared what the request needs (the one that read
// the task first), like ownerRelay. The session's answer goes to the node running the task (tasks.Manager.Answer),
// where the request takes the first answer from any node; a later one is dropped. The request here is withdrawn
// (its context cancelled, the go-sdk tells the client) when the task is heard to move on.

// remoteInputs are the pending requests of other nodes' tasks this endpoint relays now, by task id and input key.
type remoteInputs struct {
	mu sync.Mutex
	m  map[string]remoteInput
}

type remoteInput struct {
	key    string
	cancel context.CancelFunc
}

func newRemoteInputs() *remoteInputs { return &remoteInputs{m: map[string]remoteInput{}} }

// remoteInputStatus is the Manager's hook (with notifyTaskStatus): a task of another node that became
// input_required has its pending request relayed here; one that moved on has the request relayed here withdrawn.
func (s *Server) remoteInputStatus(t persistence.Task) {
	if t.Status != persistence.TaskInputRequired {
		s.remote.mu.Lock()
		if r, ok := s.remote.m[t.ID]; ok {
			r.cancel()
			delete(s.remote.m, t.ID)
		}
		s.remote.mu.Unlock()
		return
	}
	s.relayRemoteInput(t, "")
}

// relayRemoteInput relays the pending request of t, when t is input_required on another node, to a session of its
// owner here: preferably sid's. t may lack its pending request (an announced status): it is read from the store.
func (s *Server) relayRemoteInput(t persistence.Task, sid string) {
	m := s.opts.Tasks
	if m == nil || t.Status != persistence.TaskInputRequired || t.Node == m.Node() {
		return // (an announced task names no node: read below)
	}
	if !s.hasOwnerSession(t.Owner) {
		return // nobody here to ask
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if len(t.InputRequest) == 0 || t.Node == "" {
			var err error
			if t, err = m.Lookup(ctx, t.ID); err != nil || t.Status != persistence.TaskInputRequired || t.Node == m.Node() {
				return
			}
		}
		key, method, params, ok := tasks.PendingInput(t)
		if !ok {
			return
		}
		rctx, stop := context.WithDeadline(context.Background(), t.ExpiresAt)
		s.remote.mu.Lock()
		if r, ok := s.remote.m[t.ID]; ok && r.key == key {
			s.remote.mu.Unlock()
			stop()
			return // relayed here already
		} else if ok {
			r.cancel() // an earlier request of the task, answered meanwhile
		}
		s.remote.m[t.ID] = remoteInput{key: key, cancel: stop}
		s.remote.mu.Unlock()
		defer func() {
			stop()
			s.remote.mu.Lock()
			if r, ok := s.remote.m[t.ID]; ok && r.key == key {
				delete(s.remote.m, t.ID)
			}
			s.remote.mu.Unlock()
		}()
		answer, ok := s.askOwnerHere(rctx, t.Owner, sid, method, params)
		if !ok {
			return
		}
		if _, err := m.Answer(rctx, t, key, answer); err != nil {
			s.log.Warn("a task's input answer did not reach the node running the task", "task", t.ID, "node", t.Node, "error", err)
		}
	}()
}

// hasOwnerSession reports whether a session of owner served a task request here.
func (s *Server) hasOwnerSession(owner string) bool {
	o := s.taskSessions
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, who := range o.owner {
		if who == owner {
			return true
		}
	}
	return false
}

// askOwnerHere sends the request (method, params) to a session of owner here that declared what method needs,
// sid's first, and to another each time the one it went to ends without answering; it returns the answer as JSON.
// false: no session (or none left) to ask, the request's error, or ctx ended.
func (s *Server) askOwnerHere(ctx context.Context, owner, sid, method string, params json.RawMessage) (json.RawMessage, bool) {
	send, ok := remoteSend(method, params)
	if !ok {
		return nil, false
	}
	tried := map[*mcp.ServerSession]bool{}
	ss := s.sessionByID(sid)
	for ctx.Err() == nil {
		if ss == nil || tried[ss] || !(sessionRelay{ss}).Supports(method) || !s.alive(ss) {
			if ss != nil {
				tried[ss] = true
			}
			if ss = s.sessionOf(owner, method, tried); ss == nil {
				return nil, false
			}
			continue
		}
		tried[ss] = true
		res, err, gone := sendOn(ctx, s, ss, send)
		if gone || rejected(err) {
			continue // the next session of the owner here, if any
		}
		if err != nil {
			s.log.Info("the owner's session here did not answer a task's request of another node", "method", method, "error", err)
			return nil, false
		}
		raw, err := json.Marshal(res)
		return raw, err == nil
	}
	return nil, false
}

// remoteSend is the send of a stored pending request of method with params to a session.
func remoteSend(method string, params json.RawMessage) (func(context.Context, sessionRelay) (any, error), bool) {
	switch method {
	case "elicitation/create":
		var p mcp.ElicitParams
		if json.Unmarshal(params, &p) != nil {
			return nil, false
		}
		return func(ctx context.Context, sr sessionRelay) (any, error) { return sr.Elicit(ctx, &p) }, true
	case "sampling/createMessage":
		var p mcp.CreateMessageParams
		if json.Unmarshal(params, &p) != nil {
			return nil, false
		}
		return func(ctx context.Context, sr sessionRelay) (any, error) { return sr.CreateMessage(ctx, &p) }, true
	}
	return nil, false
}
