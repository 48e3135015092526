package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/internal/toolresult"
)

// The fast path of tools/call on /mcp (issue 26). A go-sdk server session costs a call through /mcp about 300 KB
// and a handful of goroutine hand-offs of its own (README, "Where we work around the go-sdk"): its
// internal/json.Unmarshal allocates a 32 KiB buffer for every decode, and it decodes a tools/call five times (the
// envelope, its method, the params, _meta twice) before passing it through a channel to the session's reader and
// on to a handler goroutine. For the commonest request, a POST carrying one tools/call of a live 2025-11-25 or
// 2025-06-18 session, the endpoint decodes the envelope once itself (encoding/json, exact keys) and runs the very
// receiving chain the go-sdk would (captured when the server was built: the request's span, trackCalls,
// canonicalNames, the policy and budget middlewares, tasks, the go-sdk's own tools/call handler), so that every
// check a call passes (identity, scope, curation, pinning, profiles, rate limit, audit, metrics) is the same code.
// The answer is written as the go-sdk writes it (an SSE event on the POST's response).
//
// Anything else goes to the go-sdk as before: batches, notifications, other methods, a call with _meta (a progress
// token, a trace context), a task-augmented call, a meta-tool or a name that is not an exposed alias, a session of
// another revision or one the go-sdk has not served for a while (its idle timer, see fastSession.fresh), a client
// that declared sampling or elicitation (their requests must travel on the call's own stream, which only the
// go-sdk's session can address). What the fast path does itself: a backend's roots/list and log messages during a
// fast call go out on the call's stream as the go-sdk's would (fastRelay), the client's answers and its
// notifications/cancelled for a fast call are taken before the go-sdk sees them. A 2026-07-28 call (no session) has
// a sibling path of its own, fastcall_modern.go.

// fastMaxBody bounds the body the fast path reads before giving the request to the go-sdk (which reads the rest).
const fastMaxBody = 1 << 20

// fastRequestIDPrefix starts the ids of the requests a fast call sends its client (roots/list): the go-sdk numbers
// its own, so a string id with this prefix is ours.
const fastRequestIDPrefix = "mcp-aggregator-fast-"

// fastCalls is the state of the fast path: the captured receiving chain and the sessions it has seen.
type fastCalls struct {
	s     *Server
	chain mcp.MethodHandler // the go-sdk server's receiving chain, every middleware included (capture)

	mu       sync.Mutex
	sessions map[string]*fastSession // by session id
	waiting  map[string]chan *jsonrpc.Response
	nextID   atomic.Uint64
	served   atomic.Uint64 // calls taken (for tests)

	// The 2026-07-28 fast path (fastcall_modern.go): the server's implementation (its results' serverInfo), the
	// learnt sessions by the _meta bytes they were learnt from, and the same sessions as a set.
	impl         *mcp.Implementation
	learnt       map[string]*mcp.ServerSession
	idle         map[*mcp.ServerSession]bool
	closed       bool
	servedModern atomic.Uint64 // 2026-07-28 calls taken (for tests)
	// off turns the fast path off (tests and benchmarks compare the two paths).
	off atomic.Bool
}

// fastSession is what the fast path knows of one streamable session.
type fastSession struct {
	ss *mcp.ServerSession
	// sdkAt is when the go-sdk last finished serving a POST of the session (Unix ns): its idle timer restarts then.
	sdkAt atomic.Int64
	// level is the log level the client set (logging/setLevel), "" none: log messages go out only at or above it.
	level atomic.Pointer[mcp.LoggingLevel]
	// busy counts the session's fast calls in flight: while it is 0 no POST of the session is looked into for a
	// cancellation or an answer.
	busy  atomic.Int32
	mu    sync.Mutex
	calls map[string]context.CancelFunc // fast calls in flight by JSON-RPC id (its JSON text)
}

func newFastCalls(s *Server, impl *mcp.Implementation) *fastCalls {
	f := &fastCalls{s: s, impl: impl, sessions: map[string]*fastSession{}, waiting: map[string]chan *jsonrpc.Response{},
		learnt: map[string]*mcp.ServerSession{}, idle: map[*mcp.ServerSession]bool{}}
	// Added after every other receiving middleware: it is the outermost, and next is the whole chain.
	s.mcp.AddReceivingMiddleware(f.capture)
	return f
}

// capture remembers the receiving chain, each streamable session once initialised, and the log level each
// session's client sets.
func (f *fastCalls) capture(next mcp.MethodHandler) mcp.MethodHandler {
	f.chain = next
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "notifications/initialized":
			f.initialized(req)
		case "tools/call":
			f.learn(req)
		}
		res, err := next(ctx, method, req)
		if method == "logging/setLevel" && err == nil {
			if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && p != nil {
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil && stateful(ss) {
					level := p.Level
					f.track(ss).level.Store(&level)
				}
			}
		}
		return res, err
	}
}

// handler serves the fast requests and hands every other to next (the go-sdk, through the session caps).
func (f *fastCalls) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(fastMetaHeader) // the 2026-07-28 fast path's mark: never a client's (fastcall_modern.go)
		sid := r.Header.Get("Mcp-Session-Id")
		if sid == "" || r.Method != http.MethodPost || isModern(r) || f.off.Load() {
			next.ServeHTTP(w, r)
			return
		}
		if f.serve(w, r, sid) {
			return
		}
		next.ServeHTTP(w, r)
		f.servedBySDK(sid)
	})
}

// known returns the fast path's state of a session it has seen.
func (f *fastCalls) known(sid string) *fastSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[sid]
}

// initialized tracks a streamable session (its POSTs carry its id in Mcp-Session-Id) of a revision with sessions
// when its client's notifications/initialized arrives: the go-sdk refuses a session's calls before it, and from
// then on its POSTs find the session's state by id (known), where the go-sdk offers only an iterator over every
// session. The go-sdk is serving a POST of the session right now: its idle timer starts again.
func (f *fastCalls) initialized(req mcp.Request) {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	extra := req.GetExtra()
	if !ok || ss == nil || extra == nil || extra.Header == nil || ss.ID() == "" ||
		extra.Header.Get("Mcp-Session-Id") != ss.ID() || !stateful(ss) {
		return
	}
	f.track(ss).sdkAt.Store(time.Now().UnixNano())
}

// servedBySDK notes that the go-sdk served a POST of a tracked session: its idle timer starts again now.
func (f *fastCalls) servedBySDK(sid string) {
	if fs := f.known(sid); fs != nil {
		fs.sdkAt.Store(time.Now().UnixNano())
	}
}

// track returns the fast path's state of a live session, made the first time (and forgotten when it ends).
func (f *fastCalls) track(ss *mcp.ServerSession) *fastSession {
	sid := ss.ID()
	f.mu.Lock()
	fs, ok := f.sessions[sid]
	if !ok {
		fs = &fastSession{ss: ss, calls: map[string]context.CancelFunc{}}
		f.sessions[sid] = fs
	}
	f.mu.Unlock()
	if !ok {
		go func() {
			_ = ss.Wait()
			f.mu.Lock()
			if f.sessions[sid] == fs {
				delete(f.sessions, sid)
			}
			f.mu.Unlock()
		}()
	}
	return fs
}

// fresh reports whether the go-sdk's idle timer of the session is far from firing: a fast call does not restart
// it, so a session's POSTs go to the go-sdk again once a tenth of the idle timeout has passed since it last served
// one (an idle session then ends between 0.9 and 1 times the timeout after its last request).
func (fs *fastSession) fresh(timeout time.Duration) bool {
	if timeout <= 0 {
		return true
	}
	return time.Since(time.Unix(0, fs.sdkAt.Load())) < timeout/10
}

// fastMessage is a JSON-RPC message decoded as the go-sdk decodes it: exact (case-sensitive) keys, unknown keys
// ignored. It is decoded from the bytes in place (segmentio's Parse: no 32 KiB reading buffer, see README).
type fastMessage struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// fastParams are the params of a tools/call as the go-sdk reads them (CallToolParamsRaw).
type fastParams struct {
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      json.RawMessage `json:"_meta"`
	Task      json.RawMessage `json:"task"`
}

// fastMaxDepth is the go-sdk's bound on a message's nesting (internal/json.defaultMaxDepth): a deeper one goes to
// the go-sdk, which refuses it.
const fastMaxDepth = 1000

// fastDecode decodes data into v with exact keys; false when data is not one JSON value, nests too deep, or does
// not fit v. v's json.RawMessage fields are slices of data, not copies: data is a request's body, which nothing
// writes to once read (fastBody).
func fastDecode(data []byte, v any) bool {
	if !strictjson.NestedAtMost(data, fastMaxDepth) {
		return false
	}
	rest, err := segjson.Parse(data, v, segjson.DontMatchCaseInsensitiveStructFields|segjson.DontCopyRawMessage)
	return err == nil && len(rest) == 0
}

// present reports whether a field was in the message with a value other than null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// serve answers the request when it is one the fast path takes; false: nothing was written and the body is as it
// was.
func (f *fastCalls) serve(w http.ResponseWriter, r *http.Request, sid string) (served bool) {
	fs := f.known(sid)
	if fs == nil || f.chain == nil || !fastHeaders(r) || !f.s.hostGuarded && rebound(r) {
		return false
	}
	p := fs.ss.InitializeParams()
	if p == nil || r.Header.Get("Mcp-Protocol-Version") != p.ProtocolVersion ||
		(p.ProtocolVersion != "2025-11-25" && p.ProtocolVersion != "2025-06-18") {
		return false
	}
	busy := fs.busy.Load() > 0
	if !busy && (!fs.fresh(f.s.opts.SessionIdleTimeout) || !fastCallable(p)) {
		return false // neither a call to take nor an answer or a cancellation of one
	}
	body, err := fastBody(r)
	defer func() {
		if !served {
			giveBack(r, body)
		}
	}()
	if err != nil || len(body) > fastMaxBody {
		return false
	}
	fc := new(fastCall)
	m := &fc.m
	if i := bytes.IndexByte(body, '{'); i < 0 || len(bytes.TrimSpace(body[:i])) > 0 || !fastDecode(body, m) ||
		string(m.JSONRPC) != `"2.0"` {
		return false // not one JSON-RPC object (a batch is an array)
	}
	if busy && f.takeAnswer(w, fs, m) {
		return true
	}
	if string(m.Method) != `"tools/call"` || !fastID(m.ID) || present(m.Result) || present(m.Error) ||
		!fs.fresh(f.s.opts.SessionIdleTimeout) || !fastCallable(p) {
		return false
	}
	params, name := &fc.params, &fc.name
	if !fastDecode(m.Params, params) || present(params.Meta) || present(params.Task) ||
		!fastDecode(params.Name, name) || *name == "" {
		return false // _meta (a progress token, a trace) or a task: the go-sdk serves it
	}
	args := params.Arguments
	if present(args) && args[0] != '{' {
		return false // arguments that are not an object: the go-sdk answers
	}
	if !present(args) {
		args = nil
	}
	f.s.mu.Lock()
	_, exposed := f.s.exposed[*name]
	f.s.mu.Unlock()
	info := sdkauth.TokenInfoFromContext(r.Context())
	if !exposed || !f.sameUser(fs.ss, info) {
		return false
	}
	id := string(m.ID)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	fs.mu.Lock()
	if _, dup := fs.calls[id]; dup {
		fs.mu.Unlock()
		return false // the go-sdk answers a duplicate id
	}
	fs.calls[id] = cancel
	fs.mu.Unlock()
	fs.busy.Add(1)
	f.served.Add(1)
	defer func() {
		fs.mu.Lock()
		delete(fs.calls, id)
		fs.mu.Unlock()
		fs.busy.Add(-1)
	}()

	out := &fc.out
	out.w = w
	if p.Capabilities != nil && p.Capabilities.RootsV2 != nil {
		ctx = context.WithValue(ctx, fastRelayKey{}, &fastRelay{f: f, fs: fs, out: out})
	}
	fc.params2 = mcp.CallToolParamsRaw{Name: *name, Arguments: args}
	fc.extra = mcp.RequestExtra{TokenInfo: info, Header: r.Header}
	fc.req = mcp.CallToolRequest{Session: fs.ss, Params: &fc.params2, Extra: &fc.extra}
	res, err := f.chain(ctx, "tools/call", &fc.req)
	out.answer(m.ID, res, err, fc.scratch[:0])
	return true
}

// fastCall is what a fast call keeps while it runs, in one allocation instead of one for each part (issue 26): the
// request's decoded fields, its stream, the go-sdk request given to the chain, and room for the answer of a text
// result.
type fastCall struct {
	m       fastMessage
	params  fastParams
	modern  fastModernParams
	name    string
	out     fastStream
	req     mcp.CallToolRequest
	params2 mcp.CallToolParamsRaw
	extra   mcp.RequestExtra
	scratch [512]byte
}

// fastBody reads a request's body, at most fastMaxBody+1 bytes: into one buffer of its declared length when it
// has one (net/http's body reader ends there), through io.ReadAll otherwise (chunked).
func fastBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > fastMaxBody {
		return io.ReadAll(io.LimitReader(r.Body, fastMaxBody+1))
	}
	buf := make([]byte, n+1) // one byte more: the read that meets the end of the body
	m, err := io.ReadFull(r.Body, buf)
	switch {
	case int64(m) == n && (err == io.ErrUnexpectedEOF || err == io.EOF):
		return buf[:n], nil
	case err == nil: // longer than declared: read on as without a length
		rest, err := io.ReadAll(io.LimitReader(r.Body, fastMaxBody+1-int64(m)))
		return append(buf, rest...), err
	}
	return buf[:m], err
}

// giveBack puts what fastBody read back in front of the rest of the body, for the go-sdk to read.
func giveBack(r *http.Request, body []byte) {
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
}

// fastHeaders checks what the go-sdk checks of a POST before looking at its body: JSON in, JSON and SSE accepted,
// no resumption.
func fastHeaders(r *http.Request) bool {
	// The go-sdk's clients send exactly "application/json": no parameter map to parse then.
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if r.Header.Get("Last-Event-ID") != "" {
		return false
	}
	jsonOK, sseOK := false, false
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				sseOK = true
			case "*/*":
				jsonOK, sseOK = true, true
			}
		}
	}
	return jsonOK && sseOK
}

// rebound is the go-sdk's DNS rebinding check (on unless Options.HostGuarded): a request that reached a loopback
// address under a Host that is not loopback is the go-sdk's to refuse (403).
func rebound(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && loopback(local.String()) && !loopback(r.Host)
}

// loopback reports whether host (with or without a port) is localhost or a loopback IP address.
func loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fastCallable reports whether a client's calls may take the fast path: one that declared sampling or elicitation
// may be asked something on the call's stream, which only the go-sdk's session can do.
func fastCallable(p *mcp.InitializeParams) bool {
	c := p.Capabilities
	return c == nil || c.Sampling == nil && c.Elicitation == nil
}

// fastID accepts the ids the fast path echoes as they came: a non-negative integer or a string without escapes.
func fastID(raw json.RawMessage) bool {
	if len(raw) == 0 || len(raw) > 64 {
		return false
	}
	if raw[0] == '"' {
		return len(raw) >= 2 && raw[len(raw)-1] == '"' && !bytes.ContainsAny(raw[1:len(raw)-1], "\\\"")
	}
	_, err := strconv.ParseUint(string(raw), 10, 63)
	return err == nil
}

// sameUser is the go-sdk's session binding (a session answers only the user that opened it): the POST's token
// must name the user whose identity the session's caller was remembered with (rememberCaller, from a request the
// go-sdk checked). Without auth no request carries a token, and no session is bound.
func (f *fastCalls) sameUser(ss *mcp.ServerSession, info *sdkauth.TokenInfo) bool {
	if info == nil {
		return !f.s.requireIdentity
	}
	c := f.s.callers
	c.mu.Lock()
	id, ok := c.by[ss]
	c.mu.Unlock()
	if !ok {
		return false
	}
	user := id.Name
	if id.OAuth {
		user = id.RateKey()
	}
	return user == info.UserID
}

// takeAnswer takes a POST that answers a request a fast call sent (its id has our prefix), or cancels a fast call
// (notifications/cancelled naming its id).
func (f *fastCalls) takeAnswer(w http.ResponseWriter, fs *fastSession, m *fastMessage) bool {
	if string(m.Method) == `"notifications/cancelled"` {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if present(m.ID) || !fastDecode(m.Params, &p) {
			return false
		}
		fs.mu.Lock()
		cancel, ok := fs.calls[string(p.RequestID)]
		fs.mu.Unlock()
		if !ok {
			return false
		}
		cancel()
		w.WriteHeader(http.StatusAccepted)
		return true
	}
	var id string
	if len(m.Method) > 0 || !fastDecode(m.ID, &id) || !strings.HasPrefix(id, fastRequestIDPrefix) {
		return false
	}
	var resp jsonrpc.Response
	switch {
	case present(m.Error):
		var e jsonrpc.Error
		if json.Unmarshal(m.Error, &e) != nil {
			return false
		}
		resp.Error = &e
	case len(m.Result) > 0:
		resp.Result = m.Result
	default:
		return false
	}
	f.mu.Lock()
	ch, ok := f.waiting[id]
	delete(f.waiting, id)
	f.mu.Unlock()
	if !ok {
		return false
	}
	ch <- &resp // buffered: the waiter may have gone
	w.WriteHeader(http.StatusAccepted)
	return true
}

// fastStream is the SSE response of a fast call: its relayed requests and notifications, then its answer.
type fastStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool
	done    bool
	buf     bytes.Buffer
	head    [3]string // the values of the stream's headers (start)
}

// event writes one JSON-RPC message as the go-sdk does ("event: message", no id: no event store).
func (s *fastStream) event(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errors.New("the call's stream is closed")
	}
	s.start()
	s.buf.Reset()
	s.buf.WriteString("event: message\ndata: ")
	s.buf.Write(msg)
	s.buf.WriteString("\n\n")
	_, err := s.w.Write(s.buf.Bytes())
	_ = http.NewResponseController(s.w).Flush()
	return err
}

// start writes the stream's head once, the go-sdk's headers (set by their canonical names, without Header.Set's
// canonicalisation).
func (s *fastStream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	s.head = [3]string{"no-cache, no-transform", "text/event-stream", "keep-alive"}
	h["Cache-Control"] = s.head[0:1:1]
	h["Content-Type"] = s.head[1:2:2]
	h["Connection"] = s.head[2:3:3]
	s.w.WriteHeader(http.StatusOK)
}

// answer writes the call's JSON-RPC response and closes the stream, encoded as the go-sdk's JSON-RPC connection
// encodes it (jsonMarshal: no HTML escaping). A text-only tool result is written as json.Marshal writes it,
// without its reflection (toolresult), into scratch (the call's own room: no buffer of its own when it fits); the
// go-sdk's result and content encoders escape HTML themselves, so the encoder of answerEncoded writes the same
// bytes.
func (s *fastStream) answer(id json.RawMessage, res mcp.Result, err error, scratch []byte) {
	if r, ok := res.(*mcp.CallToolResult); ok && err == nil {
		b := append(scratch, `{"jsonrpc":"2.0","id":`...)
		b = append(b, id...)
		b = append(b, `,"result":`...)
		if out, ok := toolresult.Append(b, r); ok {
			s.finish(append(out, '}'))
			return
		}
	}
	s.answerEncoded(id, res, err)
}

// answerEncoded is answer through encoding/json.
func (s *fastStream) answerEncoded(id json.RawMessage, res mcp.Result, err error) {
	var b bytes.Buffer
	b.Grow(256)
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	mark := b.Len()
	if err == nil {
		b.WriteString(`,"result":`)
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err = enc.Encode(res); err != nil {
			b.Truncate(mark)
		}
	}
	if err != nil {
		b.WriteString(`,"error":`)
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(wireError(err))
	}
	out := bytes.TrimRight(b.Bytes(), "\n")
	s.finish(append(out, '}'))
}

// finish writes the call's answer, the stream's last event, and closes the stream. The handler returns right
// after it and net/http ends the response then: the answer is not flushed by itself (a response the handler left
// in net/http's buffer goes out in one write, with a Content-Length, where a flush sends the chunked head and body
// and then the closing chunk in a second write).
func (s *fastStream) finish(msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	s.start()
	// In three writes to net/http's buffer rather than copied into one of the stream's own: nothing reaches the
	// connection before the handler returns.
	_, _ = io.WriteString(s.w, "event: message\ndata: ")
	_, _ = s.w.Write(msg)
	_, _ = io.WriteString(s.w, "\n\n")
}

// wireError is the error object the go-sdk's JSON-RPC connection makes of a handler's error (toWireError).
func wireError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		if e, ok := err.(*jsonrpc.Error); ok {
			return e
		}
		return &jsonrpc.Error{Code: we.Code, Message: err.Error()}
	}
	return &jsonrpc.Error{Message: err.Error()}
}

// fastRelayKey carries a fast call's relay to relayedCall (withCallRelay).
type fastRelayKey struct{}

// withCallRelay is withRelay for a call of either path: a fast call's backend asks and logs through its stream.
func withCallRelay(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if r, ok := ctx.Value(fastRelayKey{}).(*fastRelay); ok {
		return actors.WithRelay(ctx, r)
	}
	return withRelay(ctx, req)
}

// fastRelay is a fast call's sessionRelay: roots/list and log messages go out on the call's stream, as the
// go-sdk's session would send them for a call it serves. Its client declared neither sampling nor elicitation
// (fastCallable), so the backend's requests of those are refused as they would be.
type fastRelay struct {
	f   *fastCalls
	fs  *fastSession
	out *fastStream
}

func (r *fastRelay) Supports(method string) bool { return sessionRelay{r.fs.ss}.Supports(method) }

func (r *fastRelay) Elicit(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client does not support elicitation"}
}

func (r *fastRelay) CreateMessage(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client does not support sampling"}
}

func (r *fastRelay) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (res *mcp.ListRootsResult, err error) {
	ctx, end := telemetry.Relayed(ctx, "roots/list", r.fs.ss.ID())
	defer func() { end(err) }()
	if p == nil {
		p = &mcp.ListRootsParams{}
	}
	params, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	id := fastRequestIDPrefix + strconv.FormatUint(r.f.nextID.Add(1), 10)
	ch := make(chan *jsonrpc.Response, 1)
	r.f.mu.Lock()
	r.f.waiting[id] = ch
	r.f.mu.Unlock()
	defer func() {
		r.f.mu.Lock()
		delete(r.f.waiting, id)
		r.f.mu.Unlock()
	}()
	msg, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      string          `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}{"2.0", id, "roots/list", params})
	r.fs.busy.Add(1) // the answer comes in a POST of the session: look into its POSTs until then
	defer r.fs.busy.Add(-1)
	if err := r.out.event(msg); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, resp.Error
		}
		res = &mcp.ListRootsResult{}
		if err := json.Unmarshal(resp.Result, res); err != nil {
			return nil, err
		}
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// logSeverity orders the MCP log levels (RFC 5424, least severe first).
var logSeverity = map[mcp.LoggingLevel]int{"debug": 0, "info": 1, "notice": 2, "warning": 3, "error": 4,
	"critical": 5, "alert": 6, "emergency": 7}

// Log sends a backend's log message on the call's stream when the client set a level it reaches (ServerSession.Log).
func (r *fastRelay) Log(_ context.Context, p *mcp.LoggingMessageParams) {
	level := r.fs.level.Load()
	if level == nil || *level == "" || p == nil || logSeverity[p.Level] < logSeverity[*level] {
		return
	}
	msg, err := json.Marshal(struct {
		JSONRPC string                    `json:"jsonrpc"`
		Method  string                    `json:"method"`
		Params  *mcp.LoggingMessageParams `json:"params"`
	}{"2.0", "notifications/message", p})
	if err == nil {
		_ = r.out.event(msg)
	}
}
