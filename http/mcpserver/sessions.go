package mcpserver

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
)

// sessionRetryAfter is the Retry-After of a refused new session: long enough for an idle session to be reaped or
// a stream to close, short enough for a client to come back soon.
const sessionRetryAfter = 5

// sessionTable counts the endpoint's sessions per client so that new ones beyond the caps are refused before the
// go-sdk builds them, and keeps the cancel functions of each session's calls in flight so that a DELETE of the
// session cancels them instead of waiting for them.
type sessionTable struct {
	s *Server

	mu      sync.Mutex
	byID    map[string]string          // streamable session id -> client key
	pending map[string]int             // client key -> POSTs without a session id being served
	sse     map[string]int             // client key -> open legacy SSE streams (a session each)
	modern  map[string]int             // client key -> sessionless (2026-07-28) requests being served, each counted as a session
	calls   map[*inflightCall]struct{} // tools/call in flight, of every session (one map: no map per session to make and drop per call)
}

type inflightCall struct {
	session string
	cancel  context.CancelFunc
}

func newSessionTable(s *Server) *sessionTable {
	return &sessionTable{s: s, byID: map[string]string{}, pending: map[string]int{}, sse: map[string]int{}, modern: map[string]int{},
		calls: map[*inflightCall]struct{}{}}
}

// clientKey is who opens a session: the token's name, or the IP without auth.
func clientKey(r *http.Request) string {
	if id, ok := auth.FromContext(r.Context()); ok && !id.Anonymous && id.Name != "" {
		return id.RateKey()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// admit reserves room for one new session of key, or answers the cap. The streamable sessions the go-sdk has
// ended (idle timeout, DELETE, close) are forgotten first.
func (t *sessionTable) admit(key string) *apierror.Error {
	live := map[string]bool{}
	for ss := range t.s.mcp.Sessions() {
		live[ss.ID()] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	total, mine := 0, 0
	for id, k := range t.byID {
		if !live[id] {
			delete(t.byID, id)
			continue
		}
		total++
		if k == key {
			mine++
		}
	}
	for _, m := range []map[string]int{t.pending, t.sse, t.modern} {
		for k, n := range m {
			total += n
			if k == key {
				mine += n
			}
		}
	}
	if lim := t.s.opts.MaxSessionsPerClient; lim > 0 && mine >= lim {
		return &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.CodeSessionLimit,
			Detail:     "Too many MCP sessions for this client; close (DELETE) sessions you no longer use",
			Context:    map[string]any{"limit": lim, "scope": "client", "retryable": true},
			RetryAfter: sessionRetryAfter}
	}
	if lim := t.s.opts.MaxSessions; lim > 0 && total >= lim {
		return &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.CodeSessionLimit,
			Detail:     "The MCP endpoint has its maximum of sessions; retry later",
			Context:    map[string]any{"limit": lim, "scope": "total", "retryable": true},
			RetryAfter: sessionRetryAfter}
	}
	return nil
}

// streamable wraps the go-sdk's streamable handler with the caps and the DELETE cancellation. Requests of the
// sessionless revision go to modern, the stateless handler: they open no session, so each counts as one while it
// is served (a subscriptions/listen stream for as long as it stays open), against the same caps.
func (t *sessionTable) streamable(sdk, modern http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = withBudgetQuery(r)
		if isModern(r) {
			key := clientKey(r)
			if e := t.admit(key); e != nil {
				apierror.Write(w, e)
				return
			}
			aw := &answeredWriter{ResponseWriter: w, release: t.hold(t.modern, key)}
			defer aw.answered()
			modern.ServeHTTP(aw, r)
			return
		}
		sid := r.Header.Get("Mcp-Session-Id")
		if r.Method == http.MethodDelete && sid != "" {
			t.cancelCalls(sid)
		}
		if r.Method != http.MethodPost || sid != "" {
			sdk.ServeHTTP(w, r)
			return
		}
		key := clientKey(r)
		if e := t.admit(key); e != nil {
			apierror.Write(w, e)
			return
		}
		release := t.hold(t.pending, key)
		defer func() {
			// The new session counts before the pending open stops counting: never a moment below the cap.
			if id := w.Header().Get("Mcp-Session-Id"); id != "" {
				t.mu.Lock()
				t.byID[id] = key
				t.mu.Unlock()
			}
			release()
		}()
		sdk.ServeHTTP(w, r)
	})
}

// sse wraps the legacy SSE handler: a GET without a session opens a session that lasts as long as its stream.
func (t *sessionTable) legacy(sdk http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Query().Get("sessionid") != "" {
			sdk.ServeHTTP(w, r)
			return
		}
		key := clientKey(r)
		if e := t.admit(key); e != nil {
			apierror.Write(w, e)
			return
		}
		defer t.hold(t.sse, key)()
		sdk.ServeHTTP(w, r)
	})
}

// hold counts one more session of key in counts (sessions being opened, or open SSE streams) until the returned
// release is called.
func (t *sessionTable) hold(counts map[string]int, key string) (release func()) {
	t.mu.Lock()
	counts[key]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if counts[key]--; counts[key] <= 0 {
			delete(counts, key)
		}
	}
}

// answeredWriter calls answered once the answer of its request is on the way: its request no longer counts against
// the caps. The client may send its next request the moment it reads the answer, before the handler has returned;
// counting until then refused a client's own next request (a 2026-07-28 client's subscriptions/listen right after
// its server/discover, at a cap of 2). The go-sdk answers each request on an event stream: the answer is the
// stream's JSON-RPC response event; a subscriptions/listen stream sends notifications and counts for as long as it
// is open. Any other response (a plain JSON body, an error status) is the answer as soon as it starts.
type answeredWriter struct {
	http.ResponseWriter
	release  func() // the request's count, given back once
	released bool
	started  bool
	stream   bool
}

// answered gives the request's count back, once (the handler's goroutine is the only caller).
func (w *answeredWriter) answered() {
	if !w.released {
		w.released = true
		w.release()
	}
}

func (w *answeredWriter) WriteHeader(code int) {
	if !w.started {
		w.started = true
		w.stream = strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
		if !w.stream {
			w.answered()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answeredWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.stream && isResponseEvent(p) {
		w.answered()
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the writer's Flush and deadlines.
func (w *answeredWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on (the go-sdk asserts http.Flusher for its streams).
func (w *answeredWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// isResponseEvent reports whether p holds an event whose data is a JSON-RPC response: {"jsonrpc":"2.0","id":<id>
// followed by "result" or "error", as the go-sdk encodes it (a request from the server has "method" after its id,
// a notification no id). A response encoded otherwise is missed, and counts until its handler returns.
func isResponseEvent(p []byte) bool {
	const head = `data: {"jsonrpc":"2.0","id":`
	for {
		i := bytes.Index(p, []byte(head))
		if i < 0 {
			return false
		}
		p = p[i+len(head):]
		j := 0
		if len(p) > 0 && p[0] == '"' { // a string id
			j = 1
			for j < len(p) && p[j] != '"' {
				if p[j] == '\\' {
					j++
				}
				j++
			}
			j++
		} else {
			for j < len(p) && (p[j] == '-' || (p[j] >= '0' && p[j] <= '9')) {
				j++
			}
		}
		if j <= len(p) && (bytes.HasPrefix(p[j:], []byte(`,"result":`)) || bytes.HasPrefix(p[j:], []byte(`,"error":`))) {
			return true
		}
	}
}

// trackCalls gives each tools/call a context the session's DELETE cancels.
func (s *Server) trackCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if method != "tools/call" || !ok || ss == nil || ss.ID() == "" {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		t, c := s.sessions, &inflightCall{session: ss.ID(), cancel: cancel}
		t.mu.Lock()
		t.calls[c] = struct{}{}
		t.mu.Unlock()
		defer t.untrack(c)
		return next(ctx, method, req)
	}
}

// cancelCalls cancels the calls in flight of one session.
func (t *sessionTable) cancelCalls(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.calls {
		if c.session == id {
			c.cancel()
		}
	}
}

// untrack forgets a call that returned.
func (t *sessionTable) untrack(c *inflightCall) {
	t.mu.Lock()
	delete(t.calls, c)
	t.mu.Unlock()
}

// summary is a slog.Handler that folds records whose message starts with prefix (the go-sdk's one warning per
// session when a notification fails) into one line per burst: the first starts a one-second window, at its end
// one record says how many failed, with an example.
type summary struct {
	next   slog.Handler
	prefix string
	st     *summaryState
}

type summaryState struct {
	log    *slog.Logger
	msg    string
	window time.Duration

	mu     sync.Mutex
	count  int
	sample string
	timer  *time.Timer
}

func newSummary(logger *slog.Logger, prefix, msg string) *summary {
	return &summary{next: logger.Handler(), prefix: prefix, st: &summaryState{log: logger, msg: msg, window: time.Second}}
}

// Enabled implements slog.Handler.
func (h *summary) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *summary) Handle(ctx context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, h.prefix) {
		return h.next.Handle(ctx, r)
	}
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.count++
	if st.sample == "" {
		st.sample = r.Message
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(st.window, h.flush)
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (h *summary) WithAttrs(a []slog.Attr) slog.Handler {
	return &summary{next: h.next.WithAttrs(a), prefix: h.prefix, st: h.st}
}

// WithGroup implements slog.Handler.
func (h *summary) WithGroup(name string) slog.Handler {
	return &summary{next: h.next.WithGroup(name), prefix: h.prefix, st: h.st}
}

// flush logs the pending summary, if any.
func (h *summary) flush() {
	st := h.st
	st.mu.Lock()
	n, sample := st.count, st.sample
	st.count, st.sample = 0, ""
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	st.mu.Unlock()
	if n > 0 {
		st.log.Warn(st.msg, "sessions", n, "example", sample)
	}
}
