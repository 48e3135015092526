package mcpserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/persistence"
)

// Task status on a 2026-07-28 subscriptions/listen stream (the tasks extension). A client listens for its tasks'
// status by naming them in the listen request (params.notifications.taskIds, as the ext-tasks package's
// contributeTaskFilterV2 writes it); the acknowledgement names those the server agreed to (the caller's own
// tasks: readAcceptedTaskIdsV2 reads them there), and each status change of one of them is sent on the stream as
// notifications/tasks (the task as tasks/get shows it, DetailedTask, stamped with the stream's subscription id).
//
// The go-sdk knows no taskIds (its NotificationSubscriptions drops the field) and sends no notification it does
// not know (tasks_notify.go), so:
//
//   - a listen that asks for task status only is served here: the answer is an event stream whose first event is
//     the acknowledgement, then the current status of each accepted task (a task that changed between its creation
//     and the listen is not missed), then notifications/tasks as they come, until the client closes the stream or
//     the endpoint closes (then the listen's answer ends it; the go-sdk would end such a listen at once: it holds a
//     stream only for the notifications it knows). A listen that names none of the caller's tasks ends at once;
//   - a listen that asks for list changes too goes to the go-sdk through a tap of its stream (listenTap), which adds
//     the accepted taskIds to the go-sdk's acknowledgement as it is written and takes notifications/tasks between
//     the go-sdk's events.

// maxListenTasks bounds the tasks one listen may name; maxTaskListens the listens for task status a caller may
// hold open on this node (the ones served here count against no session cap).
const (
	maxListenTasks = 100
	maxTaskListens = 16
)

// taskListener is an open listen stream that takes the status of some tasks.
type taskListener struct {
	owner string
	ids   map[string]bool
	sub   json.RawMessage // the subscription id: the listen request's id

	mu  sync.Mutex
	out taskStream // nil until the stream is open: what is told before is not sent (the current status follows)
}

// setOut opens the listener's stream: what is told from now on is written to out.
func (l *taskListener) setOut(out taskStream) {
	l.mu.Lock()
	l.out = out
	l.mu.Unlock()
}

// taskListeners are the open listen streams for task status on this endpoint.
type taskListeners struct {
	mu sync.Mutex
	ls map[*taskListener]struct{}
}

func newTaskListeners() *taskListeners { return &taskListeners{ls: map[*taskListener]struct{}{}} }

// listenParams is what a subscriptions/listen asks for, as read here.
type listenParams struct {
	Notifications map[string]json.RawMessage `json:"notifications"`
}

// taskIDs are the tasks the listen names (nil: none), and whether it asks for anything else.
func (p listenParams) taskIDs() (ids []string, others bool) {
	for k, v := range p.Notifications {
		if k != "taskIds" {
			if string(v) != "false" && string(v) != "null" && string(v) != "[]" {
				others = true
			}
			continue
		}
		_ = json.Unmarshal(v, &ids)
	}
	return ids, others
}

// serveTaskListen serves a 2026-07-28 subscriptions/listen that names tasks (see above); false: it names none, and
// next serves it.
func (s *Server) serveTaskListen(w http.ResponseWriter, r *http.Request, req rpcRequest, next http.Handler) bool {
	var p listenParams
	if json.Unmarshal(req.Params, &p) != nil {
		return false
	}
	asked, others := p.taskIDs()
	if len(asked) == 0 {
		return false
	}
	ctx := r.Context()
	id, ok := s.callerOf(ctx, nil)
	var accepted []string
	var current []persistence.Task
	if ok {
		seen := map[string]bool{}
		for _, tid := range asked {
			if len(accepted) == maxListenTasks || seen[tid] {
				continue
			}
			seen[tid] = true
			if t, err := s.opts.Tasks.GetOwn(ctx, id, tid); err == nil { // another caller's task is not agreed to
				accepted = append(accepted, tid)
				current = append(current, t)
				s.opts.Tasks.Follow(t) // caught up on after a break of the feed, whichever its age
			}
		}
	}
	l := &taskListener{owner: tasks.Owner(id), ids: map[string]bool{}, sub: req.ID}
	for _, tid := range accepted {
		l.ids[tid] = true
	}
	if accepted == nil {
		accepted = []string{}
	}
	limit := maxTaskListens
	if !ok {
		limit = 0 // a caller without an identity names no task of its own: nothing to bound
	}
	// Admitted before the acknowledgement is written, so a client that has read it and opens another listen finds
	// this one counted; the check and the add are one step, so concurrent listens cannot pass the cap together.
	if !s.listeners.admit(l, limit) {
		writeRPC(w, req.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "Too many listen streams for task status are open; close one first"})
		return true
	}
	defer s.listeners.remove(l)
	if others {
		tap := &listenTap{streamTap: &streamTap{ResponseWriter: w}, accepted: accepted}
		for _, t := range current {
			if msg := taskNotification(t, req.ID); msg != nil {
				tap.current = append(tap.current, msg)
			}
		}
		l.setOut(tap)
		next.ServeHTTP(tap, r)
		return true
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	tap := &streamTap{ResponseWriter: w}
	tap.WriteHeader(http.StatusOK)
	ack, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
		"params": map[string]any{"_meta": map[string]any{mcp.MetaKeySubscriptionID: req.ID},
			"notifications": map[string]any{"taskIds": accepted}}})
	if err != nil {
		return true
	}
	tap.inject(ack)
	l.setOut(tap)
	for _, t := range current {
		l.tell(t)
	}
	if len(accepted) > 0 { // else there is nothing to listen for: the listen ends at once, as the go-sdk's does
		select {
		case <-ctx.Done():
			return true
		case <-s.done:
		}
	}
	if end, err := json.Marshal(rpcAnswer(req.ID, map[string]any{"resultType": "complete",
		"_meta": map[string]any{mcp.MetaKeySubscriptionID: req.ID}}, nil)); err == nil {
		tap.inject(end) // the listen's answer: the subscription ended (the endpoint is closing)
	}
	return true
}

// tell sends t's status on the listener's stream.
func (l *taskListener) tell(t persistence.Task) {
	l.mu.Lock()
	out := l.out
	l.mu.Unlock()
	if out == nil {
		return
	}
	if msg := taskNotification(t, l.sub); msg != nil {
		out.inject(msg)
	}
}

// taskNotification is notifications/tasks for t on the listen stream sub (nil when it cannot be encoded).
func taskNotification(t persistence.Task, sub json.RawMessage) []byte {
	raw, err := json.Marshal(modernWire(t))
	if err != nil {
		return nil
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(raw, &params) != nil {
		return nil
	}
	delete(params, "resultType")
	params["_meta"] = mustJSON(map[string]any{mcp.MetaKeySubscriptionID: sub})
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks", "params": params})
	if err != nil {
		return nil
	}
	return msg
}

// admit adds l unless its owner already holds limit open listens (limit 0: no bound), and says whether it did.
func (t *taskListeners) admit(l *taskListener, limit int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if limit > 0 {
		n := 0
		for o := range t.ls {
			if o.owner == l.owner {
				n++
			}
		}
		if n >= limit {
			return false
		}
	}
	t.ls[l] = struct{}{}
	return true
}

func (t *taskListeners) remove(l *taskListener) {
	t.mu.Lock()
	delete(t.ls, l)
	t.mu.Unlock()
}

// notifyTaskListeners sends notifications/tasks for t to the listen streams that named it (its owner's).
func (s *Server) notifyTaskListeners(t persistence.Task) {
	var to []*taskListener
	s.listeners.mu.Lock()
	for l := range s.listeners.ls {
		if l.owner == t.Owner && l.ids[t.ID] {
			to = append(to, l)
		}
	}
	s.listeners.mu.Unlock()
	for _, l := range to {
		l.tell(t)
	}
}

// listenTap is the ResponseWriter of a listen the go-sdk serves that also names tasks: the go-sdk's
// acknowledgement gets the accepted taskIds as it is written, and is followed by the tasks' current status.
type listenTap struct {
	*streamTap
	accepted []string
	current  [][]byte // notifications/tasks of the accepted tasks as they were at the listen
	acked    bool
}

func (w *listenTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acked || !bytes.Contains(p, []byte(`"notifications/subscriptions/acknowledged"`)) {
		return w.ResponseWriter.Write(p)
	}
	w.acked = true
	if _, err := w.ResponseWriter.Write(w.withTaskIDs(p)); err != nil {
		return 0, err
	}
	for _, msg := range w.current {
		if _, err := w.ResponseWriter.Write(append(append([]byte("event: message\ndata: "), msg...), "\n\n"...)); err != nil {
			return 0, err
		}
	}
	w.current = nil
	return len(p), nil
}

// withTaskIDs is the acknowledgement event p with the accepted taskIds in its notifications.
func (w *listenTap) withTaskIDs(p []byte) []byte {
	i := bytes.Index(p, []byte("data: "))
	if i < 0 {
		return p
	}
	head, data := p[:i+len("data: ")], bytes.TrimSpace(p[i+len("data: "):])
	var msg struct {
		JSONRPC string                     `json:"jsonrpc"`
		Method  string                     `json:"method"`
		Params  map[string]json.RawMessage `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Params == nil {
		return p
	}
	var n map[string]any
	if json.Unmarshal(msg.Params["notifications"], &n) != nil || n == nil {
		n = map[string]any{}
	}
	n["taskIds"] = w.accepted
	msg.Params["notifications"] = mustJSON(n)
	out, err := json.Marshal(msg)
	if err != nil {
		return p
	}
	return append(append(append([]byte(nil), head...), out...), "\n\n"...)
}
