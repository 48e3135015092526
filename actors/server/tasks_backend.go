package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
)

// Following a backend's own task (MCP 2025-11-25 tasks, issue 30). A call that runs as a task (pb.CallTool's
// task_ttl_ms) goes to a backend that declared tasks for tools/call (capabilities.tasks.requests.tools.call in its
// initialize answer) as a task-augmented tools/call; the actor then waits for the backend's task with tasks/result
// (whose stream carries the backend's input requests while the task is input_required: elicitation and sampling,
// relayed to the task's client like any call's) and sends tasks/cancel when the call is cancelled. Another backend
// is called normally (the front end holds the task around the call).
//
// The go-sdk client knows no task: it cannot send a tools/call with a task, nor tasks/get or tasks/cancel, and it
// drops a CreateTaskResult's task. So these requests are sent through the session as a tools/call marked in its
// _meta (rpcMetaKey), which taskWire rewrites on the wire into the request meant, and whose answer it wraps into a
// CallToolResult's _meta (rpcMetaKey) the follower reads back. The go-sdk thus keeps request ids, cancellation
// (notifications/cancelled), middleware and the handling of the backend's requests on the way. taskWire sits around
// a stdio connection, and around the HTTP requests of a streamable HTTP session (the go-sdk must see that
// connection unwrapped: it tells it the session's state).

// rpcMetaKey marks a tools/call that taskWire sends as another request, and holds that request's answer.
const rpcMetaKey = "io.mcpgw/rpc"

// taskCancelTimeout bounds the tasks/cancel sent to a backend when a task's call is cancelled.
const taskCancelTimeout = 5 * time.Second

// maxRewrittenAnswer bounds an answer taskWire wraps (a CreateTaskResult or a Task: small); a larger one is passed
// on as it came, and its follower fails with "not a task".
const maxRewrittenAnswer = 1 << 20

// rpcMark is what a marked tools/call carries in _meta[rpcMetaKey]: the request to send instead, and whether its
// answer is wrapped (tasks/result answers a CallToolResult: not wrapped).
type rpcMark struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Wrap   bool            `json:"wrap"`
}

// taskWire rewrites marked requests and wraps their answers on one backend session, and notes whether the
// backend declared tasks for tools/call. Safe for concurrent use.
type taskWire struct {
	tasks atomic.Bool
	// initDone is set once the initialize answer was read; watched counts the answers the wire waits for (a
	// plain call's answer, when none is awaited, passes with one atomic read).
	initDone atomic.Bool
	watched  atomic.Int32

	mu      sync.Mutex
	wrapped map[jsonrpc.ID]bool // marked requests in flight -> whether the answer is wrapped
	lists   map[jsonrpc.ID]bool // tools/list requests in flight
	initID  *jsonrpc.ID
	// taskSupport is each tool's execution.taskSupport ("optional", "required", "forbidden") as the backend's
	// tools/list said (the go-sdk's Tool has no execution: the answer is read on the wire); absent: none declared.
	taskSupport map[string]string
}

func newTaskWire() *taskWire {
	return &taskWire{wrapped: map[jsonrpc.ID]bool{}, lists: map[jsonrpc.ID]bool{}, taskSupport: map[string]string{}}
}

// supported reports whether the backend declared tasks for tools/call and tool may run as a task (nil: no wire, no
// tasks).
func (w *taskWire) supported(tool string) bool {
	if w == nil || !w.tasks.Load() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := w.taskSupport[tool]
	return ts == "optional" || ts == "required"
}

// noteListing notes the taskSupport of each tool of a tools/list page (result), which the go-sdk drops: the wire
// watches the go-sdk's listings, and the stdio hop's listing (stdiolist.go) hands its pages here (nil w: no wire).
func (w *taskWire) noteListing(result json.RawMessage) {
	if w == nil || !bytes.Contains(result, []byte(`"taskSupport"`)) {
		return
	}
	var page struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &page) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range page.Tools {
		switch ts := t.Execution.TaskSupport; ts {
		case "optional", "required", "forbidden":
			w.taskSupport[t.Name] = ts
		default:
			delete(w.taskSupport, t.Name)
		}
	}
}

// withExecution is a tool's definition (the go-sdk's Tool as JSON, def) with the execution the backend's
// tools/list gave it, which the go-sdk dropped: so the tool's taskSupport is stored with its definition and shown
// to the aggregator's clients (http/mcpserver's taskTools) and enforced ("required" is refused without a task).
// def is returned unchanged when the backend declared no tasks, or nothing for the tool (nil w: no wire).
func (w *taskWire) withExecution(name string, def []byte) []byte {
	if w == nil || !w.tasks.Load() {
		return def
	}
	w.mu.Lock()
	ts := w.taskSupport[name]
	w.mu.Unlock()
	if ts == "" {
		return def
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(def, &doc) != nil || doc == nil {
		return def
	}
	doc["execution"], _ = json.Marshal(map[string]string{"taskSupport": ts})
	out, err := json.Marshal(doc)
	if err != nil {
		return def
	}
	return out
}

// outgoing is req as sent: a marked tools/call becomes the request it carries; initialize is noted (its answer
// says whether the backend has tasks). Other requests are returned unchanged.
func (w *taskWire) outgoing(ctx context.Context, req *jsonrpc.Request) *jsonrpc.Request {
	switch {
	case req.Method == "initialize" && req.ID.IsValid():
		w.mu.Lock()
		id := req.ID
		w.initID = &id
		w.mu.Unlock()
		w.watched.Add(1)
		return req
	case req.Method == "tools/list" && req.ID.IsValid():
		w.mu.Lock()
		w.lists[req.ID] = true
		w.mu.Unlock()
		w.watched.Add(1)
		return req
	case req.Method != "tools/call" || !req.ID.IsValid() || !bytes.Contains(req.Params, []byte(rpcMetaKey)):
		return req
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	var mark rpcMark
	if json.Unmarshal(req.Params, &p) != nil || json.Unmarshal(p.Meta[rpcMetaKey], &mark) != nil || mark.Method == "" {
		return req
	}
	w.mu.Lock()
	w.wrapped[req.ID] = mark.Wrap
	w.mu.Unlock()
	w.watched.Add(1)
	if ww, ok := ctx.Value(wireWatchKey{}).(*wireWatch); ok {
		ww.add(req.ID)
	}
	out := *req
	out.Method, out.Params = mark.Method, mark.Params
	return &out
}

// watching reports whether the answer to id is one incoming rewrites or reads.
func (w *taskWire) watching(id jsonrpc.ID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.wrapped[id]
	return ok || w.lists[id] || w.initID != nil && *w.initID == id
}

// incoming reads the answer to initialize and wraps the answer to a marked request: {"content": [], "_meta":
// {rpcMetaKey: answer}}, which the go-sdk decodes as the CallToolResult its tools/call waits for.
func (w *taskWire) incoming(res *jsonrpc.Response) {
	if !res.ID.IsValid() || w.watched.Load() <= 0 {
		return
	}
	w.mu.Lock()
	wrap, marked := w.wrapped[res.ID]
	delete(w.wrapped, res.ID)
	isInit := w.initID != nil && *w.initID == res.ID
	if isInit {
		w.initID = nil
	}
	list := w.lists[res.ID]
	delete(w.lists, res.ID)
	w.mu.Unlock()
	if marked || isInit || list {
		w.watched.Add(-1)
	}
	if isInit {
		w.initDone.Store(true)
	}
	switch {
	case list && res.Error == nil:
		w.noteListing(res.Result)
	case isInit && res.Error == nil:
		var init struct {
			Capabilities struct {
				Tasks struct {
					Requests struct {
						Tools struct {
							Call json.RawMessage `json:"call"`
						} `json:"tools"`
					} `json:"requests"`
				} `json:"tasks"`
			} `json:"capabilities"`
		}
		if json.Unmarshal(res.Result, &init) == nil {
			c := init.Capabilities.Tasks.Requests.Tools.Call
			w.tasks.Store(len(c) > 0 && c[0] == '{')
		}
	case marked && wrap && res.Error == nil && len(res.Result) <= maxRewrittenAnswer:
		doc, err := json.Marshal(map[string]any{"content": []any{}, "_meta": map[string]json.RawMessage{rpcMetaKey: res.Result}})
		if err == nil {
			res.Result = doc
		}
	}
}

// transport wraps a stdio transport's connection with the wire (an HTTP one is wrapped at its requests:
// roundTripper).
func (w *taskWire) transport(t mcp.Transport) mcp.Transport { return taskTransport{inner: t, w: w} }

type taskTransport struct {
	inner mcp.Transport
	w     *taskWire
}

func (t taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taskConn{Connection: c, w: t.w}, nil
}

type taskConn struct {
	mcp.Connection
	w *taskWire
}

func (c *taskConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Request); ok && (r.Method != "tools/call" || wireWatched(ctx)) {
		m = c.w.outgoing(ctx, r)
	}
	return c.Connection.Write(ctx, m)
}

func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Response); ok && err == nil {
		c.w.incoming(r)
	}
	return m, err
}

// roundTripper puts the wire around the requests of a streamable HTTP session: a POSTed marked request is
// rewritten, and its answer (a JSON body, or an SSE stream's event) read or wrapped.
func (w *taskWire) roundTripper(next http.RoundTripper) http.RoundTripper {
	return taskRoundTripper{next: next, w: w}
}

type taskRoundTripper struct {
	next http.RoundTripper
	w    *taskWire
}

func (t taskRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	// Only the requests the wire watches are read: the session's first ones (up to its initialize answer), and
	// those sent with a watching context (followBackendTask's, tools/list's); a plain call passes untouched.
	if req.Method != http.MethodPost || req.Body == nil || req.GetBody == nil || t.w.initDone.Load() && !wireWatched(req.Context()) {
		return t.next.RoundTrip(req)
	}
	// The go-sdk POSTs one message per request, from a buffer (GetBody is set): reading it costs no stream.
	body, err := req.GetBody()
	if err != nil {
		return t.next.RoundTrip(req)
	}
	raw, err := io.ReadAll(io.LimitReader(body, maxRewrittenAnswer+1))
	_ = body.Close()
	if err != nil || len(raw) > maxRewrittenAnswer || !(bytes.Contains(raw, []byte(rpcMetaKey)) ||
		bytes.Contains(raw, []byte(`"initialize"`)) || bytes.Contains(raw, []byte(`"tools/list"`))) {
		return t.next.RoundTrip(req)
	}
	msg, err := jsonrpc.DecodeMessage(raw)
	r, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok {
		return t.next.RoundTrip(req)
	}
	out := t.w.outgoing(req.Context(), r)
	if out != r {
		if raw, err = jsonrpc.EncodeMessage(out); err != nil {
			return nil, fmt.Errorf("task wire: encode %s: %w", out.Method, err)
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(raw))
		req.ContentLength = int64(len(raw))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	}
	res, err := t.next.RoundTrip(req)
	if err != nil || res.Body == nil || !t.w.watching(r.ID) {
		return res, err
	}
	size := 64 << 10
	if r.Method == "tools/list" {
		size = maxRewrittenAnswer // a page of tools is read whole when its line fits
	}
	res.Body = &sseRewriter{src: bufio.NewReaderSize(res.Body, size), body: res.Body, w: t.w}
	res.ContentLength = -1
	res.Header.Del("Content-Length")
	return res, nil
}

// sseRewriter passes an answer's body on, line by line, reading or wrapping the JSON-RPC answers it carries: the
// lines of an SSE stream ("data: {...}") and a JSON body (one line, or a line of one). A line longer than the
// reader's buffer is passed on as it came.
type sseRewriter struct {
	src  *bufio.Reader
	body io.Closer
	w    *taskWire
	out  []byte
	err  error
}

func (s *sseRewriter) Read(p []byte) (int, error) {
	for len(s.out) == 0 && s.err == nil {
		line, err := s.src.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			s.out = append(s.out[:0], line...)
			err = nil
		default:
			s.out = append(s.out[:0], s.rewrite(line)...)
		}
		s.err = err
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 && s.err != nil {
		return n, s.err
	}
	return n, nil
}

func (s *sseRewriter) Close() error { return s.body.Close() }

// rewrite is one line as passed on.
func (s *sseRewriter) rewrite(line []byte) []byte {
	prefix, doc := []byte(nil), bytes.TrimSpace(line)
	if rest, ok := bytes.CutPrefix(doc, []byte("data:")); ok {
		prefix, doc = []byte("data: "), bytes.TrimSpace(rest)
	}
	if len(doc) == 0 || doc[0] != '{' || !bytes.Contains(doc, []byte(`"result"`)) {
		return line
	}
	msg, err := jsonrpc.DecodeMessage(doc)
	res, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok {
		return line
	}
	before := string(res.Result)
	s.w.incoming(res)
	if string(res.Result) == before {
		return line
	}
	enc, err := jsonrpc.EncodeMessage(res)
	if err != nil {
		return line
	}
	out := append(append(prefix, enc...), '\n')
	return out
}

// wireWatchKey marks the context of a request the wire must look at: a marked tools/call, or a tools/list (over
// HTTP, other requests are passed on unread).
type wireWatchKey struct{}

// wireWatch is the value of wireWatchKey: the ids of the marked requests sent with the context, whose answers a
// cancelled request may never get (forget).
type wireWatch struct {
	mu  sync.Mutex
	ids []jsonrpc.ID
}

func (ww *wireWatch) add(id jsonrpc.ID) {
	ww.mu.Lock()
	ww.ids = append(ww.ids, id)
	ww.mu.Unlock()
}

// withWireWatch marks ctx's requests for the wire.
func withWireWatch(ctx context.Context) context.Context {
	return context.WithValue(ctx, wireWatchKey{}, &wireWatch{})
}

// forget drops what the wire still awaits of the marked requests sent with ctx (a cancelled request's answer may
// never come): the wire holds nothing for a follow once it ended.
func (w *taskWire) forget(ctx context.Context) {
	ww, ok := ctx.Value(wireWatchKey{}).(*wireWatch)
	if !ok {
		return
	}
	ww.mu.Lock()
	ids := ww.ids
	ww.ids = nil
	ww.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.wrapped[id]; ok {
			delete(w.wrapped, id)
			w.watched.Add(-1)
		}
	}
}

func wireWatched(ctx context.Context) bool { return ctx.Value(wireWatchKey{}) != nil }

// backendRPC sends method with params on sess through the wire and returns its answer.
func backendRPC(ctx context.Context, sess *mcp.ClientSession, tool, method string, params any) (json.RawMessage, error) {
	res, err := sess.CallTool(ctx, markedCall(tool, method, params, true))
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(res.Meta[rpcMetaKey])
	if err != nil || res.Meta[rpcMetaKey] == nil {
		return nil, fmt.Errorf("backend answered %s without a result the aggregator could read", method)
	}
	return raw, nil
}

// markedCall is the tools/call the wire sends as method with params.
func markedCall(tool, method string, params any, wrap bool) *mcp.CallToolParams {
	raw, _ := json.Marshal(params)
	return &mcp.CallToolParams{Name: tool, Arguments: map[string]any{},
		Meta: mcp.Meta{rpcMetaKey: rpcMark{Method: method, Params: raw, Wrap: wrap}}}
}

// taskCall is a task's call of a tool its backend runs as a task, on a caller's own session: the TTL asked of the
// backend, and what is told the backend's task id.
type taskCall struct {
	ttl    time.Duration
	onTask func(id string)
}

// backendTask is a backend's task as CreateTaskResult and tasks/get show it.
type backendTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
}

// followBackendTask runs params as a task of ttl on a backend that supports tasks: a task-augmented tools/call,
// then tasks/result, which answers the call's CallToolResult once the backend's task ends (the backend's requests
// meanwhile reach the task's client through the session's relay). onTask, when set, is told the backend's task id
// as soon as the backend answers with it (the server actor records it on our task, for a resumption elsewhere).
// When ctx ends first, the backend's task is cancelled (tasks/cancel). A backend that answers the call at once (no
// task) is answered with that result.
func followBackendTask(ctx context.Context, w *taskWire, sess *mcp.ClientSession, params *mcp.CallToolParams, ttl time.Duration, onTask func(id string)) (*mcp.CallToolResult, error) {
	ctx = withWireWatch(ctx)
	defer w.forget(ctx)
	call := map[string]any{"name": params.Name, "arguments": params.Arguments, "task": map[string]any{"ttl": ttl.Milliseconds()}}
	if len(params.Meta) > 0 {
		call["_meta"] = params.Meta
	}
	raw, err := backendRPC(ctx, sess, params.Name, "tools/call", call)
	if err != nil {
		return nil, err
	}
	var created struct {
		Task *backendTask `json:"task"`
	}
	if err := json.Unmarshal(raw, &created); err != nil {
		return nil, fmt.Errorf("backend answered the task-augmented call with %.200s: %w", raw, err)
	}
	if created.Task == nil || created.Task.TaskID == "" {
		var res mcp.CallToolResult // answered at once, without a task
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("backend answered the task-augmented call with %.200s: %w", raw, err)
		}
		return &res, nil
	}
	if onTask != nil {
		onTask(created.Task.TaskID)
	}
	return awaitBackendTask(ctx, sess, params.Name, created.Task.TaskID)
}

// awaitBackendTask waits for the backend's task id with tasks/result (ctx is a wire-watched context) and
// cancels it (tasks/cancel) when ctx ends first, but for the daemon shutting down (ErrShuttingDown).
func awaitBackendTask(ctx context.Context, sess *mcp.ClientSession, tool, id string) (*mcp.CallToolResult, error) {
	res, err := sess.CallTool(ctx, markedCall(tool, "tasks/result", map[string]string{"taskId": id}, false))
	// A daemon that stops leaves the backend's task running: the task is resumed elsewhere (or after the restart).
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrShuttingDown) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), taskCancelTimeout)
		defer cancel()
		_, _ = backendRPC(cctx, sess, tool, "tasks/cancel", map[string]string{"taskId": id})
	}
	if err != nil {
		return nil, err
	}
	if res.Meta != nil {
		delete(res.Meta, "io.modelcontextprotocol/related-task") // the backend's task id is not the caller's
	}
	return res, nil
}

// resumeBackendTask follows, on this session, a backend's task another session started (the task's node died):
// tasks/get tells whether the backend still knows it, then tasks/result waits for its end as followBackendTask
// does. A backend that no longer knows the task answers a JSON-RPC error, returned with the reason: over stdio,
// the child that ran it stopped with the node that followed it (server names the server, for the message). A
// session without a task wire (SSE) cannot follow it.
func resumeBackendTask(ctx context.Context, w *taskWire, sess *mcp.ClientSession, tool, id, server string, stdio bool) (*mcp.CallToolResult, error) {
	if w == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("the task's backend task %s cannot be followed again: server %s's transport (SSE) carries no tasks", id, server)}
	}
	ctx = withWireWatch(ctx)
	defer w.forget(ctx)
	if _, err := backendRPC(ctx, sess, tool, "tasks/get", map[string]string{"taskId": id}); err != nil {
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || localTransportError(err) {
			return nil, err
		}
		why := "the backend no longer knows it"
		if stdio {
			why = "the server runs as a stdio child process, which stopped with the node that followed the task"
		}
		return nil, &jsonrpc.Error{Code: rpcErr.Code, Message: fmt.Sprintf("the backend's task %s is gone (%s): %s", id, why, rpcErr.Message)}
	}
	return awaitBackendTask(ctx, sess, tool, id)
}

// taskWire puts a task wire on the attempt's transport and returns the transport to connect: around a stdio
// connection, or around a streamable HTTP session's requests; an SSE session gets none (its answers come on
// another stream) and so never follows a backend's task.
func (c *connectAttempt) taskWire(b *backend.Conn) mcp.Transport {
	w := newTaskWire()
	switch {
	case b.Stdio():
		c.tasks = w
		return w.transport(b.Transport())
	case b.WrapStreamable(w.roundTripper):
		c.tasks = w
	}
	return b.Transport()
}
