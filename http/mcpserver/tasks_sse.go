package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Tasks over the legacy SSE transport (/sse and its profile and per-server variants; also `aggregator stdio`
// relayed to a serve process, which speaks SSE to it). The go-sdk's SSE handler knows no tasks either, and there a
// POST is answered 202 while its JSON-RPC answer travels on the session's GET stream. So sseTasks taps that stream
// (sseTap: the go-sdk writes each event with one Write, mcp/event.go writeEvent) and serves the session with its
// handle (frontSession "sse:" + its sessionid, tasks_front.go) in the context the go-sdk connects it with:
//
//   - the middleware adds capabilities.tasks to the answer of a 2025-11-25 initialize and execution.taskSupport to
//     tools/list, as on /mcp;
//   - the task methods (and a task-augmented tools/call) are answered here as on /mcp (serveTask), the answer
//     written into the stream as an event of its own, between the go-sdk's, and the POST answered 202;
//   - a task's backend requests (elicitation, sampling) are relayed to the session (serveTask finds its go-sdk
//     session through the handle), whose answers, POSTed, go to the go-sdk;
//   - notifications/tasks/status reach the stream as they reach a streamable session's GET (the tap is one of the
//     endpoint's streamTaps, under the session's id "sse:" + its sessionid).

// sseSessionPrefix marks the session ids of SSE sessions among the endpoint's streams and task owners' sessions.
const sseSessionPrefix = "sse:"

// sseTap is the ResponseWriter of an SSE session's GET stream.
type sseTap struct {
	*streamTap
	s      *Server
	taps   *sseTaps
	front  *frontSession
	sid    string          // the go-sdk's sessionid, from its endpoint event
	ctx    context.Context // ends with the stream
	cancel context.CancelFunc
}

// Write passes the go-sdk's events on; the first (the endpoint event) names the session.
func (w *sseTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = true // the go-sdk sets its headers and writes: an implicit 200 event stream
		if sid := endpointSession(p); sid != "" {
			w.sid = sid
			w.taps.mu.Lock()
			w.taps.byID[sid] = w
			w.taps.mu.Unlock()
			w.s.fronts.add(sseSessionPrefix+sid, w.front)
			w.s.streams.add(sseSessionPrefix+sid, w.streamTap)
		}
	}
	return w.ResponseWriter.Write(p)
}

// endpointSession is the sessionid of the go-sdk's endpoint event ("event: endpoint\ndata: /sse?sessionid=...").
func endpointSession(p []byte) string {
	rest, ok := bytes.CutPrefix(p, []byte("event: endpoint\ndata: "))
	if !ok {
		return ""
	}
	u, err := url.Parse(string(bytes.TrimSpace(rest)))
	if err != nil {
		return ""
	}
	return u.Query().Get("sessionid")
}

// sseTaps are the taps of the SSE sessions, by sessionid.
type sseTaps struct {
	mu   sync.Mutex
	byID map[string]*sseTap
}

// sseTasks serves tasks over the SSE handler next (see above).
func (s *Server) sseTasks(next http.Handler) http.Handler {
	if s.opts.Tasks == nil {
		return next
	}
	taps := &sseTaps{byID: map[string]*sseTap{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.URL.Query().Get("sessionid")
		switch {
		case r.Method == http.MethodGet && sid == "":
			front := &frontSession{}
			r = r.WithContext(withFrontSession(r.Context(), front)) // the go-sdk connects the session with it
			ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
			tap := &sseTap{streamTap: &streamTap{ResponseWriter: w}, s: s, taps: taps, front: front, ctx: ctx, cancel: cancel}
			defer s.endSSETap(taps, tap)
			next.ServeHTTP(tap, r)
			return
		case r.Method == http.MethodPost && sid != "":
			taps.mu.Lock()
			tap := taps.byID[sid]
			taps.mu.Unlock()
			if tap != nil {
				if body, ok := peekBody(r, maxTaskRequestBytes); ok && (sseDiscover(w, body, tap) || s.sseTaskRequest(w, r, body, tap)) {
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// endSSETap forgets a tap whose stream ended and stops the answers still being made for it.
func (s *Server) endSSETap(taps *sseTaps, tap *sseTap) {
	tap.cancel()
	tap.mu.Lock()
	tap.closed = true
	sid := tap.sid
	tap.mu.Unlock()
	if sid == "" {
		return
	}
	taps.mu.Lock()
	if taps.byID[sid] == tap {
		delete(taps.byID, sid)
	}
	taps.mu.Unlock()
	s.fronts.remove(tap.front)
	s.streams.remove(sseSessionPrefix+sid, tap.streamTap)
}

// sseDiscover answers a server/discover POSTed (body) to the SSE session tap itself: the method is not offered (as
// the go-sdk answers on a transport without 2026-07-28), the answer written into the stream and the POST answered
// 202; false: the POST is something else. The go-sdk's SSE handler sends its endpoint event before it records which
// versions the session's transport serves, so a discover that arrives in that moment would be offered 2026-07-28,
// which the legacy SSE transport does not carry; a client told "not found" falls back to initialize.
func sseDiscover(w http.ResponseWriter, body []byte, tap *sseTap) bool {
	if !bytes.Contains(body, []byte(`"server/discover"`)) {
		return false
	}
	var req rpcRequest
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 || req.Method != "server/discover" {
		return false
	}
	answer, err := json.Marshal(rpcAnswer(req.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: "server/discover is not offered on the legacy SSE transport (protocol " + ModernProtocol +
			" is served on the streamable endpoint); initialize with an earlier version"}))
	if err != nil {
		return false
	}
	w.WriteHeader(http.StatusAccepted)
	tap.inject(answer)
	return true
}

// sseTaskRequest serves the POST r (its body read) of the SSE session tap when it is a task request (the answer
// written into the stream, the POST answered 202); false: next serves it.
func (s *Server) sseTaskRequest(w http.ResponseWriter, r *http.Request, body []byte, tap *sseTap) bool {
	if !bytes.Contains(body, []byte(`"task`)) {
		return false // only a body that mentions a task is decoded here
	}
	var req rpcRequest
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 || !isTaskRequest(req) {
		return false
	}
	w.WriteHeader(http.StatusAccepted)
	// The answer is made beside the POST (tasks/result waits for the task's end) and lasts as long as the stream.
	r2 := r.Clone(tap.ctx)
	r2.Header.Set("Mcp-Session-Id", sseSessionPrefix+tap.sid)
	go func() {
		if raw := s.answerTask(r2, req); raw != nil && tap.ctx.Err() == nil {
			tap.inject(raw)
		}
	}()
	return true
}
