package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// oidcProvider is testdata/peers/oidc-provider.mjs: panva's oidc-provider issuing JWT access tokens for one
// resource with the client_credentials grant.
type oidcProvider struct {
	issuer, resource string
}

// startOIDCProvider runs the provider on a free port for resource and waits until it is ready.
func startOIDCProvider(t *testing.T, resource string) *oidcProvider {
	t.Helper()
	return &oidcProvider{issuer: peertest.StartOIDCScript(t, "oidc-provider.mjs", "RESOURCE="+resource), resource: resource}
}

// token gets an access token for the resource with the client_credentials grant.
func (p *oidcProvider) token(t *testing.T, client, scope string) string {
	t.Helper()
	return peertest.OIDCClientToken(t, p.issuer, p.resource, client, scope)
}

// oauthAnswer is a response's status, WWW-Authenticate and body.
type oauthAnswer struct {
	status    int
	challenge string
	body      string
}

func oauthDo(t *testing.T, method, u, token, body string) oauthAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return oauthAnswer{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)}
}

// TestOAuthE2E: the daemon as an OAuth protected resource of a real OpenID provider (oidc-provider). A client
// without a token is told where the metadata is; the metadata names the provider; tokens from the provider work on
// REST and /mcp with the role their scopes give; a token without the aggregator's scopes is 403 naming the scope;
// a tampered token is 401; static tokens keep working; the audit log names the token's subject.
func TestOAuthE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	resource := d.mcp + "/mcp"
	idp := startOIDCProvider(t, resource)
	d.env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+idp.issuer, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+e2eAdminToken)
	d.start()
	if !strings.Contains(d.logs.String(), "OAuth access tokens accepted") {
		t.Fatalf("the start log does not say OAuth is on:\n%s", d.logs)
	}
	metaURL := d.mcp + "/.well-known/oauth-protected-resource/mcp"

	// Without a token: 401 pointing at the metadata, on every MCP endpoint and on REST.
	for _, u := range []string{d.mcp + "/mcp", d.mcp + "/sse", d.mcp + "/mcp/servers/x", d.mcp + "/mcp/profiles/x", d.base + "/servers"} {
		method := "POST"
		if strings.HasSuffix(u, "/sse") || strings.HasSuffix(u, "/servers") {
			method = "GET"
		}
		a := oauthDo(t, method, u, "", `{}`)
		cs, err := oauthex.ParseWWWAuthenticate([]string{a.challenge})
		if a.status != http.StatusUnauthorized || err != nil || len(cs) != 1 || cs[0].Params["resource_metadata"] != metaURL ||
			!strings.Contains(a.body, `"error_code":"UNAUTHORIZED"`) {
			t.Fatalf("%s %s without a token: %d %q %s", method, u, a.status, a.challenge, a.body)
		}
	}
	// The metadata, as an MCP client reads it (root and path form).
	for _, u := range []string{metaURL, d.mcp + "/.well-known/oauth-protected-resource"} {
		meta, err := oauthex.GetProtectedResourceMetadata(context.Background(), u, resource, http.DefaultClient)
		if err != nil || meta.Resource != resource || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != idp.issuer ||
			strings.Join(meta.ScopesSupported, " ") != "aggregator:client aggregator:admin" {
			t.Fatalf("metadata at %s: %+v %v", u, meta, err)
		}
	}

	adminTok := idp.token(t, "admin-bot", "aggregator:admin aggregator:client")
	clientTok := idp.token(t, "client-bot", "aggregator:client")
	plainTok := idp.token(t, "plain-bot", "")
	tampered := clientTok[:len(clientTok)-4] + "AAAA"
	reg := `{"name":"oauth-x","transport_type":"HTTP","auto_connect":false,"connection_config":{"base_url":"http://127.0.0.1:1/mcp"}}`
	for _, c := range []struct {
		name, method, url, token, body string
		want                           int
		scope                          string // the scope a 403 must name
	}{
		{"client reads", "GET", d.base + "/servers", clientTok, "", 200, ""},
		{"client cannot register", "POST", d.base + "/servers", clientTok, reg, 403, "aggregator:admin"},
		{"no scope of ours", "GET", d.base + "/servers", plainTok, "", 403, "aggregator:client"},
		{"no scope of ours on /mcp", "POST", d.mcp + "/mcp", plainTok, `{}`, 403, "aggregator:client"},
		{"tampered", "GET", d.base + "/servers", tampered, "", 401, ""},
		{"tampered on /mcp", "POST", d.mcp + "/mcp", tampered, `{}`, 401, ""},
		{"admin registers", "POST", d.base + "/servers", adminTok, reg, 201, ""},
		{"static admin token", "GET", d.base + "/audit", e2eAdminToken, "", 200, ""},
	} {
		a := oauthDo(t, c.method, c.url, c.token, c.body)
		if a.status != c.want {
			t.Fatalf("%s: %d, want %d: %s", c.name, a.status, c.want, a.body)
		}
		if c.want == 403 && (!strings.Contains(a.challenge, `error="insufficient_scope"`) || !strings.Contains(a.challenge, `scope="`+c.scope+`"`) ||
			!strings.Contains(a.body, `"error_code":"FORBIDDEN"`)) {
			t.Fatalf("%s: 403 challenge %q body %s", c.name, a.challenge, a.body)
		}
	}
	// The audit log names the subject (oidc-provider's client-credentials tokens have the client as sub).
	a := oauthDo(t, "GET", d.base+"/audit", adminTok, "")
	if a.status != 200 || !strings.Contains(a.body, `"actor":"admin-bot"`) {
		t.Fatalf("audit: %d %s", a.status, a.body)
	}
	if strings.Contains(d.logs.String(), adminTok) || strings.Contains(d.logs.String(), clientTok) {
		t.Fatal("a token is in the daemon's log")
	}

	// /mcp with the client token through the go-sdk client: lists and reads; admin meta-tools are refused.
	cl := mcp.NewClient(&mcp.Implementation{Name: "oauth-e2e", Version: "1"}, nil)
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: resource,
		HTTPClient: &http.Client{Transport: bearerRT{clientTok}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatalf("client token on /mcp: %v", err)
	}
	defer sess.Close()
	if _, err := sess.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_mcp_servers", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_mcp_servers with the client token: %v %+v", err, res)
	}
	res, err = sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "remove_mcp_server", Arguments: map[string]any{"server": "oauth-x"}})
	if err != nil || !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "FORBIDDEN") {
		t.Fatalf("remove_mcp_server with the client token: %v %+v", err, res)
	}

	// A profile bound to the subject scopes that subject, as it would a static token of that name.
	_, urlA := toolBackend(t, "alpha")
	_, urlB := toolBackend(t, "beta")
	for name, u := range map[string]string{"a": urlA, "b": urlB} {
		if code, body := d.doAs(adminTok, "POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": u}, "auto_connect": true}); code != http.StatusCreated {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
	}
	if code, body := d.doAs(adminTok, "PUT", "/profiles/only-a", map[string]any{"selectors": []any{map[string]any{"server": "a"}},
		"clients": []string{"client-bot"}}); code != http.StatusCreated {
		t.Fatalf("profile: %d %v", code, body)
	}
	bound, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: resource,
		HTTPClient: &http.Client{Transport: bearerRT{clientTok}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Close()
	deadline := time.Now().Add(20 * time.Second)
	for got := backendTools(t, bound); !slices.Equal(got, []string{"a__alpha"}); got = backendTools(t, bound) {
		if time.Now().After(deadline) {
			t.Fatalf("the subject bound to only-a lists %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := oauthDo(t, "POST", d.mcp+"/mcp/servers/b", clientTok, `{}`); a.status != http.StatusForbidden {
		t.Fatalf("the bound subject on /mcp/servers/b: %d %s", a.status, a.body)
	}
}

// TestOAuthIssuerUnreachableAtStart: an issuer that does not answer stops the start with a message naming it.
func TestOAuthIssuerUnreachableAtStart(t *testing.T) {
	d := newDaemon(t, "")
	issuer := fmt.Sprintf("http://127.0.0.1:%d", peertest.FreePort(t)) // nothing listens there
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+issuer)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the daemon did not stop")
	}
	if err == nil || !strings.Contains(string(out), "MCP_AGGREGATOR_OIDC_ISSUER") || !strings.Contains(string(out), issuer) ||
		!strings.Contains(string(out), "unreachable") {
		t.Fatalf("exit %v, output:\n%s", err, out)
	}
}

// TestOAuthTSClientE2E: a real MCP client completes the MCP authorization flow against the daemon and a real
// provider: the TypeScript SDK's OAuth support (challenge -> protected-resource metadata -> authorization server
// discovery -> dynamic client registration -> authorization code with PKCE and the resource indicator -> token),
// then lists and calls over /mcp with the user's token; the audit log names the user.
func TestOAuthTSClientE2E(t *testing.T) {
	d := newDaemon(t, "")
	resource := d.mcp + "/mcp"
	idp := startOIDCProvider(t, resource)
	d.env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+idp.issuer)
	d.start()
	script := filepath.Join(peertest.RepoRoot(t), "testdata", "peers", "oauth-client.mjs")
	peertest.TSClientScript(t) // skips (or fails under CI) when the SDK is not installed
	args := `{"name":"ts-oauth","transport_type":"HTTP","auto_connect":false,"connection_config":{"base_url":"http://127.0.0.1:1/mcp"}}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, peertest.PeersNode(t), script, resource, "add_mcp_server", args).CombinedOutput()
	var res struct {
		Tools    []string `json:"tools"`
		Text     string   `json:"text"`
		IsError  bool     `json:"isError"`
		Scope    string   `json:"scope"`
		ClientID string   `json:"client_id"`
		Error    string   `json:"error"`
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &res); jerr != nil || err != nil || res.Error != "" {
		t.Fatalf("oauth-client.mjs: %v %v\n%s\ndaemon:\n%s", err, jerr, out, d.logs)
	}
	if len(res.Tools) == 0 || res.IsError || res.ClientID == "" || !strings.Contains(res.Scope, "aggregator:admin") {
		t.Fatalf("flow result %+v", res)
	}
	a := oauthDo(t, "GET", d.base+"/servers", idp.token(t, "admin-bot", "aggregator:admin"), "")
	if a.status != 200 || !strings.Contains(a.body, `"name":"ts-oauth"`) {
		t.Fatalf("the server added over /mcp is not listed: %d %s", a.status, a.body)
	}
	a = oauthDo(t, "GET", d.base+"/audit", idp.token(t, "admin-bot", "aggregator:admin"), "")
	if a.status != 200 || !strings.Contains(a.body, `"actor":"alice (alice@example.com)"`) {
		t.Fatalf("audit does not name the user: %d %s", a.status, a.body)
	}
}

// TestOAuthProfileBindingsE2E: profiles bound to an OAuth subject and to a value of a groups claim, with tokens
// from a real provider (oidc-provider; group-bot's tokens carry groups ["eng","staff"], client-bot's none). Each
// caller sees only its profiles on /mcp, /mcp/profiles/{name}, /mcp/servers/{name} and REST; a malformed binding
// is a 422 in the shared error shape; a profile that binds a claim cannot be deleted while it does.
func TestOAuthProfileBindingsE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	resource := d.mcp + "/mcp"
	idp := startOIDCProvider(t, resource)
	d.env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+idp.issuer)
	d.start()
	adminTok := idp.token(t, "admin-bot", "aggregator:admin aggregator:client")
	groupTok := idp.token(t, "group-bot", "aggregator:client")
	subjTok := idp.token(t, "client-bot", "aggregator:client")

	_, urlA := toolBackend(t, "alpha")
	_, urlB := toolBackend(t, "beta")
	for name, u := range map[string]string{"a": urlA, "b": urlB} {
		if code, body := d.doAs(adminTok, "POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": u}, "auto_connect": true}); code != http.StatusCreated {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
	}
	// Bad bindings: 422 VALIDATION_ERROR naming the field.
	for _, bad := range []any{
		[]any{map[string]any{"claim": "groups"}},
		[]any{map[string]any{"subject": "x", "claim": "groups", "value": "eng"}},
		[]any{"client-bot"},
		map[string]any{"subject": "x"},
	} {
		code, body := d.doAs(adminTok, "PUT", "/profiles/eng", map[string]any{"selectors": []any{map[string]any{"server": "a"}},
			"bindings": bad})
		if code != http.StatusUnprocessableEntity || body["error_code"] != "VALIDATION_ERROR" || !strings.Contains(fmt.Sprint(body), "bindings") {
			t.Fatalf("binding %v: %d %v", bad, code, body)
		}
	}
	for name, p := range map[string]map[string]any{
		"eng":  {"selectors": []any{map[string]any{"server": "a"}}, "bindings": []any{map[string]any{"claim": "groups", "value": "eng"}}},
		"subj": {"selectors": []any{map[string]any{"server": "b"}}, "bindings": []any{map[string]any{"subject": "client-bot"}}},
	} {
		code, body := d.doAs(adminTok, "PUT", "/profiles/"+name, p)
		if code != http.StatusCreated {
			t.Fatalf("profile %s: %d %v", name, code, body)
		}
		if bs, _ := body["bindings"].([]any); len(bs) != 1 {
			t.Fatalf("profile %s answers bindings %v", name, body["bindings"])
		}
	}

	connect := func(tok string) *mcp.ClientSession {
		cl := mcp.NewClient(&mcp.Implementation{Name: "bindings-e2e", Version: "1"}, nil)
		s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: resource,
			HTTPClient: &http.Client{Transport: bearerRT{tok}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, c := range []struct {
		name, tok string
		want      []string
	}{
		{"groups claim eng", groupTok, []string{"a__alpha"}},
		{"subject client-bot", subjTok, []string{"b__beta"}},
		{"admin unbound", adminTok, []string{"a__alpha", "b__beta"}},
	} {
		s := connect(c.tok)
		deadline := time.Now().Add(20 * time.Second)
		for got := backendTools(t, s); !slices.Equal(got, c.want); got = backendTools(t, s) {
			if time.Now().After(deadline) {
				t.Fatalf("%s lists %v on /mcp, want %v", c.name, got, c.want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		name, method, url, tok, body string
		want                         int
	}{
		{"group on its profile", "POST", d.mcp + "/mcp/profiles/eng", groupTok, `{}`, 0},
		{"group on another profile", "POST", d.mcp + "/mcp/profiles/subj", groupTok, `{}`, http.StatusForbidden},
		{"group on a server outside", "POST", d.mcp + "/mcp/servers/b", groupTok, `{}`, http.StatusForbidden},
		{"subject on a server outside", "POST", d.mcp + "/mcp/servers/a", subjTok, `{}`, http.StatusForbidden},
		{"subject on another profile", "POST", d.mcp + "/mcp/profiles/eng", subjTok, `{}`, http.StatusForbidden},
		{"group calls its tool over REST", "POST", strings.TrimSuffix(d.base, "/aggregator") + "/tools/call", groupTok, `{"name":"a.alpha","arguments":{}}`, http.StatusOK},
		{"group calls a tool outside over REST", "POST", strings.TrimSuffix(d.base, "/aggregator") + "/tools/call", groupTok, `{"name":"b.beta","arguments":{}}`, http.StatusNotFound},
		{"subject calls a tool outside over REST", "POST", strings.TrimSuffix(d.base, "/aggregator") + "/tools/call", subjTok, `{"name":"a.alpha","arguments":{}}`, http.StatusNotFound},
	} {
		a := oauthDo(t, c.method, c.url, c.tok, c.body)
		if c.want == 0 {
			if a.status == http.StatusForbidden || a.status == http.StatusUnauthorized || a.status == http.StatusNotFound {
				t.Fatalf("%s: %d %s", c.name, a.status, a.body)
			}
			continue
		}
		if a.status != c.want || (c.want >= 400 && !strings.Contains(a.body, `"error_code"`)) {
			t.Fatalf("%s: %d, want %d: %s", c.name, a.status, c.want, a.body)
		}
	}
	// A profile still binding a claim is not deleted (its callers would see everything).
	if code, body := d.doAs(adminTok, "DELETE", "/profiles/eng", nil); code != http.StatusConflict {
		t.Fatalf("delete a bound profile: %d %v", code, body)
	}
}
