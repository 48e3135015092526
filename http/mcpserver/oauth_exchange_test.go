package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPerUserOAuthExchangeFeatures: on /mcp, a caller who came with an OAuth token of the organisation's issuer and
// has no grant yet for a per_user server whose backend's authorization server exchanges tokens (RFC 8693) reads its
// resource and gets its prompt as themselves: the CREDENTIAL_REQUIRED of the first try makes the gateway exchange
// the caller's token (one exchange), and the request runs once more, as a tool call does. And a hostile backend that
// echoes the Authorization header it was sent in an error never gets the caller's token, the renewed one included
// (its exchanged token expired, 6 s, and was exchanged again), to the client.
func TestPerUserOAuthExchangeFeatures(t *testing.T) {
	ctx := context.Background()
	st, sys := encryptedSystem(t)
	aggResource := "http://aggregator.example/mcp"
	org := peertest.StartOIDCScript(t, "oidc-provider.mjs", "RESOURCE="+aggResource)
	v, err := oauth.New(ctx, oauth.Config{Issuer: org, Audience: aggResource, Resource: aggResource,
		ClientScope: "aggregator:client", AdminScope: "aggregator:admin"})
	if err != nil {
		t.Fatal(err)
	}
	ln, resource := oauthtest.Listen(t)
	redirect := "http://127.0.0.1:1" + backendauth.CallbackPath
	issuer := oauthtest.StartAS(t, resource, redirect, "ORG_ISSUER="+org, "ACCESS_TTL=6")
	oauthtest.HostileBackend(t, ln, resource, issuer)
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: st, Outbound: sys.Outbound(), RedirectURL: redirect,
		EndSession: sys.EndUserSession})
	gw := gateway.New(sys, gateway.Options{ExchangeCredential: flows.CallExchanger(st.GetServer)})
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true, Gateway: gw})
	t.Cleanup(ep.Close)
	toks, err := auth.Parse("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(auth.Middleware(toks.WithOAuth(v), auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	raw, _ := json.Marshal(map[string]any{"base_url": resource, "headers": map[string]any{"Authorization": "Bearer svc-token"}})
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "xo", TransportType: persistence.TransportHTTP, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser,
		UserCredential: &persistence.UserCredentialSlot{OAuth: &persistence.OAuthSlot{TokenExchange: true}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "xo connected", func() bool {
		s, ok := sys.Routes().Server(srv.ID)
		return ok && s.Status == persistence.StatusConnected
	})
	as := func(user string) *client {
		tok := peertest.OIDCClientToken(t, org, aggResource, user, "aggregator:client")
		return connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{tok}}})
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	first := as("client-bot")
	uri, prompt := whoamiFeatures(t, rctx, first)
	exchanges := func() int { return oauthtest.ASCounts(t, issuer).Exchanges }

	t.Run("resources/read", func(t *testing.T) {
		before := exchanges()
		res, err := first.sess.ReadResource(rctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "user=client-bot" {
			t.Fatalf("read %s without a grant yet: %v %+v; want user=client-bot", uri, err, res)
		}
		if n := exchanges() - before; n != 1 {
			t.Fatalf("%d exchanges, want 1", n)
		}
	})
	t.Run("prompts/get", func(t *testing.T) {
		other := as("group-bot")
		before := exchanges()
		p, err := other.sess.GetPrompt(rctx, &mcp.GetPromptParams{Name: prompt})
		if err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != "user=group-bot" {
			t.Fatalf("get prompt %s without a grant yet: %v %+v; want user=group-bot", prompt, err, p)
		}
		if n := exchanges() - before; n != 1 {
			t.Fatalf("%d exchanges, want 1", n)
		}
	})
	t.Run("renewed token scrubbed", func(t *testing.T) {
		echo := func(t *testing.T) string {
			t.Helper()
			// The backend's JSON-RPC error is the call's (as the backend answered it); a tool error would do too.
			res, err := first.sess.CallTool(rctx, &mcp.CallToolParams{Name: "xo__echo_auth", Arguments: map[string]any{}})
			b, _ := json.Marshal(res)
			out := string(b)
			if err != nil {
				out = err.Error()
			}
			if !strings.Contains(out, "you sent Authorization: Bearer ***") {
				t.Fatalf("echo_auth: want the backend's error with the token scrubbed: %s", out)
			}
			return out
		}
		grant := func() backendauth.Grant {
			s, err := st.GetUserSecret(ctx, srv.ID, "oauth:client-bot")
			if err != nil {
				t.Fatal(err)
			}
			g, err := backendauth.DecodeGrant(s.Secret)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		old := grant().Token
		if out := echo(t); strings.Contains(out, old.AccessToken) {
			t.Fatalf("the token reached the client: %s", out)
		}
		time.Sleep(time.Until(old.Expiry) + 500*time.Millisecond)
		out := echo(t) // renews (exchanges again) before it is sent; the backend echoes the new token
		if renewed := grant().Token; renewed.AccessToken == old.AccessToken || strings.Contains(out, renewed.AccessToken) {
			t.Fatalf("renewed %v; the renewed token reached the client: %s", renewed.AccessToken != old.AccessToken, out)
		}
	})
}
