package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestRoundTripForModernClients: a 2026-07-28 client through /mcp to a backend of the older revision that asks
// its client things during a call. The client has no session to be asked on; the aggregator answers its call with
// the backend's requests as input requests, and its retry carries the answers back to the waiting backend
// (elicitation, sampling), over as many rounds as the backend asks. Log messages during a round reach the client.
func TestRoundTripForModernClients(t *testing.T) {
	r := newRig(t)
	url, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker's tools", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })

	var elicited, sampled atomic.Int32
	var mu sync.Mutex
	var logs []string
	cl := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "zoe"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Add(1)
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hey"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			logs = append(logs, req.Params.Data.(string))
			mu.Unlock()
		},
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if v := sess.InitializeResult().ProtocolVersion; v != mcpserver.ModernProtocol {
		t.Fatalf("negotiated %s, want %s", v, mcpserver.ModernProtocol)
	}
	call := func(name string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return text(res)
	}
	if got := call("asker__ask"); got != "accept:zoe" || elicited.Load() != 1 {
		t.Fatalf("elicitation by round trip: %q (asked %d times)", got, elicited.Load())
	}
	if got := call("asker__sample"); got != "sampled:hey" || sampled.Load() != 1 {
		t.Fatalf("sampling by round trip: %q (asked %d times)", got, sampled.Load())
	}
	// Under 2026-07-28 the log level travels with each request. A log message reaches the client on its call's
	// stream, which closes with the result: one the go-sdk hands over after the result is lost (README).
	lres, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "asker__slowlog", Arguments: map[string]any{},
		Meta: mcp.Meta{mcp.MetaKeyLogLevel: "info"}})
	if err != nil || text(lres) != "logged" {
		t.Fatalf("log call: %v %q", err, text(lres))
	}
	waitFor(t, "the backend's log message at the modern client", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(logs) > 0 && logs[len(logs)-1] == "working on it"
	})
	if got := r.endpoint.HeldCalls(); got != 0 {
		t.Fatalf("%d calls still held after their results", got)
	}

	// A client without the capability: the backend's request is refused at once, as for older clients.
	plain := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	ps, err := plain.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	res, err := ps.CallTool(context.Background(), &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}})
	if err != nil || !strings.Contains(text(res), "method not found") {
		t.Fatalf("elicitation for a modern client without the capability: %v %q", err, text(res))
	}
}

// TestRoundTripStateIsChecked: a client that handles the input requests itself sees them in the result; a retry
// with an unknown state, or by another tool name, is refused; a held call whose client never comes back is
// cancelled after InputWait, and its backend's request gets an error.
func TestRoundTripStateIsChecked(t *testing.T) {
	r := newRig(t, mcpserver.Options{InputWait: 300 * time.Millisecond})
	url, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker's tools", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })
	cl := mcp.NewClient(&mcp.Implementation{Name: "manual", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	first, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("first answer: %+v", first)
	}
	var id string
	for k, v := range first.InputRequests {
		if p, ok := v.(*mcp.ElicitParams); !ok || p.Message != "your name?" {
			t.Fatalf("input request %s: %#v", k, v)
		}
		id = k
	}
	for _, tc := range []struct {
		name, tool, state string
	}{
		{"unknown state", "asker__ask", "agg1.nope"},
		{"another tool", "asker__sample", first.RequestState},
	} {
		_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}, RequestState: tc.state,
			InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "decline"}}})
		if err == nil || !strings.Contains(err.Error(), "requestState") {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// The refused retries did not consume the state: the right one still answers.
	last, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "max"}}}})
	if err != nil || last.NeedsInput() || text(last) != "accept:max" {
		t.Fatalf("retry: %v %+v", err, last)
	}
	// A state is used once.
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "decline"}}}); err == nil {
		t.Fatal("a request state was accepted twice")
	}

	// Abandoned: the client never retries; after InputWait the call is cancelled and nothing stays held.
	again, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}})
	if err != nil || !again.NeedsInput() {
		t.Fatalf("second call: %v %+v", err, again)
	}
	if r.endpoint.HeldCalls() != 1 {
		t.Fatalf("held calls %d, want 1", r.endpoint.HeldCalls())
	}
	waitFor(t, "the abandoned call released", func() bool { return r.endpoint.HeldCalls() == 0 })
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}, RequestState: again.RequestState,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "decline"}}}); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("retry after expiry: %v", err)
	}
}

// TestModernClientNotifications: a 2026-07-28 client hears about tool, prompt and resource list changes on its
// subscriptions/listen stream as backends come and go, and lists what a 2025-11-25 client lists.
func TestModernClientNotifications(t *testing.T) {
	r := newRig(t)
	var tools, prompts, resources atomic.Int32
	cl := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { tools.Add(1) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { prompts.Add(1) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { resources.Add(1) },
	})
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if v := sess.InitializeResult().ProtocolVersion; v != mcpserver.ModernProtocol {
		t.Fatalf("negotiated %s", v)
	}
	gob := startGoBackend(t)
	close(gob.release) // reads answer at once
	gob.release = make(chan struct{})
	id := r.register(t, "gob", map[string]any{"base_url": gob.url}, persistence.TransportHTTP)
	waitFor(t, "tools, prompts and resources list_changed at the modern client", func() bool {
		return tools.Load() > 0 && prompts.Load() > 0 && resources.Load() > 0
	})
	lt, err := sess.ListTools(context.Background(), nil)
	if err != nil || !slices.ContainsFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "gob__echo" }) {
		t.Fatalf("tools/list: %v", err)
	}
	lp, err := sess.ListPrompts(context.Background(), nil)
	if err != nil || len(lp.Prompts) != 1 || lp.Prompts[0].Name != "gob__greet" {
		t.Fatalf("prompts/list: %v %+v", err, lp)
	}
	// A removal is announced too.
	before := tools.Load()
	if err := r.sys.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "list_changed after the backend's removal", func() bool { return tools.Load() > before })
}

// TestModernClientOverIO: over an io transport (what `aggregator stdio` serves) a 2026-07-28 client is served in
// 2026-07-28, calls a backend tool, and answers its backend's elicitation by round trip.
func TestModernClientOverIO(t *testing.T) {
	r := newRig(t)
	url, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker routable", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.endpoint.Serve(ctx, st) }()
	cl := mcp.NewClient(&mcp.Implementation{Name: "io", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "io"}}, nil
		},
	})
	sess, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if v := sess.InitializeResult().ProtocolVersion; v != mcpserver.ModernProtocol {
		t.Fatalf("negotiated %s over an io transport", v)
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "asker__ask", Arguments: map[string]any{}})
	if err != nil || text(res) != "accept:io" {
		t.Fatalf("elicitation by round trip over io: %v %+v", err, res)
	}
}

// TestModernRequestsCountAgainstSessionCaps: a 2026-07-28 client opens no session, but each of its requests in
// progress counts as one against the caps, so the long subscriptions/listen streams are bounded like sessions.
func TestModernRequestsCountAgainstSessionCaps(t *testing.T) {
	r := newRig(t, mcpserver.Options{MaxSessionsPerClient: 2})
	// listening says when a client's subscriptions/listen stream is served: its response headers come from inside
	// the endpoint's handler, after the request was counted.
	listening := make(chan struct{}, 16)
	hc := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		if err == nil && res.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"subscriptions/listen"`)) {
			listening <- struct{}{}
		}
		return res, err
	})}
	connect := func() (*mcp.ClientSession, error) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
		})
		return cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp", HTTPClient: hc}, nil)
	}
	refused := func(err error) bool {
		return strings.Contains(err.Error(), "Too Many Requests") || strings.Contains(err.Error(), "429") || strings.Contains(err.Error(), "SESSION_LIMIT")
	}
	// Two listening clients, one after the other: a request whose answer was sent no longer counts, so the second
	// client's requests are not refused for the first one's server/discover.
	for i := range 2 {
		s, err := connect()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		defer s.Close()
		if v := s.InitializeResult().ProtocolVersion; v != mcpserver.ModernProtocol {
			t.Fatalf("client %d negotiated %s: its server/discover was refused", i, v)
		}
		select {
		case <-listening:
		case <-time.After(10 * time.Second):
			t.Fatalf("client %d's subscriptions/listen stream was not served", i)
		}
	}
	if s, err := connect(); err == nil {
		s.Close()
		t.Fatal("a third client was admitted while two listen streams of its caller are open (cap 2)")
	} else if !refused(err) {
		t.Fatalf("refusal: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTypeScriptClientBothRevisions: the TypeScript SDK's v2 client, a real client of another implementation,
// through /mcp in the 2025 handshake and pinned to 2026-07-28: it lists and calls a backend tool, and answers the
// backend's elicitation (on its session, or by the multi-round-trip retry the TypeScript client does itself).
func TestTypeScriptClientBothRevisions(t *testing.T) {
	script := peertest.TSClientScript(t)
	node := peertest.Node(t)
	r := newRig(t)
	url, _ := relayBackend(t)
	r.register(t, "asker", map[string]any{"base_url": url}, persistence.TransportHTTP)
	waitFor(t, "asker's tools", func() bool { _, ok := r.sys.Routes().Tool("asker.ask"); return ok })
	for _, tc := range []struct{ mode, want string }{{"legacy", "2025-11-25"}, {mcpserver.ModernProtocol, mcpserver.ModernProtocol}} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, node, script, r.mux.URL+"/mcp", tc.mode, "asker__ask").Output()
			var got struct {
				ProtocolVersion string   `json:"protocolVersion"`
				Tools           []string `json:"tools"`
				Text            string   `json:"text"`
				IsError         bool     `json:"isError"`
				Error           string   `json:"error"`
			}
			if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
				t.Fatalf("ts client: %v %v\n%s", err, jerr, out)
			}
			if got.ProtocolVersion != tc.want || !slices.Contains(got.Tools, "asker__ask") || got.Text != "accept:ts" || got.IsError {
				t.Fatalf("ts client in %s: %+v", tc.mode, got)
			}
		})
	}
}
