package mcpproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// Tokens of the per-user proxy tests: three client tokens, whose credential subjects are token:<name>.
const (
	aliceToken = "alice-client-token-0001"
	bobToken   = "bob-client-token-00002"
	carolToken = "carol-client-token-0003"
)

// authBackend is an in-process go-sdk streamable HTTP server whose tool whoami answers the Authorization header
// the request reached it with.
func authBackend(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "auth-echo", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "auth=" + r.Extra.Header.Get("Authorization")}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// perUserProxy serves the proxy behind bearer tokens (alice, bob, carol: clients) on r's actor system.
func perUserProxy(t *testing.T, r *rig, opts mcpproxy.Options) string {
	t.Helper()
	toks, err := auth.Parse("", "alice:"+aliceToken+",bob:"+bobToken+",carol:"+carolToken, "")
	if err != nil {
		t.Fatal(err)
	}
	proxy := mcpproxy.New(r.sys, opts)
	t.Cleanup(proxy.Close)
	mux := http.NewServeMux()
	mux.Handle(mcpproxy.Prefix, proxy)
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)
	return hs.URL + mcpproxy.Prefix
}

// registerPerUser registers a per_user server and waits until it is CONNECTED (its own session has no caller's
// credential: the backends list their tools without one).
func registerPerUser(t *testing.T, r *rig, name, transport string, cfg map[string]any, slot persistence.UserCredentialSlot) persistence.Server {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	srv, err := r.sys.Register(context.Background(), actors.RegisterRequest{Name: name, TransportType: transport, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser, UserCredential: &slot})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	r.waitStatus(srv.ID, persistence.StatusConnected, 30*time.Second)
	return srv
}

func putSecret(t *testing.T, r *rig, serverID, subject, secret string) {
	t.Helper()
	if _, _, err := r.store.PutUserSecret(context.Background(), persistence.UserSecret{ServerID: serverID, Subject: subject, Secret: []byte(secret)}); err != nil {
		t.Fatal(err)
	}
}

// connectAs opens a go-sdk client session to url with token.
func connectAs(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "per-user", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func whoami(ctx context.Context, cs *mcp.ClientSession) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "", &toolError{b.String()}
	}
	return b.String(), nil
}

type toolError struct{ text string }

func (e *toolError) Error() string { return "tool error: " + e.text }

// rawPost posts one JSON-RPC message to url with token (and a session id, when sid is not ""); it returns the
// status and the body as text.
func rawPost(t *testing.T, url, token, sid, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", actors.ProtocolVersion)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// initializeWith is an initialize request declaring the capabilities caps (JSON).
func initializeWith(caps string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":` + caps +
		`,"clientInfo":{"name":"raw","version":"1"}}}`
}

// wantCredentialRequired checks a 403 CREDENTIAL_REQUIRED in the error shape naming where to store the credential.
func wantCredentialRequired(t *testing.T, status int, body string, srv persistence.Server) {
	t.Helper()
	var b struct {
		Detail    string         `json:"detail"`
		ErrorCode string         `json:"error_code"`
		Context   map[string]any `json:"context"`
	}
	_ = json.Unmarshal([]byte(body), &b)
	if status != http.StatusForbidden || b.ErrorCode != errcode.CredentialRequired ||
		b.Context["credential_url"] != gateway.CredentialPath(srv.ID) || b.Context["server_id"] != srv.ID ||
		!strings.Contains(b.Detail, gateway.CredentialPath(srv.ID)) {
		t.Fatalf("want 403 CREDENTIAL_REQUIRED naming %s, got %d %s", gateway.CredentialPath(srv.ID), status, body)
	}
}

// TestProxyPerUser: through /mcp/servers/{name}, a per_user server's sessions run on each caller's own
// credential, injected where the registration says (an HTTP header with its prefix; a stdio child's environment
// variable): two callers each see their own secret in the backend's answers; a caller without one is refused 403
// CREDENTIAL_REQUIRED; a caller can never reach another caller's session, even with its Mcp-Session-Id; a caller
// who replaces their credential keeps their client session, whose next call runs on the new one; and deleting a
// caller's credential ends that caller's session only (the next one is refused), while the other caller's session
// goes on.
func TestProxyPerUser(t *testing.T) {
	tests := []struct {
		name      string
		transport string
		slot      persistence.UserCredentialSlot
		config    func(t *testing.T) map[string]any
		// seen is what whoami answers for a caller whose secret is secret.
		seen func(secret string) string
	}{
		{"HTTP header", persistence.TransportHTTP, persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "},
			func(t *testing.T) map[string]any { return map[string]any{"base_url": authBackend(t)} },
			func(secret string) string { return "auth=Bearer " + secret }},
		{"STDIO env", persistence.TransportSTDIO, persistence.UserCredentialSlot{Env: "API_KEY"},
			func(t *testing.T) map[string]any {
				return map[string]any{"command": peertest.GoBinary(t, "./testdata/envecho")}
			},
			func(secret string) string { return "key=" + secret + " " }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := tc.config(t) // first, so that it is cleaned up last: after the actors and the proxy's sessions
			r := newRig(t, mcpproxy.Options{})
			base := perUserProxy(t, r, mcpproxy.Options{})
			srv := registerPerUser(t, r, "per", tc.transport, cfg, tc.slot)
			url := base + srv.Name
			putSecret(t, r, srv.ID, "token:alice", "alice-secret-1")
			putSecret(t, r, srv.ID, "token:bob", "bob-secret-2")

			sessions := map[string]*mcp.ClientSession{}
			for _, who := range []struct{ name, token, secret string }{{"alice", aliceToken, "alice-secret-1"}, {"bob", bobToken, "bob-secret-2"}} {
				cs, err := connectAs(t, url, who.token)
				if err != nil {
					t.Fatalf("%s connects: %v", who.name, err)
				}
				sessions[who.name] = cs
				got, err := whoami(ctx, cs)
				if err != nil || !strings.HasPrefix(got, tc.seen(who.secret)) {
					t.Fatalf("%s's whoami: %q %v, want %q...", who.name, got, err, tc.seen(who.secret))
				}
			}

			// No credential: refused before any backend session, with where to store one.
			status, body := rawPost(t, url, carolToken, "", initializeWith(`{}`))
			wantCredentialRequired(t, status, body, srv)

			// Bob cannot use Alice's session, neither to call nor to open its stream.
			alice := sessions["alice"]
			call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`
			status, body = rawPost(t, url, bobToken, alice.ID(), call)
			if status != http.StatusForbidden || strings.Contains(body, "alice-secret-1") {
				t.Fatalf("bob through alice's session: %d %s", status, body)
			}
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Authorization", "Bearer "+bobToken)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", alice.ID())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("bob opened alice's stream: %d", resp.StatusCode)
			}
			if got, err := whoami(ctx, alice); err != nil || !strings.HasPrefix(got, tc.seen("alice-secret-1")) {
				t.Fatalf("alice after bob's attempts: %q %v", got, err)
			}

			// Bob replaces his credential (what PUT .../credentials/me does): his client's session goes on, and its
			// next call reaches the backend with the new one (a new backend session underneath).
			putSecret(t, r, srv.ID, "token:bob", "bob-secret-new")
			if err := r.sys.EndUserSession(ctx, srv.ID, "token:bob"); err != nil {
				t.Fatal(err)
			}
			if got, err := whoami(ctx, sessions["bob"]); err != nil || !strings.HasPrefix(got, tc.seen("bob-secret-new")) {
				t.Fatalf("bob's session after he replaced his credential: %q %v, want %q...", got, err, tc.seen("bob-secret-new"))
			}

			// Alice's credential is deleted (what DELETE .../credentials/me does): her session ends, Bob's goes on.
			if err := r.store.DeleteUserSecret(ctx, srv.ID, "token:alice"); err != nil {
				t.Fatal(err)
			}
			if err := r.sys.EndUserSession(ctx, srv.ID, "token:alice"); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, alice, 20*time.Second)
			if status, body := rawPost(t, url, aliceToken, alice.ID(), call); status != http.StatusNotFound {
				t.Fatalf("alice's ended session still answers after her credential was deleted: %d %s", status, body)
			}
			if got, err := whoami(ctx, sessions["bob"]); err != nil || !strings.HasPrefix(got, tc.seen("bob-secret-new")) {
				t.Fatalf("bob after alice's credential was deleted: %q %v", got, err)
			}
			status, body = rawPost(t, url, aliceToken, "", initializeWith(`{}`))
			wantCredentialRequired(t, status, body, srv)
		})
	}
}

// TestProxyPerUserElicits: with the console's address known, a client that supports URL-mode elicitation and has
// no credential for a per_user server gets the initialize's JSON-RPC error URLElicitationRequired (-32042) whose
// elicitation points to the console's page for the server (with the CREDENTIAL_REQUIRED body beside it); a client
// without the url mode gets 403 CREDENTIAL_REQUIRED. Once the credential is stored, the client connects and its
// session runs on it.
func TestProxyPerUserElicits(t *testing.T) {
	backend := authBackend(t)
	r := newRig(t, mcpproxy.Options{})
	base := perUserProxy(t, r, mcpproxy.Options{ConsoleURL: "https://agg.example/ui/"})
	srv := registerPerUser(t, r, "per", persistence.TransportHTTP, map[string]any{"base_url": backend},
		persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "})
	url := base + srv.Name

	tests := []struct {
		name string
		caps string
		ask  bool
	}{
		{"url mode", `{"elicitation":{"url":{}}}`, true},
		{"url and form", `{"elicitation":{"form":{},"url":{}}}`, true},
		{"form mode only", `{"elicitation":{"form":{}}}`, false},
		{"no elicitation", `{}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawPost(t, url, carolToken, "", initializeWith(tc.caps))
			if !tc.ask {
				wantCredentialRequired(t, status, body, srv)
				return
			}
			var m struct {
				ID    int `json:"id"`
				Error struct {
					Code int64 `json:"code"`
					Data struct {
						Elicitations []mcp.ElicitParams `json:"elicitations"`
						ErrorCode    string             `json:"error_code"`
						Context      map[string]any     `json:"context"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &m); err != nil || status != http.StatusOK {
				t.Fatalf("answer: %d %s (%v)", status, body, err)
			}
			e := m.Error
			if m.ID != 7 || e.Code != mcp.CodeURLElicitationRequired || len(e.Data.Elicitations) != 1 ||
				e.Data.ErrorCode != errcode.CredentialRequired || e.Data.Context["credential_url"] != gateway.CredentialPath(srv.ID) {
				t.Fatalf("answer: %s", body)
			}
			el := e.Data.Elicitations[0]
			if el.Mode != "url" || el.ElicitationID == "" || el.URL != "https://agg.example/ui/#credential="+srv.ID+"&elicitation="+el.ElicitationID {
				t.Fatalf("elicitation: %+v", el)
			}
		})
	}

	// The user stored the credential on the page: the client connects again, on it.
	putSecret(t, r, srv.ID, "token:carol", "carol-secret-3")
	cs, err := connectAs(t, url, carolToken)
	if err != nil {
		t.Fatalf("carol connects once her credential is stored: %v", err)
	}
	if got, err := whoami(context.Background(), cs); err != nil || got != "auth=Bearer carol-secret-3" {
		t.Fatalf("carol's whoami: %q %v", got, err)
	}
}
