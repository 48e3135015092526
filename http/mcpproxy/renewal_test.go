package mcpproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/internal/syncbuf"
)

// TestProxyExchangedTokenRenewedIsScrubbed: a hostile backend echoes the Authorization header it was sent in its
// error (a JSON-RPC error, a tool error result). The token a caller's session got by renewal mid-session (its exchanged token expired; the caller's token
// was exchanged again) is scrubbed from what the client gets and from every log line, as the first one is: the
// session's secrets follow its renewals.
func TestProxyExchangedTokenRenewedIsScrubbed(t *testing.T) {
	logs := &syncbuf.Buffer{}
	x := startExchangeRigLogged(t, 0, logs)
	orgToken := peertest.OIDCClientToken(t, x.org, x.aggResource, "client-bot", "aggregator:client")
	if err := x.flows.Exchange(t.Context(), x.srv, "oauth:client-bot", orgToken); err != nil {
		t.Fatal(err)
	}
	cs, err := connectAs(t, x.url, orgToken)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(t *testing.T, token string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo_auth", Arguments: map[string]any{}})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != -32001 || !strings.Contains(je.Message, "you sent Authorization: Bearer ***") {
			t.Fatalf("echo_auth: %v; want the backend's error (-32001) with the token scrubbed", err)
		}
		if token != "" && strings.Contains(err.Error(), token) {
			t.Fatalf("the backend's error reached the client with the session's token: %v", err)
		}
		// The same echoed into a tool error result.
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo_auth_result", Arguments: map[string]any{}})
		b, _ := json.Marshal(res)
		if err != nil || !res.IsError || !strings.Contains(string(b), "you sent Authorization: Bearer ***") ||
			token != "" && strings.Contains(string(b), token) {
			t.Fatalf("echo_auth_result: %v %s; want the tool error with the token scrubbed", err, b)
		}
	}
	first := x.grantOf(t, "oauth:client-bot").Token
	echo(t, first.AccessToken)
	// The exchanged token expires: the next request renews it (exchanges the caller's token again) before it is
	// sent, and the backend echoes the new one.
	time.Sleep(time.Until(first.Expiry) + 500*time.Millisecond)
	before := x.exchanges(t)
	echo(t, "") // (any token: the one sent is only known once stored)
	renewed := x.grantOf(t, "oauth:client-bot").Token
	if renewed.AccessToken == first.AccessToken || x.exchanges(t) != before+1 {
		t.Fatalf("the session did not renew its token (exchanges %d -> %d)", before, x.exchanges(t))
	}
	echo(t, renewed.AccessToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if got, err := whoami(ctx, cs); err != nil || got != "user=client-bot" {
		t.Fatalf("whoami on the same session: %q, %v", got, err)
	}
	for _, tok := range []string{first.AccessToken, renewed.AccessToken, orgToken} {
		if strings.Contains(logs.String(), tok) {
			t.Fatal("a token is in the log")
		}
	}
}

// TestProxyExchangedRenewalFails: a caller whose exchanged grant expires in the middle of a session on
// /mcp/servers/{name}, and whose token cannot be exchanged again (here a static token: nothing to exchange), is
// answered CREDENTIAL_REQUIRED with where to authorize, as /mcp answers, not the transport's rejection (-32005): a
// tool call gets the tool error with the body and its authorization route, another request that body as the
// JSON-RPC error's data (resources/subscribe and unsubscribe included); a client that supports URL-mode elicitation
// is sent to the console's page for the server. The request never reached the backend.
func TestProxyExchangedRenewalFails(t *testing.T) {
	x := startExchangeRig(t, 0)
	orgToken := peertest.OIDCClientToken(t, x.org, x.aggResource, "client-bot", "aggregator:client")
	// The static caller's grant, exchanged from a token of the organisation's issuer they no longer present.
	if err := x.flows.Exchange(t.Context(), x.srv, "token:ci", orgToken); err != nil {
		t.Fatal(err)
	}
	plain, err := connectAs(t, x.url, exchangeStatic)
	if err != nil {
		t.Fatal(err)
	}
	asker, err := mcp.NewClient(&mcp.Implementation{Name: "asker", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	}).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: x.url, HTTPClient: &http.Client{Transport: bearerRT{exchangeStatic}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = asker.Close() })
	for _, cs := range []*mcp.ClientSession{plain, asker} {
		if got, err := whoami(t.Context(), cs); err != nil || got != "user=client-bot" {
			t.Fatalf("whoami before the grant expired: %q, %v", got, err)
		}
	}
	time.Sleep(time.Until(x.grantOf(t, "token:ci").Token.Expiry) + 500*time.Millisecond)
	ran := x.calls.Load()
	authorize := gateway.OAuthStartPath(x.srv.ID)
	wantBody := func(t *testing.T, raw []byte) {
		t.Helper()
		var body struct {
			Code    string         `json:"error_code"`
			Context map[string]any `json:"context"`
		}
		if err := json.Unmarshal(raw, &body); err != nil || body.Code != "CREDENTIAL_REQUIRED" ||
			body.Context["credential_url"] != authorize || body.Context["server"] != "xo" {
			t.Fatalf("want CREDENTIAL_REQUIRED with %s: %s", authorize, raw)
		}
	}

	t.Run("tool call", func(t *testing.T) {
		res, err := plain.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("want the tool error CREDENTIAL_REQUIRED; got %v", err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if !res.IsError {
			t.Fatalf("not a tool error: %s", b)
		}
		wantBody(t, b)
	})
	t.Run("resource read", func(t *testing.T) {
		_, err := plain.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "whoami://me"})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code == -32005 {
			t.Fatalf("want a JSON-RPC error with the body; got %v", err)
		}
		wantBody(t, je.Data)
	})
	// A subscription (the backend takes them) is a request like any other: asked of a client that can open a URL,
	// answered with the body as the JSON-RPC error's data to one that cannot.
	for _, tc := range []struct {
		name string
		do   func(context.Context, *mcp.ClientSession) error
	}{
		{"subscribe", func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "whoami://me"})
		}},
		{"unsubscribe", func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "whoami://me"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var je *jsonrpc.Error
			if err := tc.do(t.Context(), plain); !errors.As(err, &je) || je.Code != -32043 {
				t.Fatalf("want CREDENTIAL_REQUIRED as JSON-RPC error -32043 with the body; got %v", err)
			}
			wantBody(t, je.Data)
			if err := tc.do(t.Context(), asker); !errors.As(err, &je) || je.Code != -32042 {
				t.Fatalf("want URLElicitationRequired (-32042) for a client that can open a URL; got %v", err)
			}
			wantBody(t, je.Data)
		})
	}
	t.Run("client that can open a URL", func(t *testing.T) {
		_, err := asker.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != -32042 {
			t.Fatalf("want URLElicitationRequired (-32042); got %v", err)
		}
		var data struct {
			Elicitations []mcp.ElicitParams `json:"elicitations"`
		}
		if err := json.Unmarshal(je.Data, &data); err != nil || len(data.Elicitations) != 1 ||
			!strings.HasPrefix(data.Elicitations[0].URL, exchangeConsole+"#credential="+x.srv.ID+"&elicitation=") {
			t.Fatalf("want one elicitation of the console's page for the server: %s", je.Data)
		}
		wantBody(t, je.Data)
	})
	if n := x.calls.Load() - ran; n != 0 {
		t.Fatalf("the backend ran %d calls on an expired grant", n)
	}
}
