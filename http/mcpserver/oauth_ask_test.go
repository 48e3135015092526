package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPerUserOAuthAskedInBand: on /mcp, a caller without a grant for a per_user server of an OAuth-protected
// backend (go-sdk, auth.RequireBearerToken, behind oidc-provider) whose client cannot be asked gets a tool error
// whose CREDENTIAL_REQUIRED names the route that starts the authorization (POST .../credentials/me/oauth); a
// client that supports URL-mode elicitation is sent to the console's page for the server, which starts the
// authorization, with a message saying to authorize. Once the user has gone through the authorization server and
// the flow is complete (here by the test, as the page would), the waiting call goes on as that user. A grant that
// no longer works (its refresh refused) asks again, and the call waits for the new authorization rather than
// running at once on the stored one.
func TestPerUserOAuthAskedInBand(t *testing.T) {
	ctx := context.Background()
	st, sys := encryptedSystem(t)
	toks, err := auth.Parse("ops:"+adminToken, "ci:"+clientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true, ConsoleURL: "https://agg.example/ui/"})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	ln, resource := oauthtest.Listen(t)
	redirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	oauthtest.Backend(t, ln, resource, oauthtest.StartAS(t, resource, redirect))
	raw, _ := json.Marshal(map[string]any{"base_url": resource, "headers": map[string]any{"Authorization": "Bearer svc-token"}})
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "ob", TransportType: persistence.TransportHTTP, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser,
		UserCredential: &persistence.UserCredentialSlot{OAuth: &persistence.OAuthSlot{}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ob.whoami routable", func() bool { return len(sys.Routes().Callable()) == 1 })
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: redirect,
		EndSession: sys.EndUserSession})

	// A client that cannot be asked: the tool error names the route that starts the authorization.
	ci := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{clientToken}}})
	res := callTool(t, ci, "ob__whoami", map[string]any{})
	var body struct {
		Code    string         `json:"error_code"`
		Context map[string]any `json:"context"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &body); err != nil || !res.IsError || body.Code != "CREDENTIAL_REQUIRED" ||
		body.Context["credential_url"] != "/api/v1/aggregator/servers/"+srv.ID+"/credentials/me/oauth" || body.Context["method"] != "POST" {
		t.Fatalf("the call of a client that cannot be asked: %v %s", res.IsError, b)
	}

	// A client that can be asked: the console's page, then the authorization, then the call goes on.
	var mu sync.Mutex
	var asked *mcp.ElicitParams
	hint := "alice"
	flowDone := make(chan error, 1)
	cl := mcp.NewClient(&mcp.Implementation{Name: "asker", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked = req.Params
			user := hint
			mu.Unlock()
			// The user opens the page, which starts the flow; the authorization server sends them back; the page
			// completes it.
			go func() {
				fctx := context.Background()
				started, err := flows.Start(fctx, srv, "token:ops")
				if err != nil {
					flowDone <- err
					return
				}
				cb := oauthtest.Browse(t, started.AuthorizationURL+"&login_hint="+user, redirect)
				q := cb.Query()
				if err := flows.Callback(fctx, q.Get("state"), q.Get("code"), q.Get("iss"), q.Get("error"), q.Get("error_description")); err != nil {
					flowDone <- err
					return
				}
				_, err = flows.Complete(fctx, "token:ops", q.Get("state"))
				flowDone <- err
			}()
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{adminToken}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res = callTool(t, &client{sess: s}, "ob__whoami", map[string]any{})
	if err := <-flowDone; err != nil {
		t.Fatalf("the authorization: %v", err)
	}
	mu.Lock()
	first := asked
	asked = nil
	mu.Unlock()
	if first == nil || first.Mode != "url" || first.URL != "https://agg.example/ui/#credential="+srv.ID+"&elicitation="+first.ElicitationID ||
		!strings.Contains(first.Message, "authorize") {
		t.Fatalf("elicitation asked: %+v", first)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "user=alice" {
		t.Fatalf("the call after the authorization: %v %+v", res.IsError, res.Content)
	}

	// The grant stops working: its token expired and the authorization server refuses its refresh token.
	stored, err := st.GetUserSecret(ctx, srv.ID, "token:ops")
	if err != nil {
		t.Fatal(err)
	}
	g, err := backendauth.DecodeGrant(stored.Secret)
	if err != nil {
		t.Fatal(err)
	}
	tok := *g.Token
	tok.Expiry, tok.RefreshToken = time.Now().Add(-time.Minute), "refresh-token-the-server-refuses"
	g.Token = &tok
	dead, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "token:ops", Secret: dead}); err != nil {
		t.Fatal(err)
	}
	if err := sys.EndUserSession(ctx, srv.ID, "token:ops"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	hint = "carol"
	mu.Unlock()
	res = callTool(t, &client{sess: s}, "ob__whoami", map[string]any{})
	select {
	case err := <-flowDone:
		if err != nil {
			t.Fatalf("the second authorization: %v", err)
		}
	case <-time.After(30 * time.Second):
		b, _ := json.Marshal(res)
		t.Fatalf("no second authorization; the call answered %s", b)
	}
	mu.Lock()
	second := asked
	mu.Unlock()
	if second == nil || second.Mode != "url" {
		t.Fatalf("a caller whose grant no longer works was not asked: %+v", second)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "user=carol" {
		t.Fatalf("the call after the new authorization: %v %+v", res.IsError, res.Content)
	}
}
