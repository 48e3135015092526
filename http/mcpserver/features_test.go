package mcpserver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// featureClient is a client of the aggregated endpoint that counts list_changed and resource updates.
type featureClient struct {
	sess                                   *mcp.ClientSession
	mu                                     sync.Mutex
	promptsChanged, resourcesChanged, upds int
	updated                                []string
}

func connectFeatures(t testing.TB, transport mcp.Transport) *featureClient {
	c := &featureClient{}
	cl := mcp.NewClient(&mcp.Implementation{Name: "feature-client", Version: "1"}, &mcp.ClientOptions{
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) { c.mu.Lock(); c.promptsChanged++; c.mu.Unlock() },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			c.mu.Lock()
			c.resourcesChanged++
			c.mu.Unlock()
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			c.mu.Lock()
			c.updated = append(c.updated, r.Params.URI)
			c.mu.Unlock()
		},
	})
	sess, err := cl.Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	c.sess = sess
	return c
}

func (c *featureClient) prompts(t testing.TB) []*mcp.Prompt {
	var out []*mcp.Prompt
	for p, err := range c.sess.Prompts(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func (c *featureClient) resources(t testing.TB) []*mcp.Resource {
	var out []*mcp.Resource
	for r, err := range c.sess.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func (c *featureClient) templates(t testing.TB) []*mcp.ResourceTemplate {
	var out []*mcp.ResourceTemplate
	for r, err := range c.sess.ResourceTemplates(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// goBackend is a go-sdk MCP server over streamable HTTP with one prompt, one resource that answers only when
// released (or its request ends), one template and completions; it notifies resource updates on demand.
type goBackend struct {
	srv     *mcp.Server
	url     string
	release chan struct{}
	reading chan struct{}
}

func startGoBackend(t testing.TB) *goBackend {
	b := &goBackend{release: make(chan struct{}), reading: make(chan struct{}, 16)}
	b.srv = mcp.NewServer(&mcp.Implementation{Name: "gob", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{req.Params.Ref.Type + ":" + req.Params.Ref.Name + req.Params.Ref.URI + ":" + req.Params.Argument.Value + "x"}}}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	b.srv.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
	})
	b.srv.AddResource(&mcp.Resource{URI: "slow://doc", Name: "doc"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		b.reading <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "doc text"}}}, nil
	})
	b.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "gob://item/{id}", Name: "item"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item " + strings.TrimPrefix(req.Params.URI, "gob://item/")}}}, nil
	})
	mcp.AddTool(b.srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Msg string `json:"msg"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Msg}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b.srv }, nil))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(b.release) }) // before hs.Close: a read the aggregator abandoned ends
	b.url = hs.URL
	return b
}

// TestFeaturesAggregated: prompts, resources, templates and completions of two backends on /mcp and /sse; a URI two
// servers list is rewritten reversibly, a unique one kept; requests reach the owning server; list_changed on a
// disconnect; resource updates reach the subscribed client; a server that disappears mid-read gives an error naming it.
func TestFeaturesAggregated(t *testing.T) {
	r := newRig(t)
	cmd, args := peertest.EverythingStdio(t)
	gob := startGoBackend(t)
	c := connectFeatures(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	sse := connectFeatures(t, &mcp.SSEClientTransport{Endpoint: r.mux.URL + "/sse"})

	if caps := c.sess.InitializeResult().Capabilities; caps.Prompts == nil || caps.Resources == nil || !caps.Resources.Subscribe || caps.Completions == nil {
		t.Fatalf("capabilities before any backend: %+v", caps)
	}
	gobID := r.register(t, "gob", map[string]any{"base_url": gob.url}, persistence.TransportHTTP)
	r.register(t, "one", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	r.register(t, "two", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)

	hasPrompt := func(c *featureClient, name string) bool {
		return slices.ContainsFunc(c.prompts(t), func(p *mcp.Prompt) bool { return p.Name == name })
	}
	waitFor(t, "prompts of three servers", func() bool {
		ps := c.prompts(t)
		one := slices.ContainsFunc(ps, func(p *mcp.Prompt) bool { return strings.HasPrefix(p.Name, "one__") })
		two := slices.ContainsFunc(ps, func(p *mcp.Prompt) bool { return strings.HasPrefix(p.Name, "two__") })
		return one && two && hasPrompt(c, "gob__greet")
	})
	waitFor(t, "prompts on /sse", func() bool { return hasPrompt(sse, "gob__greet") })
	c.mu.Lock()
	if c.promptsChanged == 0 || c.resourcesChanged == 0 {
		t.Errorf("list_changed before the listing: prompts %d, resources %d", c.promptsChanged, c.resourcesChanged)
	}
	c.mu.Unlock()

	// prompts/get by alias reaches the backend under its own name.
	for _, cl := range []*featureClient{c, sse} {
		got, err := cl.sess.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "gob__greet", Arguments: map[string]string{"who": "ann"}})
		if err != nil || len(got.Messages) != 1 || got.Messages[0].Content.(*mcp.TextContent).Text != "hello ann" {
			t.Fatalf("prompts/get gob__greet: %v %+v", err, got)
		}
	}
	// ... and by its canonical name, or the backend's own name when one server only has it, as tools.
	for _, name := range []string{"gob.greet", "greet"} {
		got, err := c.sess.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"who": name}})
		if err != nil || got.Messages[0].Content.(*mcp.TextContent).Text != "hello "+name {
			t.Fatalf("prompts/get %s: %v %+v", name, err, got)
		}
	}
	if _, err := c.sess.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "nobody__greet"}); err == nil {
		t.Fatal("prompts/get of an unknown prompt succeeded")
	}
	// A connected backend that changes its prompts (its own list_changed): the clients are told, on both
	// transports, and list the change, additions and removals.
	c.mu.Lock()
	changedBefore := c.promptsChanged
	c.mu.Unlock()
	gob.srv.AddPrompt(&mcp.Prompt{Name: "farewell"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "bye"}}}}, nil
	})
	waitFor(t, "a prompt the backend added", func() bool { return hasPrompt(c, "gob__farewell") && hasPrompt(sse, "gob__farewell") })
	waitFor(t, "prompts list_changed for the addition", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.promptsChanged > changedBefore
	})
	gob.srv.RemovePrompts("farewell")
	waitFor(t, "a prompt the backend removed", func() bool { return !hasPrompt(c, "gob__farewell") && !hasPrompt(sse, "gob__farewell") })

	// Resources: the two copies of server-everything list the same URIs, rewritten per server; gob's are intact.
	var everyURI string
	waitFor(t, "resources of three servers", func() bool {
		res := c.resources(t)
		everyURI = ""
		for _, x := range res {
			if strings.HasPrefix(x.URI, routing.RewriteURI("one", "")) {
				everyURI = x.URI
			}
		}
		return everyURI != "" && slices.ContainsFunc(res, func(x *mcp.Resource) bool { return x.URI == "slow://doc" })
	})
	for _, x := range c.resources(t) {
		if x.URI != "slow://doc" && !strings.HasPrefix(x.URI, routing.RewrittenURIScheme+"://") {
			t.Errorf("resource %s of two identical servers not rewritten", x.URI)
		}
	}
	server, orig, ok := routing.ParseRewrittenURI(everyURI)
	if !ok || server != "one" || routing.RewriteURI(server, orig) != everyURI {
		t.Fatalf("ParseRewrittenURI(%q) = %q %q %v", everyURI, server, orig, ok)
	}
	read, err := c.sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: everyURI})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].URI != everyURI {
		t.Fatalf("read %s: %v %+v", everyURI, err, read)
	}
	// A template: gob's kept as it is, and a URI matching it is read on gob.
	if !slices.ContainsFunc(c.templates(t), func(x *mcp.ResourceTemplate) bool { return x.URITemplate == "gob://item/{id}" }) {
		t.Fatalf("template gob://item/{id} not listed: %+v", c.templates(t))
	}
	read, err = sse.sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "gob://item/42"})
	if err != nil || read.Contents[0].Text != "item 42" {
		t.Fatalf("read gob://item/42: %v %+v", err, read)
	}

	// Completions by prompt alias and by template.
	comp, err := c.sess.Complete(context.Background(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "gob__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
	if err != nil || len(comp.Completion.Values) != 1 || comp.Completion.Values[0] != "ref/prompt:greet:ax" {
		t.Fatalf("complete prompt: %v %+v", err, comp)
	}
	comp, err = c.sess.Complete(context.Background(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "gob://item/{id}"},
		Argument: mcp.CompleteParamsArgument{Name: "id", Value: "4"}})
	if err != nil || comp.Completion.Values[0] != "ref/resource:gob://item/{id}:4x" {
		t.Fatalf("complete template: %v %+v", err, comp)
	}

	// Subscriptions: an update of the backend reaches the subscribed client only.
	if err := c.sess.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "slow://doc"}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := gob.srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: "slow://doc"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "notifications/resources/updated", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Contains(c.updated, "slow://doc")
	})
	sse.mu.Lock()
	if len(sse.updated) != 0 {
		t.Errorf("a client that did not subscribe got %v", sse.updated)
	}
	sse.mu.Unlock()

	// The server disappears mid-read: the client gets an error naming it, at once.
	errc := make(chan error, 1)
	go func() {
		_, err := c.sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "slow://doc"})
		errc <- err
	}()
	select {
	case <-gob.reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not reach the backend")
	}
	c.mu.Lock()
	before, resourcesBefore := c.promptsChanged, c.resourcesChanged
	c.mu.Unlock()
	if _, err := r.sys.Disconnect(context.Background(), gobID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		var rpcErr *jsonrpc.Error
		if err == nil || !errors.As(err, &rpcErr) || !strings.Contains(rpcErr.Message, "gob") {
			t.Fatalf("read during a disconnect: %v, want a JSON-RPC error naming gob", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not end when its server disconnected")
	}
	// Its prompts and resources go, and the clients are told.
	waitFor(t, "gob's prompt removed", func() bool { return !hasPrompt(c, "gob__greet") && !hasPrompt(sse, "gob__greet") })
	waitFor(t, "prompts and resources list_changed after the disconnect", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.promptsChanged > before && c.resourcesChanged > resourcesBefore
	})
	if slices.ContainsFunc(c.resources(t), func(x *mcp.Resource) bool { return x.URI == "slow://doc" }) {
		t.Fatal("a disconnected server's resource is still listed")
	}
	if _, err := c.sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "slow://doc"}); err == nil {
		t.Fatal("read of a disconnected server's resource succeeded")
	}
}

// TestResourceUpdateFloodStallsNoOne: a backend that floods notifications/resources/updated to a subscribed client
// delays neither tool calls nor listings of another client on another server: the updates pass through a bounded
// queue, and the excess is dropped.
func TestResourceUpdateFloodStallsNoOne(t *testing.T) {
	r := newRig(t)
	flood, calm := startGoBackend(t), startGoBackend(t)
	r.register(t, "flood", map[string]any{"base_url": flood.url}, persistence.TransportHTTP)
	r.register(t, "calm", map[string]any{"base_url": calm.url}, persistence.TransportHTTP)
	sub := connectFeatures(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	other := connect(t, &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"})
	waitFor(t, "both backends' resources", func() bool {
		_, a := r.sys.Routes().Resource(routing.RewriteURI("flood", "slow://doc"))
		_, b := r.sys.Routes().Resource(routing.RewriteURI("calm", "slow://doc"))
		_, c := r.sys.Routes().Tool("calm.echo")
		return a && b && c
	})
	floodURI := routing.RewriteURI("flood", "slow://doc")
	if err := sub.sess.Subscribe(context.Background(), &mcp.SubscribeParams{URI: floodURI}); err != nil {
		t.Fatal(err)
	}
	const sent = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sent {
			_ = flood.srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: "slow://doc"})
		}
	}()
	// While the flood runs, the other client's calls and listings answer (a stall would hit the 10 s bound).
	calls := 0
	for flooding := true; flooding || calls < 20; calls++ {
		select {
		case <-done:
			flooding = false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := other.sess.CallTool(ctx, &mcp.CallToolParams{Name: "calm__echo", Arguments: map[string]any{"msg": "hi"}})
		cancel()
		if err != nil || res.IsError || text(res) != "hi" {
			t.Fatalf("call %d during the flood: %v %+v", calls, err, res)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		_, err = other.sess.ListTools(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("tools/list during the flood: %v", err)
		}
	}
	waitFor(t, "the subscriber got updates of the flooding server", func() bool {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		return len(sub.updated) > 0 && sub.updated[0] == floodURI
	})
	sub.mu.Lock()
	got := len(sub.updated)
	sub.mu.Unlock()
	t.Logf("%d calls during the flood; the subscriber got %d of %d updates", calls, got, sent)
}

// TestBothProtocolRevisions: a client pinned to 2025-11-25 and one preferring 2026-07-28 (the go-sdk's default)
// both call a tool, get a prompt and read a resource of a backend through /mcp. The aggregator speaks 2025-11-25 to
// its backends (actors.ProtocolVersion), which go-sdk servers of both generations accept.
func TestBothProtocolRevisions(t *testing.T) {
	r := newRig(t)
	gob := startGoBackend(t)
	close(gob.release) // reads answer at once
	gob.release = make(chan struct{})
	r.register(t, "gob", map[string]any{"base_url": gob.url}, persistence.TransportHTTP)
	waitFor(t, "gob routable", func() bool {
		_, tool := r.sys.Routes().Tool("gob.echo")
		_, prompt := r.sys.Routes().Prompt("gob__greet")
		return tool && prompt
	})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cl := mcp.NewClient(&mcp.Implementation{Name: "rev", Version: "1"}, nil)
			sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			// Each client speaks its own revision: 2026-07-28 requests are served by the stateless handler beside
			// the stateful one.
			if got := sess.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s, want %s", got, version)
			}
			res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "gob__echo", Arguments: map[string]any{"msg": "v" + version}})
			if err != nil || res.IsError || text(res) != "v"+version {
				t.Fatalf("tools/call: %v %+v", err, res)
			}
			p, err := sess.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "gob__greet", Arguments: map[string]string{"who": version}})
			if err != nil || p.Messages[0].Content.(*mcp.TextContent).Text != "hello "+version {
				t.Fatalf("prompts/get: %v %+v", err, p)
			}
			rr, err := sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "gob://item/7"})
			if err != nil || rr.Contents[0].Text != "item 7" {
				t.Fatalf("resources/read: %v %+v", err, rr)
			}
		})
	}
}

// TestFeatureRequestsAreRateLimited: prompts/get, resources/read and completion/complete draw from the caller's
// rate-limit bucket like tool calls; once it is empty they answer the JSON-RPC error CodeRateLimited with
// retry_after_seconds, and the backend is not asked.
func TestFeatureRequestsAreRateLimited(t *testing.T) {
	r := newRig(t, mcpserver.Options{Limiter: auth.NewLimiter(0.01, 3)})
	gob := startGoBackend(t)
	close(gob.release) // reads answer at once
	gob.release = make(chan struct{})
	r.register(t, "gob", map[string]any{"base_url": gob.url}, persistence.TransportHTTP)
	waitFor(t, "gob's prompt", func() bool { _, ok := r.sys.Routes().Prompt("gob__greet"); return ok })
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "rl", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: r.mux.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	for i := range 3 {
		if _, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: "gob__greet", Arguments: map[string]string{"who": "x"}}); err != nil {
			t.Fatalf("request %d within the burst: %v", i, err)
		}
	}
	for name, req := range map[string]func() error{
		"prompts/get": func() error {
			_, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: "gob__greet", Arguments: map[string]string{"who": "x"}})
			return err
		},
		"resources/read": func() error {
			_, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "gob://item/7"})
			return err
		},
	} {
		err := req()
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != mcpserver.CodeRateLimited || !strings.Contains(string(rpc.Data), "retry_after_seconds") {
			t.Fatalf("%s past the limit: %v", name, err)
		}
	}
}
