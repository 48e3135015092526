package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
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
// the feed or at the owner's first task request here, tasks.Manager's catch-up of a caller new to this node; or the
// owner reading the task here with tasks/get or tasks/result), reads the pending request from the
// task's row and sends it to a session of the owner here that declared what the request needs (the one that read
// the task first), like ownerRelay. The session's answer goes to the node running the task (tasks.Manager.Answer),
// where the request takes the first answer from any node; a later one is dropped. The request here is withdrawn
// (its context cancelled, the go-sdk tells the client) when the task is heard to move on.
//
// Until then the task stays one this node waits on (remoteInputs.waiting): when the owner had no session here that
// could answer, or the sessions here that got the request went away without answering (as the one on the node
// running the task may have), the request is sent to the next session of the owner that serves a task request here
// (noteTaskSession), as the node running the task does with its own sessions (ownerRelay).

// remoteInputs are the pending requests of other nodes' tasks this endpoint relays now, by task id and input key,
// and the other nodes' tasks heard input_required, by owner, that a new session of the owner here is asked about.
type remoteInputs struct {
	mu      sync.Mutex
	m       map[string]remoteInput
	waiting map[string]map[string]time.Time // owner -> task id -> the task's expiry
	size    int                             // the tasks in waiting
	prune   int                             // the size past which wait forgets the expired ones
}

type remoteInput struct {
	key    string
	cancel context.CancelFunc
}

// minWaitingPrune is the smallest size of remoteInputs.waiting at which wait looks for expired tasks.
const minWaitingPrune = 256

func newRemoteInputs() *remoteInputs {
	return &remoteInputs{m: map[string]remoteInput{}, waiting: map[string]map[string]time.Time{}, prune: minWaitingPrune}
}

// wait records that t, another node's task, is input_required: a session of its owner that comes here is asked.
func (r *remoteInputs) wait(t persistence.Task) {
	expires := t.ExpiresAt
	if expires.IsZero() { // an announced task: CreatedAt + TTL
		expires = t.CreatedAt.Add(t.TTL)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tasks := r.waiting[t.Owner]
	if tasks == nil {
		tasks = map[string]time.Time{}
		r.waiting[t.Owner] = tasks
	}
	if _, ok := tasks[t.ID]; !ok {
		r.size++
	}
	tasks[t.ID] = expires
	if r.size <= r.prune {
		return
	}
	now := time.Now()
	for owner, tasks := range r.waiting {
		for id, exp := range tasks {
			if now.After(exp) {
				delete(tasks, id)
				r.size--
			}
		}
		if len(tasks) == 0 {
			delete(r.waiting, owner)
		}
	}
	r.prune = max(2*r.size, minWaitingPrune)
}

// unwait forgets t (it moved on, or is not another node's).
func (r *remoteInputs) unwait(owner, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tasks, ok := r.waiting[owner]; ok {
		if _, ok := tasks[id]; ok {
			delete(tasks, id)
			r.size--
		}
		if len(tasks) == 0 {
			delete(r.waiting, owner)
		}
	}
}

// waitingFor lists owner's tasks heard input_required that have not expired.
func (r *remoteInputs) waitingFor(owner string) []string {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, exp := range r.waiting[owner] {
		if now.Before(exp) {
			ids = append(ids, id)
		}
	}
	return ids
}

// remoteInputStatus is the Manager's hook (with notifyTaskStatus): a task of another node that became
// input_required has its pending request relayed here (and is asked about again when a session of its owner comes);
// one that moved on has the request relayed here withdrawn.
func (s *Server) remoteInputStatus(t persistence.Task) {
	if t.Status != persistence.TaskInputRequired {
		s.remote.unwait(t.Owner, t.ID)
		s.remote.mu.Lock()
		if r, ok := s.remote.m[t.ID]; ok {
			r.cancel()
			delete(s.remote.m, t.ID)
		}
		s.remote.mu.Unlock()
		return
	}
	if m := s.opts.Tasks; m == nil || t.Node == m.Node() {
		return // (an announced task names no node: relayRemoteInput reads it)
	}
	s.remote.wait(t)
	s.relayRemoteInput(t, "")
}

// relayWaiting asks sid, a session of owner that just served a task request here, about the pending requests of
// owner's tasks running on other nodes that this node heard input_required (relayRemoteInput: each is read from
// the store; one relayed here already goes on to the sessions it may still ask, sid's among them).
func (s *Server) relayWaiting(owner, sid string) {
	for _, id := range s.remote.waitingFor(owner) {
		s.relayRemoteInput(persistence.Task{ID: id, Owner: owner, Status: persistence.TaskInputRequired}, sid)
	}
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
			owner, id := t.Owner, t.ID
			var err error
			if t, err = m.Lookup(ctx, id); err != nil || t.Status != persistence.TaskInputRequired || t.Node == m.Node() {
				if err == nil || errors.Is(err, persistence.ErrNotFound) {
					s.remote.unwait(owner, id) // it moved on (or is this node's): no longer one to ask about
				}
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
