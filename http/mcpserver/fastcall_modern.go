package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The fast path of a 2026-07-28 tools/call on /mcp (issue 26). The revision has no sessions: the go-sdk serves each
// of its requests from its stateless handler, which connects a temporary server session per HTTP request (about
// 270 allocations and 0.5 MB of a call, BENCHMARKS.md) before running the same receiving chain as for a session's
// call. What the chain reads of that temporary session is what the go-sdk made of the request's _meta (the
// protocol version, the client's info and capabilities, as its InitializeParams): the same _meta bytes always make
// the same, and the chain keeps no per-session state of such a call (no session id: trackCalls, rememberCaller and
// the session binding do not apply; identity and scope come from the request's token).
//
// So the fast path learns from the go-sdk: the first plain call with given _meta bytes goes to the go-sdk as before,
// marked with those bytes (fastMetaHeader, which no client can set: it is deleted from every request first); when
// the go-sdk has validated the _meta and runs the chain, capture sees the mark and connects one long-lived session
// of the endpoint's server with the temporary session's InitializeParams (an idle connection: no id, nothing read,
// notifications dropped, as the go-sdk's stateless connection drops what has no request stream to go on). Later
// calls with the same _meta bytes run the captured chain with that session, and their answer gets what the
// go-sdk's session adds to a 2026-07-28 result (its serverInfo in _meta) and is written as the go-sdk writes it.
// The fast path sits inside the session caps' wrapper (sessionTable.streamable), so a fast call counts against them
// as the go-sdk's does.
//
// Only the plainest call is taken, everything else goes to the go-sdk: a _meta with anything beyond the protocol
// version, client info and capabilities (a log level, a progress token, a trace context: the go-sdk puts them in
// the call's context or on its stream), a retry of a multi-round-trip call (requestState, inputResponses), a task,
// arguments that are not an object, a name that is not an exposed alias, a tool whose schema binds arguments to
// headers (x-mcp-header), a request without the Mcp-Method and Mcp-Name headers the revision requires (or with
// other values), any Mcp-Param-* header, a version other than 2026-07-28, and the go-sdk's own checks of the
// headers before it reads the body (fastHeaders, rebound). A call whose backend asks the client something is
// taken: the multi-round-trip bridge (roundtrip.go) runs in the chain, with the capabilities the learnt session
// carries; the client's retry then goes to the go-sdk and finds the held call the same way.

// fastMetaHeader marks a request the go-sdk serves so that capture can learn what it made of the request's _meta
// (its value is the _meta's bytes).
const fastMetaHeader = "X-Mcpgw-Fast-Meta"

// fastMaxLearnt bounds the _meta variants (clients of different capabilities) that get a learnt session; past it,
// calls of new variants go to the go-sdk.
const fastMaxLearnt = 64

// fastMaxMeta bounds the _meta a learnt session is kept for.
const fastMaxMeta = 4096

// fastModernKeys are the _meta keys of a plain 2026-07-28 call: all that the go-sdk makes of them is the session's
// InitializeParams.
var fastModernKeys = map[string]bool{mcp.MetaKeyProtocolVersion: true, mcp.MetaKeyClientInfo: true, mcp.MetaKeyClientCapabilities: true}

// fastModernParams are the params of a 2026-07-28 tools/call as the go-sdk reads them (CallToolParamsRaw).
type fastModernParams struct {
	Name           json.RawMessage `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	Meta           json.RawMessage `json:"_meta"`
	Task           json.RawMessage `json:"task"`
	RequestState   json.RawMessage `json:"requestState"`
	InputResponses json.RawMessage `json:"inputResponses"`
}

// modernHandler serves the fast 2026-07-28 tools/call and hands every other request to next, the go-sdk's stateless
// handler.
func (f *fastCalls) modernHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(fastMetaHeader) // only the fast path sets it
		if r.Method == http.MethodPost && f.serveModern(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveModern answers the request when it is a plain 2026-07-28 tools/call of a learnt _meta; false: nothing was
// written and the body is as it was (with the mark set when the go-sdk's answer may teach the _meta).
func (f *fastCalls) serveModern(w http.ResponseWriter, r *http.Request) (served bool) {
	if f.off.Load() || f.chain == nil || r.Header.Get("Mcp-Protocol-Version") != ModernProtocol ||
		r.Header.Get("Mcp-Method") != "tools/call" || !fastHeaders(r) || !f.s.hostGuarded && rebound(r) {
		return false
	}
	header := r.Header.Get("Mcp-Name")
	if header == "" {
		return false
	}
	for k := range r.Header {
		if len(k) >= len("Mcp-Param-") && strings.EqualFold(k[:len("Mcp-Param-")], "Mcp-Param-") {
			return false
		}
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
		string(m.JSONRPC) != `"2.0"` || string(m.Method) != `"tools/call"` || !fastID(m.ID) || present(m.Result) ||
		present(m.Error) {
		return false
	}
	params, name := &fc.modern, &fc.name
	if !fastDecode(m.Params, params) || present(params.Task) || present(params.RequestState) ||
		present(params.InputResponses) || !fastDecode(params.Name, name) || *name == "" || *name != header {
		return false
	}
	meta := params.Meta
	if len(meta) == 0 || meta[0] != '{' || len(meta) > fastMaxMeta {
		return false
	}
	args := params.Arguments
	if present(args) && args[0] != '{' {
		return false
	}
	if !present(args) {
		args = nil
	}
	f.s.mu.Lock()
	e, exposed := f.s.exposed[*name]
	f.s.mu.Unlock()
	if !exposed || !plainSchema(e.tool) {
		return false
	}
	f.mu.Lock()
	ss := f.learnt[string(meta)]
	room := len(f.learnt) < fastMaxLearnt
	f.mu.Unlock()
	if ss == nil {
		if room {
			r.Header.Set(fastMetaHeader, string(meta)) // for capture to learn from the go-sdk's answer
		}
		return false
	}

	f.served.Add(1)
	f.servedModern.Add(1)
	out := &fc.out
	out.w = w
	fc.params2 = mcp.CallToolParamsRaw{Name: *name, Arguments: args}
	fc.extra = mcp.RequestExtra{TokenInfo: sdkauth.TokenInfoFromContext(r.Context()), Header: r.Header,
		CloseSSEStream: noCloseSSEStream} // a no-op under 2026-07-28, as the go-sdk's
	fc.req = mcp.CallToolRequest{Session: ss, Params: &fc.params2, Extra: &fc.extra}
	res, err := f.chain(r.Context(), "tools/call", &fc.req)
	if err == nil {
		annotateServerInfo(res, f.impl)
	}
	out.answer(m.ID, res, err, fc.scratch[:0])
	return true
}

// noCloseSSEStream is a 2026-07-28 fast call's RequestExtra.CloseSSEStream: a no-op, as the go-sdk's.
func noCloseSSEStream(mcp.CloseSSEStreamArgs) {}

// plainSchema reports whether a tool's input schema binds no argument to a header (x-mcp-header), which the
// go-sdk checks against the request's Mcp-Param-* headers.
func plainSchema(t *mcp.Tool) bool {
	if t == nil {
		return false
	}
	raw, ok := t.InputSchema.(json.RawMessage)
	return ok && !bytes.Contains(raw, []byte("x-mcp-header"))
}

// annotateServerInfo is what the go-sdk's session adds to a 2026-07-28 result (SEP-2575): the server's
// implementation in _meta, unless the result names one already.
func annotateServerInfo(res mcp.Result, impl *mcp.Implementation) {
	if res == nil || impl == nil {
		return
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r == nil {
		return
	}
	m := res.GetMeta()
	if m == nil {
		m = map[string]any{}
	}
	if _, ok := m[mcp.MetaKeyServerInfo]; ok {
		return
	}
	m[mcp.MetaKeyServerInfo] = impl
	res.SetMeta(m)
}

// learn keeps what the go-sdk made of a marked call's _meta: its temporary session's InitializeParams, on a session
// of its own that later calls with the same _meta bytes run with (see above). Called by capture for every
// tools/call, before the chain runs.
func (f *fastCalls) learn(req mcp.Request) {
	extra := req.GetExtra()
	if extra == nil || extra.Header == nil {
		return
	}
	key := extra.Header.Get(fastMetaHeader)
	if key == "" {
		return
	}
	ss, ok := req.GetSession().(*mcp.ServerSession)
	p, isCall := req.GetParams().(*mcp.CallToolParamsRaw)
	if !ok || ss == nil || ss.ID() != "" || !isCall || p == nil || len(p.Meta) == 0 {
		return
	}
	for k := range p.Meta {
		if !fastModernKeys[k] {
			return // a log level, a progress token, a trace context: the go-sdk's to serve
		}
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion != ModernProtocol {
		return
	}
	f.mu.Lock()
	_, have := f.learnt[key]
	full := len(f.learnt) >= fastMaxLearnt || f.closed
	f.mu.Unlock()
	if have || full {
		return
	}
	params := *ip
	learnt, err := f.s.mcp.Connect(context.Background(), fastIdleTransport{},
		&mcp.ServerSessionOptions{State: &mcp.ServerSessionState{InitializeParams: &params}})
	if err != nil {
		return
	}
	f.mu.Lock()
	if _, have := f.learnt[key]; have || len(f.learnt) >= fastMaxLearnt || f.closed {
		f.mu.Unlock()
		_ = learnt.Close()
		return
	}
	f.learnt[key] = learnt
	f.idle[learnt] = true
	f.mu.Unlock()
	go func() {
		_ = learnt.Wait()
		f.mu.Lock()
		if f.learnt[key] == learnt {
			delete(f.learnt, key)
		}
		delete(f.idle, learnt)
		f.mu.Unlock()
	}()
}

// isLearnt reports whether ss is one of the fast path's learnt sessions (no client's).
func (f *fastCalls) isLearnt(ss *mcp.ServerSession) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idle[ss]
}

// close ends the learnt sessions (the endpoint closes).
func (f *fastCalls) close() {
	f.mu.Lock()
	f.closed = true
	sessions := make([]*mcp.ServerSession, 0, len(f.learnt))
	for _, ss := range f.learnt {
		sessions = append(sessions, ss)
	}
	f.mu.Unlock()
	for _, ss := range sessions {
		_ = ss.Close()
	}
}

// fastIdleTransport is the connection of a learnt session: nothing to read, and the notifications the server sends
// every session dropped (a 2026-07-28 client hears them on its subscriptions/listen stream). A request to the client
// is refused, as the go-sdk's stateless connection refuses it.
type fastIdleTransport struct{}

func (fastIdleTransport) Connect(context.Context) (mcp.Connection, error) {
	return &fastIdleConn{closed: make(chan struct{})}, nil
}

type fastIdleConn struct {
	once   sync.Once
	closed chan struct{}
}

func (c *fastIdleConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fastIdleConn) Write(_ context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		return errors.New("stateless servers cannot make requests")
	}
	return nil
}

func (c *fastIdleConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *fastIdleConn) SessionID() string { return "" }
