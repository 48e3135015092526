package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// The _meta of a plain 2026-07-28 request, and of one from a client that can answer elicitation.
const (
	modernMeta       = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	modernElicitMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
)

// modernCall is one raw 2026-07-28 tools/call: the body's id, name, arguments and _meta as JSON text ("" leaves
// the key out), and the headers (nil: the ones a client of the revision sends for name).
type modernCall struct {
	id, name, args, meta, extra string
	header                      map[string]string
	host                        string // the request's Host ("" the listener's)
}

func (c modernCall) body() string {
	params := []string{}
	if c.name != "" {
		params = append(params, `"name":`+strconvQuote(c.name))
	}
	if c.args != "" {
		params = append(params, `"arguments":`+c.args)
	}
	if c.meta != "" {
		params = append(params, `"_meta":`+c.meta)
	}
	if c.extra != "" {
		params = append(params, c.extra)
	}
	id := c.id
	if id == "" {
		id = "7"
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + strings.Join(params, ",") + `}}`
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// modernAnswer is what the client sees of an answer, with the parts that differ between any two calls (the
// routing metadata's timings and ids, a held call's request state) blanked.
type modernAnswer struct {
	status int
	ctype  string
	body   string
	raw    string // the body as it came (not compared)
}

// same reports whether two answers are the same to a client, what varies between any two calls aside.
func (a modernAnswer) same(b modernAnswer) bool {
	return a.status == b.status && a.ctype == b.ctype && a.body == b.body
}

// postModern sends c to the endpoint url with token ("" none) and returns the answer as the client sees it.
func postModern(t *testing.T, url, token string, c modernCall) modernAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(c.body())))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcpserver.ModernProtocol)
	if c.header == nil {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", c.name)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if c.host != "" {
		req.Host = c.host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return modernAnswer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: blankVarying(t, string(b)), raw: string(b)}
}

// varying are the parts of an answer that differ between two calls of the same request: the routing metadata's
// timings and a held call's request state.
var varying = regexp.MustCompile(`"(execution_time_ms|routing_time_ms|total_time_ms)":[0-9.e+-]+|"requestState":"[^"]*"`)

// blankVarying blanks what differs between two calls of the same request in an answer's bytes.
func blankVarying(_ *testing.T, body string) string {
	return varying.ReplaceAllStringFunc(body, func(s string) string {
		k, _, _ := strings.Cut(s, ":")
		return k + ":*"
	})
}

// TestFastModernCallMatchesSDK: a 2026-07-28 tools/call of a backend tool on /mcp is served by the fast path once
// the go-sdk has served one call with the same _meta bytes, and every call, plain or not, gets the same answer
// (status, content type, the JSON-RPC message, the bytes' length) with the fast path on as with it off (every
// request to the go-sdk): a plain call, with or without arguments, with a string id, from a client that declared
// elicitation (the backend's question becomes an input request), a backend's JSON-RPC error, a backend's question
// the client cannot answer, and the calls the fast path leaves to the go-sdk (a canonical name, an unknown tool,
// arguments that are not an object, a _meta with a log level, a progress token or no capabilities, headers that
// are missing or do not match the body, a parameter header, a retry's request state). A tool the curation hides
// is refused on both paths.
func TestFastModernCallMatchesSDK(t *testing.T) {
	r := newRig(t)
	url, _, _ := fastBackend(t)
	r.register(t, "fb", map[string]any{"base_url": url}, persistence.TransportHTTP)
	askerURL, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": askerURL}, persistence.TransportHTTP)
	r.register(t, "errb", map[string]any{"base_url": failingBackend(t)}, persistence.TransportHTTP)
	plain := connect(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	waitFor(t, "every tool listed", func() bool {
		names := plain.toolNames(t)
		return slices.Contains(names, "fb__echo") && slices.Contains(names, "asker__ask") && slices.Contains(names, "errb__fail")
	})
	endpoint := r.mux.URL + "/mcp"
	fast := func() uint64 { return mcpserver.FastModernCalls(r.endpoint) }

	// The first call of each _meta teaches the fast path; the second is fast.
	for _, meta := range []string{modernMeta, modernElicitMeta} {
		c := modernCall{name: "fb__echo", args: `{"a":1}`, meta: meta}
		before := fast()
		if a := postModern(t, endpoint, "", c); a.status != http.StatusOK || !strings.Contains(a.body, `echo {\"a\":1}`) {
			t.Fatalf("first call: %+v", a)
		}
		if fast() != before {
			t.Fatal("a call of a _meta never seen took the fast path")
		}
		if a := postModern(t, endpoint, "", c); a.status != http.StatusOK || fast() != before+1 {
			t.Fatalf("the second call of a _meta (fast %d): %+v", fast()-before, a)
		}
	}
	if n := mcpserver.LearntSessions(r.endpoint); n != 2 {
		t.Fatalf("%d learnt sessions, want 2", n)
	}
	if n := mcpserver.SessionCount(r.endpoint); n != 1 {
		t.Fatalf("%d client sessions, want 1 (the 2025-11-25 client's; learnt ones are not clients')", n)
	}

	logMeta := strings.Replace(modernMeta, `{`, `{"io.modelcontextprotocol/logLevel":"info",`, 1)
	progressMeta := strings.Replace(modernMeta, `{`, `{"progressToken":"p1",`, 1)
	noCaps := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	echo := func(c modernCall) modernCall {
		if c.name == "" {
			c.name = "fb__echo"
		}
		if c.meta == "" {
			c.meta = modernMeta
		}
		return c
	}
	for _, tc := range []struct {
		name string
		call modernCall
		fast bool
		want string // in the answer's body
		// held: the call is held for the client's input; the test answers it at once (by the go-sdk path), so that
		// the backend's question is not pending while the other path makes it again.
		held bool
	}{
		{"plain call", echo(modernCall{args: `{"a":1}`}), true, `echo {\"a\":1}`, false},
		{"no arguments", echo(modernCall{}), true, `"text":"echo {}"`, false},
		{"string id", echo(modernCall{id: `"abc"`, args: `{}`}), true, `"id":"abc"`, false},
		{"elicitation becomes an input request", modernCall{name: "asker__ask", args: `{}`, meta: modernElicitMeta}, true, `"resultType":"input_required"`, true},
		{"a question the client cannot answer", modernCall{name: "asker__sample", args: `{}`, meta: modernMeta}, true, "method not found", false},
		{"a backend's JSON-RPC error", modernCall{name: "errb__fail", args: `{}`, meta: modernMeta}, true, `"error":{"code":-32603,"message":"Server errb returned an error: the backend says no"}`, false},
		{"canonical name", echo(modernCall{name: "fb.echo", args: `{}`}), false, "echo", false},
		{"unknown tool", echo(modernCall{name: "fb__nope", args: `{}`}), false, "fb__nope", false},
		{"arguments not an object", echo(modernCall{args: `[1]`}), false, `"error"`, false},
		{"log level in _meta", echo(modernCall{args: `{}`, meta: logMeta}), false, "echo", false},
		{"progress token in _meta", echo(modernCall{args: `{}`, meta: progressMeta}), false, "echo", false},
		{"no capabilities in _meta", echo(modernCall{args: `{}`, meta: noCaps}), false, "clientCapabilities", false},
		{"no Mcp-Name", echo(modernCall{args: `{}`, header: map[string]string{"Mcp-Method": "tools/call"}}), false, "Mcp-Name", false},
		{"Mcp-Name of another tool", echo(modernCall{args: `{}`, header: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "fb__block"}}), false, "mismatch", false},
		{"no Mcp-Method", echo(modernCall{args: `{}`, header: map[string]string{"Mcp-Name": "fb__echo"}}), false, "Mcp-Method", false},
		{"a parameter header", echo(modernCall{args: `{}`, header: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "fb__echo", "Mcp-Param-A": "1"}}), false, "echo", false},
		{"a retry's unknown request state", echo(modernCall{args: `{}`, extra: `"requestState":"agg1.nope"`}), false, "requestState", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Once before, so that the fast path has had the go-sdk's answer to learn the call's _meta from.
			if warm := postModern(t, endpoint, "", tc.call); tc.held {
				finish(t, endpoint, tc.call, warm.raw)
			}
			before := fast()
			on := postModern(t, endpoint, "", tc.call)
			if got := fast() > before; got != tc.fast {
				t.Fatalf("served on the fast path: %v, want %v (%+v)", got, tc.fast, on)
			}
			if tc.held {
				finish(t, endpoint, tc.call, on.raw)
			}
			mcpserver.SetFastCalls(r.endpoint, false)
			before = fast()
			off := postModern(t, endpoint, "", tc.call)
			mcpserver.SetFastCalls(r.endpoint, true)
			if tc.held {
				finish(t, endpoint, tc.call, off.raw)
			}
			if fast() != before {
				t.Fatal("a call took the fast path while it was off")
			}
			if !on.same(off) {
				t.Fatalf("the answers differ:\nfast path on:  %+v\nfast path off: %+v", on, off)
			}
			if !strings.Contains(on.body, tc.want) {
				t.Fatalf("answer %+v, want %q in it", on, tc.want)
			}
		})
	}
	if got := r.endpoint.HeldCalls(); got != 0 {
		t.Fatalf("%d held calls, want 0 (each was answered)", got)
	}

	t.Run("the input request's retry finds the call the fast path holds", func(t *testing.T) {
		c := modernCall{name: "asker__ask", args: `{}`, meta: modernElicitMeta}
		before := fast()
		first := postModern(t, endpoint, "", c)
		if fast() != before+1 {
			t.Fatal("the elicitation call did not take the fast path")
		}
		retry := retryOf(c, heldOf(t, first.raw), `{"action":"accept","content":{"name":"fay"}}`)
		before = fast()
		if a := postModern(t, endpoint, "", retry); !strings.Contains(a.body, "accept:fay") {
			t.Fatalf("retry: %+v", a)
		}
		if fast() != before {
			t.Fatal("a retry took the fast path")
		}
	})

	t.Run("a client cannot name the _meta the go-sdk's answer teaches", func(t *testing.T) {
		// The mark the fast path sets for the go-sdk (its value: the _meta bytes to learn) sent by a client on a
		// call of an elicitation client that goes to the go-sdk (a canonical name), naming another _meta: were it
		// kept, calls with that _meta would run with the elicitation client's capabilities.
		other := strings.Replace(modernMeta, `"raw"`, `"forger"`, 1)
		c := modernCall{name: "fb.echo", args: `{}`, meta: modernElicitMeta,
			header: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "fb.echo", "X-Mcpgw-Fast-Meta": other}}
		learnt := mcpserver.LearntSessions(r.endpoint)
		if a := postModern(t, endpoint, "", c); a.status != http.StatusOK {
			t.Fatalf("the call with a forged mark: %+v", a)
		}
		before := fast()
		postModern(t, endpoint, "", modernCall{name: "fb__echo", args: `{}`, meta: other})
		if fast() != before || mcpserver.LearntSessions(r.endpoint) != learnt+1 {
			t.Fatalf("a client's mark taught the fast path (fast %d, learnt %d -> %d)", fast()-before, learnt, mcpserver.LearntSessions(r.endpoint))
		}
	})

	t.Run("curation hides a tool from the fast path too", func(t *testing.T) {
		res, err := plain.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: map[string]any{
			"action": "set_filter", "server_id": "fb", "settings": map[string]any{"mode": "deny", "patterns": []string{"hidden_*"}}}})
		if err != nil || res.IsError {
			t.Fatalf("set_filter: %v %s", err, text(res))
		}
		waitFor(t, "hidden_echo hidden", func() bool { return !slices.Contains(plain.toolNames(t), "fb__hidden_echo") })
		c := modernCall{name: "fb__hidden_echo", args: `{}`, meta: modernMeta}
		before := fast()
		on := postModern(t, endpoint, "", c)
		mcpserver.SetFastCalls(r.endpoint, false)
		off := postModern(t, endpoint, "", c)
		mcpserver.SetFastCalls(r.endpoint, true)
		if fast() != before || !on.same(off) || strings.Contains(on.body, `"text":"hidden"`) {
			t.Fatalf("a hidden tool (fast %d):\non:  %+v\noff: %+v", fast()-before, on, off)
		}
	})
}

// heldState is a held call's request state and its input request's id.
type heldState struct{ state, input string }

// heldOf reads a held call's request state and input request id from its answer's bytes.
func heldOf(t *testing.T, raw string) heldState {
	t.Helper()
	data, _ := strings.CutPrefix(raw, "event: message\ndata: ")
	var msg struct {
		Result struct {
			RequestState  string                     `json:"requestState"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &msg); err != nil || msg.Result.RequestState == "" || len(msg.Result.InputRequests) != 1 {
		t.Fatalf("a held call's answer: %v %s", err, raw)
	}
	for id := range msg.Result.InputRequests {
		return heldState{msg.Result.RequestState, id}
	}
	return heldState{}
}

// retryOf is the retry of call c held under h, answering its input request with response.
func retryOf(c modernCall, h heldState, response string) modernCall {
	c.extra = `"requestState":` + strconvQuote(h.state) + `,"inputResponses":{` + strconvQuote(h.input) + `:` + response + `}`
	return c
}

// finish answers a held call's elicitation and waits for its result.
func finish(t *testing.T, endpoint string, c modernCall, raw string) {
	t.Helper()
	if a := postModern(t, endpoint, "", retryOf(c, heldOf(t, raw), `{"action":"accept","content":{"name":"end"}}`)); a.status != http.StatusOK || !strings.Contains(a.body, "accept:end") {
		t.Fatalf("finishing a held call: %+v", a)
	}
}

// failingBackend is a go-sdk backend whose one tool answers a JSON-RPC error.
func failingBackend(t testing.TB) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "errb", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32001, Message: "the backend says no"}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestFastModernCallAuth: with tokens, a 2026-07-28 fast call runs as its token's caller: rate-limited per client
// like every call (the limit's tool error on the fast path), refused without a valid token before the endpoint, and
// not served under another Host on the loopback listener (the go-sdk's DNS rebinding check, 403).
func TestFastModernCallAuth(t *testing.T) {
	rl := newAuthRig(t, auth.NewLimiter(0.01, 3))
	c := modernCall{name: "back__echo", args: `{"q":"a"}`, meta: modernMeta}
	endpoint := rl.url + "/mcp"
	n := func() uint64 { return mcpserver.FastModernCalls(rl.ep) }
	if a := postModern(t, endpoint, clientToken, c); a.status != http.StatusOK || n() != 0 {
		t.Fatalf("the first call (learns): %+v, fast %d", a, n())
	}
	if a := postModern(t, endpoint, "", c); a.status != http.StatusUnauthorized || n() != 0 {
		t.Fatalf("no token: %+v, fast %d", a, n())
	}
	if a := postModern(t, endpoint, "not-a-token", c); a.status != http.StatusUnauthorized || n() != 0 {
		t.Fatalf("a wrong token: %+v, fast %d", a, n())
	}
	hosted := c
	hosted.host = "rebound.example"
	if a := postModern(t, endpoint, clientToken, hosted); a.status != http.StatusForbidden || n() != 0 {
		t.Fatalf("another Host on the loopback listener: %+v, fast %d", a, n())
	}
	for i := range 2 { // the burst is 3: the learning call was the first
		if a := postModern(t, endpoint, clientToken, c); a.status != http.StatusOK || strings.Contains(a.body, `"isError":true`) {
			t.Fatalf("call %d: %+v", i, a)
		}
	}
	a := postModern(t, endpoint, clientToken, c)
	if !strings.Contains(a.body, `"isError":true`) || !strings.Contains(a.body, apierror.CodeRateLimited) {
		t.Fatalf("past the burst: %+v", a)
	}
	if n() != 3 {
		t.Fatalf("fast calls %d, want 3", n())
	}
}

// TestFastModernCallCountsAndCancels: a 2026-07-28 call in progress on the fast path counts as a session against
// the caps (the next request of its client is refused, 429, while it runs), and a client that leaves (closes the
// request) cancels the backend's call, as on the go-sdk path.
func TestFastModernCallCountsAndCancels(t *testing.T) {
	r := newRig(t, mcpserver.Options{MaxSessionsPerClient: 1})
	url, started, cancelled := fastBackend(t)
	r.register(t, "fb", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "fb.block routable", func() bool { _, ok := r.sys.Routes().Tool("fb.block"); return ok })
	endpoint := r.mux.URL + "/mcp"
	waitFor(t, "fb__block exposed", func() bool {
		return !strings.Contains(postModern(t, endpoint, "", modernCall{name: "fb__echo", args: `{}`, meta: modernMeta}).body, "unknown tool")
	})
	before := mcpserver.FastModernCalls(r.endpoint)
	if a := postModern(t, endpoint, "", modernCall{name: "fb__echo", args: `{}`, meta: modernMeta}); a.status != http.StatusOK || mcpserver.FastModernCalls(r.endpoint) != before+1 {
		t.Fatalf("a plain call after the first: %+v (fast %d)", a, mcpserver.FastModernCalls(r.endpoint)-before)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	block := modernCall{name: "fb__block", args: `{}`, meta: modernMeta}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader([]byte(block.body())))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcpserver.ModernProtocol)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", block.name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	select {
	case <-started:
	case <-done:
		t.Fatal("the blocking call ended before reaching the backend")
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking call did not reach the backend")
	}
	if mcpserver.FastModernCalls(r.endpoint) != before+2 {
		t.Fatal("the blocking call did not take the fast path")
	}
	if a := postModern(t, endpoint, "", modernCall{name: "fb__echo", args: `{}`, meta: modernMeta}); a.status != http.StatusTooManyRequests {
		t.Fatalf("a second request while the fast call runs (cap 1): %+v", a)
	}
	cancel()
	select {
	case <-cancelled: // the backend's call ended with its context
	case <-time.After(30 * time.Second):
		t.Fatal("the client's leaving did not cancel the backend's call")
	}
	<-done
}
