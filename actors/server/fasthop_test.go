package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

// hostileHop is a streamable HTTP backend written by hand on the wire, whose tools/call answers as the tool's name
// says: plainly (SSE or a JSON body), with a log message or a roots/list request first, oversized, never, with
// another id, garbage, an HTTP failure, a forgotten session, or a stream cut after an event id (resumed by GET).
type hostileHop struct {
	t       *testing.T
	sid     string
	calls   atomic.Int32 // tools/call requests received
	cancels atomic.Int32 // notifications/cancelled received
	mu      sync.Mutex
	answers map[string]chan json.RawMessage // our requests to the client by id -> its answer's result
	pending string                          // the id of the call whose stream was cut (resume)
	// lingering counts the streams held open after their answer (linger) until the client leaves or release
	// closes (the test's end).
	lingering atomic.Int32
	release   chan struct{}
	conns     atomic.Int32 // connections accepted
}

func (h *hostileHop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		if r.Header.Get("Last-Event-ID") == "1" && h.pending != "" {
			sse(w, `{"jsonrpc":"2.0","id":`+h.pending+`,"result":{"content":[{"type":"text","text":"resumed"}]}}`)
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if r.Method == http.MethodDelete {
		return
	}
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	if m.Method == "initialize" {
		h.mu.Lock()
		w.Header().Set("Mcp-Session-Id", h.sid)
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"hostile","version":"1"}}}`,
			m.ID, ProtocolVersion)
		return
	}
	h.mu.Lock()
	sid := h.sid
	h.mu.Unlock()
	if r.Header.Get("Mcp-Session-Id") != sid {
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	switch {
	case m.Method == "notifications/cancelled":
		h.cancels.Add(1)
		w.WriteHeader(http.StatusAccepted)
		return
	case m.Method == "" && len(m.ID) > 0: // the client's answer to our request
		h.mu.Lock()
		ch := h.answers[string(m.ID)]
		h.mu.Unlock()
		if ch != nil {
			ch <- m.Result
		}
		w.WriteHeader(http.StatusAccepted)
		return
	case strings.HasPrefix(m.Method, "notifications/"):
		w.WriteHeader(http.StatusAccepted)
		return
	case m.Method == "ping":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		return
	case m.Method != "tools/call":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		return
	}
	h.calls.Add(1)
	result := func(text string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID, text)
	}
	switch m.Params.Name {
	case "echo":
		sse(w, result(string(m.Params.Arguments)))
	case "json":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, result("json"))
	case "error":
		sse(w, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"backend says no"}}`, m.ID))
	case "log":
		sse(w, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hello"}}`, result("logged"))
	case "roots":
		ch := make(chan json.RawMessage, 1)
		h.mu.Lock()
		h.answers[`"r1"`] = ch
		h.mu.Unlock()
		sse(w, `{"jsonrpc":"2.0","id":"r1","method":"roots/list","params":{}}`)
		select {
		case res := <-ch:
			sse(w, result("roots "+string(res)))
		case <-time.After(5 * time.Second):
			sse(w, result("no roots answer"))
		}
	case "sampling":
		ch := make(chan json.RawMessage, 1)
		h.mu.Lock()
		h.answers[`"s1"`] = ch
		h.mu.Unlock()
		sse(w, `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5}}`)
		select {
		case res := <-ch:
			if strings.Contains(string(res), "sampled") {
				sse(w, result("sampling answered"))
			} else {
				sse(w, result("sampling refused"))
			}
		case <-time.After(5 * time.Second):
			sse(w, result("no sampling answer"))
		}
	case "big":
		sse(w, result(strings.Repeat("x", 200<<10)))
	case "big-noid": // the guard answers with the POST's own id (the hop's body names it)
		sse(w, `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"`+strings.Repeat("x", 200<<10)+`"}]}}`)
	case "endless":
		sse(w)
		for r.Context().Err() == nil {
			io.WriteString(w, ": keep-alive\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	case "linger": // the answer, then the stream held open (the protocol says SHOULD close, not MUST)
		h.lingering.Add(1)
		defer h.lingering.Add(-1)
		sse(w, result("lingered"))
		select {
		case <-r.Context().Done():
		case <-h.release:
		}
	case "wrongid":
		sse(w, `{"jsonrpc":"2.0","id":987654,"result":{"content":[]}}`)
	case "garbage":
		sse(w, `this is not json`)
	case "garbage-json":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{{{`)
	case "status500":
		http.Error(w, "boom", http.StatusInternalServerError)
	case "status400":
		http.Error(w, "no", http.StatusBadRequest)
	case "status503":
		http.Error(w, "later", http.StatusServiceUnavailable)
	case "gone": // the backend forgets the session (a restart, an expiry)
		h.mu.Lock()
		h.sid = "s-2"
		h.mu.Unlock()
		http.Error(w, "session not found", http.StatusNotFound)
	case "resume":
		h.pending = string(m.ID)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 1\nretry: 10\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"before the cut\"}}\n\n")
	}
}

// sse writes an event stream with one message event per message.
func sse(w http.ResponseWriter, msgs ...string) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	}
	for _, m := range msgs {
		io.WriteString(w, "event: message\ndata: "+m+"\n\n")
	}
	http.NewResponseController(w).Flush()
}

// hopRig is one session to a hostile backend, with the go-sdk client the server actor builds (its handlers
// recording what reached them) and the fast hop beside it.
type hopRig struct {
	hostile *hostileHop
	sess    *mcp.ClientSession
	hop     *fastHop
	logs    chan string
	roots   atomic.Int32
	// heldAtReturn is the backend's count of streams held open after their answer when the call returned.
	heldAtReturn int32
}

func newHopRig(t *testing.T) *hopRig {
	t.Helper()
	h := &hostileHop{t: t, sid: "s-1", answers: map[string]chan json.RawMessage{}, release: make(chan struct{})}
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			h.conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(h.release) }) // before hs.Close, which waits for the handlers
	rec := persistence.Server{Name: "hostile", TransportType: persistence.TransportHTTP,
		ConnectionConfig: json.RawMessage(fmt.Sprintf(`{"base_url":%q,"allow_insecure_http":true}`, hs.URL))}
	b, err := backend.Dial(rec, backend.Options{Guard: &msglimit.Guard{Limit: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	r := &hopRig{hostile: h, logs: make(chan string, 10)}
	r.hop = newFastHop(b)
	if r.hop == nil {
		t.Fatal("no fast hop for a streamable HTTP session")
	}
	r.hop.drainWait = 300 * time.Millisecond
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{}},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			r.logs <- fmt.Sprint(req.Params.Data)
		},
		// The go-sdk's own handler answers sampling (a relay would, for the calling client): the request reaches
		// the end of the receiving chain, which takes only the go-sdk's request type for the method.
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		},
	})
	// What relayMiddleware does for roots/list: the test's answer stands for the calling client's.
	client.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "roots/list" {
				r.roots.Add(1)
				return &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///work"}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	client.AddReceivingMiddleware(r.hop.capture)
	sess, err := client.Connect(context.Background(), b.Transport(), &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	r.sess = sess
	r.hop.sess.Store(sess)
	return r
}

// call makes one call of tool on the fast hop or the go-sdk session, as the server actor does.
func (r *hopRig) call(ctx context.Context, fast bool, tool string) (*mcp.CallToolResult, error) {
	if !fast {
		return r.sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(`{"a":1}`)})
	}
	s, ok := r.hop.ready()
	if !ok || s != r.sess {
		return nil, errors.New("the hop is not ready")
	}
	// As the server actor does: the answer handed over first, then the rest of its stream read, on the call's
	// context, which ends after it.
	cctx, end := context.WithCancel(ctx)
	var tail hopTail
	raw, err := r.hop.call(cctx, s, tool, json.RawMessage(`{"a":1}`), "req-1", &tail)
	go func() {
		tail.finishTail(end)
		end()
	}()
	if err != nil {
		return nil, err
	}
	return decodeResult(raw)
}

// ended reports whether the session ends within d.
func (r *hopRig) ended(d time.Duration) bool {
	done := make(chan struct{})
	go func() { _ = r.sess.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// broken reports whether the session is of no more use: ended within d, or failing a ping (the go-sdk fails its
// connection on some answers without ending the session; the daemon's keep-alive ping then ends it).
func (r *hopRig) broken(d time.Duration) bool {
	if r.ended(d) {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.sess.Ping(ctx, nil) != nil
}

func resultText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) != 1 {
		return fmt.Sprintf("%+v", res)
	}
	if t, ok := res.Content[0].(*mcp.TextContent); ok {
		return t.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}

// TestFastHopBehavesAsTheGoSDK runs each hostile answer through the fast hop and through the go-sdk client session,
// on sessions of their own, and checks that both end the same way: the same result or error code (as the server
// actor classifies it), the log message or roots/list request of the stream handled, the session kept or ended.
// A fast hop that skipped a behaviour (a bound, a relayed message, the 404 reconnect) fails here.
func TestFastHopBehavesAsTheGoSDK(t *testing.T) {
	type outcome struct {
		text  string // the result's text, "" on error
		code  string // classifyCallError's code, "" on success
		ended bool   // the session ended or is broken (broken)
	}
	tests := []struct {
		tool    string
		timeout time.Duration
		want    outcome
		check   func(t *testing.T, r *hopRig)
		// stream: the backend answers with an event stream, which the hop takes event by event from the message
		// guard (processEvents), never as the guard's re-encoded text.
		stream bool
	}{
		{tool: "echo", stream: true, want: outcome{text: `{"a":1}`}},
		{tool: "json", want: outcome{text: "json"}},
		{tool: "error", stream: true, want: outcome{code: errcode.ExecutionFailed}},
		{tool: "log", stream: true, want: outcome{text: "logged"}, check: func(t *testing.T, r *hopRig) {
			select {
			case l := <-r.logs:
				if l != "hello" {
					t.Errorf("log message %q, want hello", l)
				}
			case <-time.After(5 * time.Second):
				t.Error("the backend's log message did not reach the client's handler")
			}
		}},
		{tool: "roots", stream: true, want: outcome{text: `roots {"roots":[{"uri":"file:///work"}]}`}, check: func(t *testing.T, r *hopRig) {
			if r.roots.Load() != 1 {
				t.Errorf("roots/list reached the chain %d times, want 1", r.roots.Load())
			}
		}},
		{tool: "sampling", stream: true, want: outcome{text: "sampling answered"}},
		{tool: "big", stream: true, want: outcome{code: errcode.ResponseTooLarge}},
		{tool: "big-noid", stream: true, want: outcome{code: errcode.ResponseTooLarge}},
		{tool: "endless", stream: true, timeout: time.Second, want: outcome{code: errcode.RequestTimeout}, check: func(t *testing.T, r *hopRig) {
			deadline := time.Now().Add(5 * time.Second)
			for r.hostile.cancels.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if r.hostile.cancels.Load() != 1 {
				t.Errorf("the backend got %d notifications/cancelled for the call given up, want 1", r.hostile.cancels.Load())
			}
		}},
		// The answer goes to the caller while the backend still holds the stream, as the go-sdk's client gives it;
		// the fast hop then closes the stream (and its connection) after its drain wait.
		{tool: "linger", stream: true, timeout: 8 * time.Second, want: outcome{text: "lingered"}, check: func(t *testing.T, r *hopRig) {
			if r.heldAtReturn != 1 {
				t.Fatalf("the call returned after its stream ended (%d held), not at its answer", r.heldAtReturn)
			}
			if r.hop.taken.Load() == 0 {
				return // the go-sdk session reads on until the test's end
			}
			// The check starts about 2 s after the call (broken); the call's own deadline, which would close the
			// stream too, is 8 s after it.
			deadline := time.Now().Add(3 * time.Second)
			for r.hostile.lingering.Load() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if r.hostile.lingering.Load() != 0 {
				t.Error("the fast hop did not close a stream held open after its answer within its drain wait")
			}
			if n := r.hop.finishing.Load(); n != 0 {
				t.Errorf("%d streams still counted as read on after their answer", n)
			}
		}},
		{tool: "wrongid", stream: true, want: outcome{code: errcode.ServerUnavailable}},
		{tool: "garbage", stream: true, want: outcome{code: errcode.ServerUnavailable, ended: true}},
		{tool: "garbage-json", want: outcome{code: errcode.ServerUnavailable, ended: true}},
		{tool: "status500", want: outcome{code: errcode.ServerUnavailable}},
		{tool: "status400", want: outcome{code: errcode.ServerUnavailable, ended: true}},
		{tool: "status503", want: outcome{code: errcode.ServerUnavailable}},
		{tool: "gone", want: outcome{code: errcode.ServerUnavailable, ended: true}},
		{tool: "resume", stream: true, want: outcome{text: "resumed"}},
	}
	for _, tc := range tests {
		for _, fast := range []bool{false, true} {
			name := tc.tool + "/go-sdk"
			if fast {
				name = tc.tool + "/fast"
			}
			t.Run(name, func(t *testing.T) {
				r := newHopRig(t)
				timeout := tc.timeout
				if timeout == 0 {
					timeout = 20 * time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				res, err := r.call(ctx, fast, tc.tool)
				r.heldAtReturn = r.hostile.lingering.Load()
				var got outcome
				if err == nil {
					got.text = resultText(res)
				} else {
					got.code = classifyCallError(ctx, err, "hostile", "CONNECTED", tc.tool).Code
				}
				got.ended = r.broken(2 * time.Second)
				if got != tc.want {
					t.Errorf("got %+v (error %v), want %+v", got, err, tc.want)
				}
				if fast && r.hop.taken.Load() != 1 {
					t.Errorf("the hop sent %d calls, want 1", r.hop.taken.Load())
				}
				if fast && tc.stream && r.hop.events.Load() == 0 {
					t.Errorf("the hop read the call's event stream as text, not event by event from the message guard")
				}
				if n := r.hostile.calls.Load(); n != 1 {
					t.Errorf("the backend got the call %d times, want once", n)
				}
				if tc.check != nil {
					tc.check(t, r)
				}
			})
		}
	}
}

// TestFastHopStepsAside: what the hop leaves to the go-sdk is decided before sending: a session whose backend
// resumed a stream (SSE event ids) takes no more fast calls, and a session that ended takes none.
func TestFastHopStepsAside(t *testing.T) {
	r := newHopRig(t)
	if _, ok := r.hop.ready(); !ok {
		t.Fatal("a fresh streamable session is not ready for the hop")
	}
	res, err := r.call(context.Background(), true, "resume")
	if err != nil || resultText(res) != "resumed" {
		t.Fatalf("resume: %v %v", resultText(res), err)
	}
	if _, ok := r.hop.ready(); ok {
		t.Error("the hop still takes calls of a backend that sends event ids")
	}

	r = newHopRig(t)
	if _, err := r.call(context.Background(), true, "gone"); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("a 404 on the session id: got %v, want ErrSessionMissing", err)
	}
	if !r.ended(5 * time.Second) {
		t.Error("the go-sdk session did not end after the backend forgot it")
	}
}

// TestFastHopReusesConnections: reading the rest of an answered stream after the answer is handed over keeps the
// connection for the next calls; one closed per call would show as a connection per call.
func TestFastHopReusesConnections(t *testing.T) {
	r := newHopRig(t)
	before := r.hostile.conns.Load()
	const calls = 40
	for i := range calls {
		res, err := r.call(context.Background(), true, "echo")
		if err != nil || resultText(res) != `{"a":1}` {
			t.Fatalf("call %d: %v %v", i, resultText(res), err)
		}
	}
	if n := r.hostile.conns.Load() - before; n > calls/4 {
		t.Errorf("%d sequential calls opened %d connections, want them reused", calls, n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.hop.finishing.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := r.hop.finishing.Load(); n != 0 {
		t.Errorf("%d streams still counted as read on after their answer", n)
	}
}

// TestDecodeResultMatchesGoSDK: the in-place decode of a result gives what the go-sdk's decoder gives, and
// results it does not cover (other content, structured content) go to the go-sdk's decoder.
func TestDecodeResultMatchesGoSDK(t *testing.T) {
	for _, raw := range []string{
		`{"content":[{"type":"text","text":"hi"}]}`,
		`{"content":[{"type":"text","text":"a\"b\u00e9","_meta":{"k":1},"annotations":{"priority":0.5}}],"isError":true,"_meta":{"x":"y"}}`,
		`{"content":[]}`,
		`{}`,
		`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`,
		`{"content":[{"type":"text","text":"s"}],"structuredContent":{"n":1}}`,
		`{"content":[{"type":"text","Text":"case"}]}`,
	} {
		got, err := decodeResult(json.RawMessage(raw))
		var want mcp.CallToolResult
		werr := json.Unmarshal([]byte(raw), &want)
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: error %v, go-sdk %v", raw, err, werr)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(&want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s:\n got %s\nwant %s", raw, g, w)
		}
	}
	for _, bad := range []string{`{"content":[null]}`, `{"content":[{"type":"nope"}]}`, `[1]`, `{"content":`} {
		if _, err := decodeResult(json.RawMessage(bad)); err == nil {
			t.Errorf("%s: decoded, want an error as the go-sdk gives", bad)
		}
	}
}

var _ = jsonrpc.CodeMethodNotFound

// TestAppendJSONString: the hop's request writes names and ids as JSON strings that decode to what was given.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "echo", "a b", `q"uote`, `back\slash`, "tab\there", "é ü", "<&>", "\x00", "\xff"} {
		b := appendJSONString([]byte("x"), s)
		var got string
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Errorf("%q: %s does not decode: %v", s, b[1:], err)
			continue
		}
		want := s
		if s == "\xff" {
			want = "\ufffd" // as encoding/json writes invalid UTF-8
		}
		if got != want {
			t.Errorf("%q: decodes to %q", s, got)
		}
	}
}
