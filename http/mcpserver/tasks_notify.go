package mcpserver

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/persistence"
)

// notifications/tasks/status (2025-11-25 tasks): when a task changes status (input_required and back,
// completed, failed, cancelled) on this node, or on another that announced it (tasks.Manager.Announced), the
// sessions of its owner here (ownerSessions: those that served one of its task requests here) that have their
// standalone stream open (the GET of a streamable session, an SSE session's stream, stdout of the stdio session)
// are told, with the task as tasks/get shows it.
//
// The go-sdk cannot send it: ServerSession has no way to send a notification it does not know (its sending
// method handler, go-sdk v1.8.0 mcp/shared.go defaultSendingMethodHandler, looks the method up in the session's
// sendingMethodInfos and answers jsonrpc2.ErrNotHandled for any other; a sending middleware cannot rename a
// notification either, since the lookup happens after it), and its connection is unexported. So the endpoint
// writes the event itself into the session's GET stream: taskRequests wraps that stream's ResponseWriter
// (streamTap), and an event is written whole, between the go-sdk's own events (each of which it writes with one
// Write, event.go writeEvent), under the tap's lock. The event has no id: the go-sdk's stream resumption
// (Last-Event-ID) does not replay it, and a client that polls loses nothing.

// tapWriteTimeout bounds the write of one notification to a client that does not read its stream.
const tapWriteTimeout = 5 * time.Second

// streamTap is the ResponseWriter of a session's standalone stream, into which task notifications are written.
type streamTap struct {
	http.ResponseWriter
	mu      sync.Mutex
	started bool // the go-sdk opened the stream (200, text/event-stream)
	closed  bool
}

func (w *streamTap) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = code == http.StatusOK && w.Header().Get("Content-Type") == "text/event-stream"
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w *streamTap) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *streamTap) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// inject writes one SSE event carrying msg, if the stream is open.
func (w *streamTap) inject(msg []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started || w.closed {
		return
	}
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(tapWriteTimeout))
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	event := make([]byte, 0, len(msg)+32)
	event = append(event, "event: message\ndata: "...)
	event = append(event, msg...)
	event = append(event, "\n\n"...)
	if _, err := w.ResponseWriter.Write(event); err != nil {
		w.closed = true
		return
	}
	_ = rc.Flush()
}

// taskStream is a session's way to its client for task notifications: the standalone stream of a streamable or
// SSE session (streamTap), or stdout of the stdio session (stdioOut).
type taskStream interface {
	inject(msg []byte)
}

// streamTaps are the open standalone streams of this endpoint's sessions, by session id.
type streamTaps struct {
	mu   sync.Mutex
	byID map[string]taskStream
}

func newStreamTaps() *streamTaps { return &streamTaps{byID: map[string]taskStream{}} }

// add keeps the stream of session id (a newer one replaces an older).
func (t *streamTaps) add(id string, w taskStream) {
	t.mu.Lock()
	t.byID[id] = w
	t.mu.Unlock()
}

// remove forgets the stream w of session id, unless a newer one replaced it.
func (t *streamTaps) remove(id string, w taskStream) {
	t.mu.Lock()
	if t.byID[id] == w {
		delete(t.byID, id)
	}
	t.mu.Unlock()
}

// has reports whether a stream of session id is open (an SSE session's, which the go-sdk lists without an id).
func (t *streamTaps) has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byID[id]
	return ok
}

// serve serves a session's GET (its standalone stream) through a tap kept while it lasts.
func (t *streamTaps) serve(next http.Handler, w http.ResponseWriter, r *http.Request, sid string) {
	tap := &streamTap{ResponseWriter: w}
	t.add(sid, tap) // a newer stream of the session replaces an older one (the go-sdk keeps one)
	defer func() {
		t.remove(sid, tap)
		tap.mu.Lock()
		tap.closed = true
		tap.mu.Unlock()
	}()
	next.ServeHTTP(tap, r)
}

// notifyTaskStatus sends notifications/tasks/status for t to the open streams of its owner's sessions.
func (s *Server) notifyTaskStatus(t persistence.Task) {
	o := s.taskSessions
	o.mu.Lock()
	var sids []string
	for sid, owner := range o.owner {
		if owner == t.Owner {
			sids = append(sids, sid)
		}
	}
	o.mu.Unlock()
	if len(sids) == 0 {
		return
	}
	var taps []taskStream
	s.streams.mu.Lock()
	for _, sid := range sids {
		if tap := s.streams.byID[sid]; tap != nil {
			taps = append(taps, tap)
		}
	}
	s.streams.mu.Unlock()
	if len(taps) == 0 {
		return
	}
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": tasks.ToWire(t)})
	if err != nil {
		return
	}
	for _, tap := range taps {
		tap.inject(msg)
	}
}
