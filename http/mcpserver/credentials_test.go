package mcpserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// perUserRig serves /mcp (bearer tokens ops and ci) over an encrypted store with one per_user server, "per", whose
// tool whoami answers the X-Api-Key header it received; ci has stored its own key, ops none.
func perUserRig(t testing.TB, opts mcpserver.Options) (persistence.Store, *httptest.Server, persistence.Server) {
	st, hs, srv, _ := perUserSystem(t, opts)
	return st, hs, srv
}

// encryptedSystem starts an actor system on an encrypted embedded store (callers' secrets need one), both closed
// when the test ends.
func encryptedSystem(t testing.TB, tweak ...func(*actors.Config)) (persistence.Store, *actors.System) {
	t.Helper()
	return encryptedSystemLogged(t, slog.New(slog.DiscardHandler), tweak...)
}

// encryptedSystemLogged is encryptedSystem whose actors log to logger.
func encryptedSystemLogged(t testing.TB, logger *slog.Logger, tweak ...func(*actors.Config)) (persistence.Store, *actors.System) {
	t.Helper()
	ctx := context.Background()
	inner, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypt.NewKeyring(crypt.NewKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := crypt.Wrap(inner, ring)
	t.Cleanup(st.Close)
	cfg := actors.DefaultConfig()
	for _, f := range tweak {
		f(&cfg)
	}
	return st, startActors(t, st, actors.Deps{Config: cfg, Logger: logger})
}

// perUserSystem is perUserRig with its actor system.
func perUserSystem(t testing.TB, opts mcpserver.Options, tweak ...func(*actors.Config)) (persistence.Store, *httptest.Server, persistence.Server, *actors.System) {
	t.Helper()
	ctx := context.Background()
	st, sys := encryptedSystem(t, tweak...)
	toks, err := auth.Parse("ops:"+adminToken, "ci:"+clientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := mcpserver.New(sys, st, opts)
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	backend := mcp.NewServer(&mcp.Implementation{Name: "echo-auth", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "auth=" + r.Extra.Header.Get("X-Api-Key")}}}, nil
		})
	// A resource and a prompt that answer the key the request carried too (TestPerUserFeaturesPerCaller).
	backend.AddResource(&mcp.Resource{URI: "whoami://me", Name: "me", MIMEType: "text/plain"},
		func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "whoami://me", Text: "auth=" + r.Extra.Header.Get("X-Api-Key")}}}, nil
		})
	backend.AddPrompt(&mcp.Prompt{Name: "whoami"}, func(_ context.Context, r *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "auth=" + r.Extra.Header.Get("X-Api-Key")}}}}, nil
	})
	bs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	t.Cleanup(bs.Close)
	raw, _ := json.Marshal(map[string]any{"base_url": bs.URL})
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "per", TransportType: persistence.TransportHTTP, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser, UserCredential: &persistence.UserCredentialSlot{Header: "X-Api-Key"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "per.whoami routable", func() bool { return len(sys.Routes().Callable()) == 1 })
	if _, _, err := st.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "token:ci", Secret: []byte("ci-own-key")}); err != nil {
		t.Fatal(err)
	}
	return st, hs, srv, sys
}

// TestPerUserOnMCP: on /mcp, a per_user server's tool runs with the calling token's own secret (the backend sees
// it as the Authorization it names), and a caller without one gets a tool error whose body says
// CREDENTIAL_REQUIRED and where to store the credential.
func TestPerUserOnMCP(t *testing.T) {
	_, hs, srv := perUserRig(t, mcpserver.Options{RequireIdentity: true})
	hc := func(token string) *http.Client { return &http.Client{Transport: bearer{token}} }

	ci := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(clientToken)})
	res := callTool(t, ci, "per__whoami", map[string]any{})
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "auth=ci-own-key" {
		t.Fatalf("ci's call: %+v", res.Content)
	}
	ops := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(adminToken)})
	res = callTool(t, ops, "per__whoami", map[string]any{})
	body, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || !strings.Contains(string(body), `"error_code":"`+errcode.CredentialRequired+`"`) ||
		!strings.Contains(string(body), "/api/v1/aggregator/servers/"+srv.ID+"/credentials/me") {
		t.Fatalf("ops's call without a credential: error %v, %s", res.IsError, body)
	}
}

// TestPerUserAskedInBand: a caller without a credential whose client supports URL-mode elicitation is asked to open
// the console's page for the server; once the credential is stored (here by the test, as the page would) the call
// goes on with the new secret (a 2025-11-25 client is also told the elicitation is complete). A user who declines
// gets CREDENTIAL_REQUIRED, as a client that cannot be asked does. Both protocol revisions.
func TestPerUserAskedInBand(t *testing.T) {
	for _, version := range []string{"2025-11-25", mcpserver.ModernProtocol} {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			st, hs, srv := perUserRig(t, mcpserver.Options{RequireIdentity: true, ConsoleURL: "https://agg.example/ui/"})
			for _, tc := range []struct {
				name   string
				accept bool
			}{{"declined", false}, {"stored", true}} {
				t.Run(tc.name, func(t *testing.T) {
					var mu sync.Mutex
					var asked *mcp.ElicitParams
					completed := make(chan string, 1)
					cl := mcp.NewClient(&mcp.Implementation{Name: "asker", Version: "1"}, &mcp.ClientOptions{
						Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
						ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
							mu.Lock()
							asked = req.Params
							mu.Unlock()
							if !tc.accept {
								return &mcp.ElicitResult{Action: "decline"}, nil
							}
							// The user opens the page and stores the key (the console's PUT .../credentials/me).
							go func() {
								time.Sleep(700 * time.Millisecond)
								_, _, _ = st.PutUserSecret(context.Background(), persistence.UserSecret{ServerID: srv.ID, Subject: "token:ops", Secret: []byte("ops-own-key")})
							}()
							return &mcp.ElicitResult{Action: "accept"}, nil
						},
						ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
							completed <- req.Params.ElicitationID
						},
					})
					s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{adminToken}}},
						&mcp.ClientSessionOptions{ProtocolVersion: version})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					res := callTool(t, &client{sess: s}, "per__whoami", map[string]any{})
					mu.Lock()
					defer mu.Unlock()
					if asked == nil || asked.Mode != "url" || asked.ElicitationID == "" ||
						asked.URL != "https://agg.example/ui/#credential="+srv.ID+"&elicitation="+asked.ElicitationID {
						t.Fatalf("elicitation asked: %+v", asked)
					}
					if !tc.accept {
						body, _ := json.Marshal(res.StructuredContent)
						if !res.IsError || !strings.Contains(string(body), errcode.CredentialRequired) {
							t.Fatalf("declined: %v %s", res.IsError, body)
						}
						return
					}
					if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "auth=ops-own-key" {
						t.Fatalf("the call after the credential was stored: %v %+v", res.IsError, res.Content)
					}
					if version == mcpserver.ModernProtocol {
						return // no session to notify: the retry's answer is the result
					}
					select {
					case id := <-completed:
						if id != asked.ElicitationID {
							t.Fatalf("completion of %q, asked %q", id, asked.ElicitationID)
						}
					case <-time.After(5 * time.Second):
						t.Fatal("no notifications/elicitation/complete")
					}
				})
			}
		})
	}
}

// TestPerUserFeaturesPerCaller: a per_user server's resources and prompts are read on each caller's own session:
// two callers with their own secrets each see their own key in the backend's answer (resources/read, prompts/get),
// never the registration's (which has none).
func TestPerUserFeaturesPerCaller(t *testing.T) {
	st, hs, srv := perUserRig(t, mcpserver.Options{RequireIdentity: true})
	if _, _, err := st.PutUserSecret(context.Background(), persistence.UserSecret{ServerID: srv.ID, Subject: "token:ops", Secret: []byte("ops-own-key")}); err != nil {
		t.Fatal(err)
	}
	hc := func(token string) *http.Client { return &http.Client{Transport: bearer{token}} }
	ci := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(clientToken)})
	ops := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(adminToken)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	uri, prompt := whoamiFeatures(t, ctx, ci)
	for _, tc := range []struct {
		name string
		sess *client
		want string
	}{{"ci", ci, "auth=ci-own-key"}, {"ops", ops, "auth=ops-own-key"}} {
		res, err := tc.sess.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != tc.want {
			t.Fatalf("%s reads %s: %v %+v; want %s", tc.name, uri, err, res, tc.want)
		}
		p, err := tc.sess.sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt})
		if err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != tc.want {
			t.Fatalf("%s gets prompt %s: %v %+v; want %s", tc.name, prompt, err, p, tc.want)
		}
	}
}

// whoamiFeatures waits until the client lists a per_user server's whoami://me resource and whoami prompt, and
// returns the URI and the prompt's name as listed.
func whoamiFeatures(t *testing.T, ctx context.Context, c *client) (uri, prompt string) {
	t.Helper()
	waitFor(t, "the per_user server's resource and prompt listed", func() bool {
		rs, err := c.sess.ListResources(ctx, nil)
		if err != nil {
			return false
		}
		for _, r := range rs.Resources {
			if strings.Contains(r.URI, "whoami://me") || strings.HasSuffix(r.Name, "me") {
				uri = r.URI
			}
		}
		ps, err := c.sess.ListPrompts(ctx, nil)
		if err != nil {
			return false
		}
		for _, p := range ps.Prompts {
			if strings.HasSuffix(p.Name, "whoami") {
				prompt = p.Name
			}
		}
		return uri != "" && prompt != ""
	})
	return uri, prompt
}
