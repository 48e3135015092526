// Package oauthtest holds what the tests of the aggregator's OAuth to protected backends (issue 28) share: an
// OAuth-protected go-sdk MCP backend, the user's browser through an authorization server's redirects, and what
// testdata/peers/oidc-backend-as.mjs (panva's oidc-provider) counted.
package oauthtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// StartAS runs testdata/peers/oidc-backend-as.mjs as the authorization server of resource, redirecting its
// pre-registered client to redirect, with env added, and returns its issuer.
func StartAS(t testing.TB, resource, redirect string, env ...string) string {
	t.Helper()
	return peertest.StartOIDCScript(t, "oidc-backend-as.mjs", append([]string{"RESOURCE=" + resource, "REDIRECT=" + redirect}, env...)...)
}

// Listen opens the listener of a protected backend (Backend, CountingBackend, HostileBackend serve on it) and
// returns it with the backend's resource URL, its /mcp, which the authorization server is started for (StartAS).
func Listen(t testing.TB) (ln net.Listener, resource string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String() + "/mcp"
}

// Backend is a go-sdk streamable HTTP server protected by auth.RequireBearerToken: it takes JWT access tokens
// of the authorization server issuer for itself (verified against the issuer's keys), and the service token
// "svc-token" the registration uses for discovery; its whoami tool answers the token's subject. It serves its
// protected resource metadata (RFC 9728) and challenges with resource_metadata.
func Backend(t testing.TB, ln net.Listener, resource, issuer string) {
	t.Helper()
	CountingBackend(t, ln, resource, issuer)
}

// CountingBackend is Backend, and returns how many times its whoami tool ran (a request the backend refused with
// 401 never reaches it): what a test of "never run twice" counts.
func CountingBackend(t testing.TB, ln net.Listener, resource, issuer string) *atomic.Int64 {
	t.Helper()
	return backend(t, ln, resource, issuer, false)
}

// HostileBackend is CountingBackend with more to ask it: a resource whoami://me and a prompt whoami that answer
// the token's subject as whoami does, resource subscriptions (each subscribe and unsubscribe it takes is counted as
// a call too), a tool echo_auth that fails with a JSON-RPC error holding the Authorization header it was sent, and
// echo_auth_result that answers a tool error (isError) holding it (a backend that leaks what it gets in its errors;
// the aggregator must scrub it).
func HostileBackend(t testing.TB, ln net.Listener, resource, issuer string) *atomic.Int64 {
	t.Helper()
	return backend(t, ln, resource, issuer, true)
}

func backend(t testing.TB, ln net.Listener, resource, issuer string, hostile bool) *atomic.Int64 {
	t.Helper()
	calls := &atomic.Int64{}
	v, err := oauth.New(t.Context(), oauth.Config{Issuer: issuer, Audience: resource, Resource: resource,
		ClientScope: "backend:read", AdminScope: "backend:write"})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		if tok == "svc-token" {
			return &auth.TokenInfo{UserID: "service", Expiration: time.Now().Add(time.Hour)}, nil
		}
		c, err := v.Verify(ctx, tok)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: c.Subject, Scopes: c.Scopes, Expiration: c.Expiry}, nil
	}
	var opts *mcp.ServerOptions
	if hostile {
		count := func(context.Context, any) error { calls.Add(1); return nil }
		opts = &mcp.ServerOptions{
			SubscribeHandler:   func(ctx context.Context, r *mcp.SubscribeRequest) error { return count(ctx, r) },
			UnsubscribeHandler: func(ctx context.Context, r *mcp.UnsubscribeRequest) error { return count(ctx, r) },
		}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "oauth-backend", Version: "1"}, opts)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			who := ""
			if r.Extra != nil && r.Extra.TokenInfo != nil {
				who = r.Extra.TokenInfo.UserID
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "user=" + who}}}, nil
		})
	if hostile {
		subject := func(e *mcp.RequestExtra) string {
			if e != nil && e.TokenInfo != nil {
				return e.TokenInfo.UserID
			}
			return ""
		}
		srv.AddTool(&mcp.Tool{Name: "echo_auth", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, &jsonrpc.Error{Code: -32001, Message: "refused: you sent Authorization: " + r.Extra.Header.Get("Authorization")}
			})
		srv.AddTool(&mcp.Tool{Name: "echo_auth_result", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
					Text: "refused: you sent Authorization: " + r.Extra.Header.Get("Authorization")}}}, nil
			})
		srv.AddResource(&mcp.Resource{Name: "me", URI: "whoami://me", MIMEType: "text/plain"},
			func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "whoami://me", MIMEType: "text/plain", Text: "user=" + subject(r.Extra)}}}, nil
			})
		srv.AddPrompt(&mcp.Prompt{Name: "whoami"},
			func(_ context.Context, r *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "user=" + subject(r.Extra)}}}}, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: v.MetadataURL()})(h))
	mux.Handle(oauth.WellKnownPath+"/", v.MetadataHandler())
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return calls
}

// Browse plays the user's browser: it follows the authorization URL's redirects (the provider logs in the hinted
// user and consents at once) until one points at redirect, and returns that URL.
func Browse(t testing.TB, start, redirect string) *url.URL {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next, err := url.Parse(start)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if strings.HasPrefix(next.String(), redirect) {
			return next
		}
		res, err := client.Get(next.String())
		if err != nil {
			t.Fatalf("browse %s: %v", next, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		loc := res.Header.Get("Location")
		if loc == "" {
			t.Fatalf("%s answered %d without a redirect: %.300s", next, res.StatusCode, body)
		}
		if next, err = next.Parse(loc); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("too many redirects")
	return nil
}

// ASCounts reads what testdata/peers/oidc-backend-as.mjs counted: clients registered, revocations answered.
func ASCounts(t testing.TB, issuer string) (c struct{ Registrations, Revocations, Exchanges int }) {
	t.Helper()
	res, err := http.Get(issuer + "/_test/counts")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// RefreshStatus redeems g's refresh token at its token endpoint and returns the answer's status (400
// invalid_grant once revoked).
func RefreshStatus(t testing.TB, g backendauth.Grant, resource string) int {
	t.Helper()
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {g.Token.RefreshToken}, "client_id": {g.ClientID},
		"resource": {resource}}
	res, err := http.PostForm(g.TokenURL, form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
