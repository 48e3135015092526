package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
)

const (
	polAdmin = "admin-secret-token-pol01"
	polAlice = "alice-client-token-pol1"
	polCI    = "ci-client-token-pol0001"
)

// TestAccessPolicy: the real daemon with two client tokens and a policy stored through REST. The rule that denies
// ci the tool write_file refuses ci's calls (403 FORBIDDEN naming the rule on REST, a tool error on /mcp) and hides
// the tool from ci's tools/list and search, while alice calls and sees it; a rule on the arguments denies alice
// only some calls; an expression that does not compile is a 422 with its position; the change is audited.
func TestAccessPolicy(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+polAdmin, "MCP_AGGREGATOR_CLIENT_TOKENS=alice:"+polAlice+",ci:"+polCI)
	d.start()
	_, url := toolBackend(t, "read_file", "write_file")
	if code, body := d.doAs(polAdmin, "POST", "/servers", map[string]any{"name": "fs", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": url}, "auto_connect": true}); code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, body)
	}
	api := strings.TrimSuffix(d.base, "/aggregator")
	call := func(token, tool string, args map[string]any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"name": tool, "arguments": args})
		req, _ := http.NewRequest("POST", api+"/tools/call", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	// Wait until the tools are callable (no rule yet: both callers may).
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := call(polCI, "fs.write_file", nil)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write_file not callable before any rule: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if code, out := d.doAs(polAdmin, "PUT", "/policy", map[string]any{"rules": []any{
		map[string]any{"name": "x", "effect": "deny", "when": "subject == 'ci' &&\n  tool = 'write_file'"}}}); code != http.StatusUnprocessableEntity ||
		!strings.Contains(jsonString(out), "line 2, column") {
		t.Fatalf("PUT with a bad expression: %d %v", code, out)
	}
	if code, out := d.doAs(polCI, "PUT", "/policy", map[string]any{"rules": []any{}}); code != http.StatusForbidden {
		t.Fatalf("PUT as a client: %d %v", code, out)
	}
	policy := map[string]any{"default": "allow", "rules": []any{
		map[string]any{"name": "ci-no-writes", "effect": "deny", "when": "subject == 'ci' && tool == 'write_file'"},
		map[string]any{"name": "no-etc", "effect": "deny", "when": "'path' in args && args.path.startsWith('/etc/')"},
	}}
	if code, out := d.doAs(polAdmin, "PUT", "/policy", policy); code != http.StatusOK || out["version"] != float64(1) {
		t.Fatalf("PUT policy: %d %v", code, out)
	}

	// REST.
	if code, out := call(polCI, "fs.write_file", nil); code != http.StatusForbidden || out["error_code"] != "FORBIDDEN" ||
		!strings.Contains(jsonString(out), "ci-no-writes") {
		t.Fatalf("ci write_file: %d %v", code, out)
	}
	if code, out := call(polCI, "fs.read_file", nil); code != http.StatusOK {
		t.Fatalf("ci read_file: %d %v", code, out)
	}
	if code, out := call(polAlice, "fs.write_file", map[string]any{"path": "/tmp/x"}); code != http.StatusOK {
		t.Fatalf("alice write_file: %d %v", code, out)
	}
	if code, out := call(polAlice, "fs.write_file", map[string]any{"path": "/etc/passwd"}); code != http.StatusForbidden ||
		!strings.Contains(jsonString(out), "no-etc") || strings.Contains(jsonString(out), "/etc/passwd") {
		t.Fatalf("alice write_file /etc: %d %v", code, out)
	}

	// MCP: tools/list and tools/call.
	connectTo := func(path, token string) *mcp.ClientSession {
		cl := mcp.NewClient(&mcp.Implementation{Name: "policy-e2e", Version: "1"}, nil)
		s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcp + path,
			HTTPClient: &http.Client{Transport: bearerRT{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	connect := func(token string) *mcp.ClientSession { return connectTo("/mcp", token) }
	ci, alice := connect(polCI), connect(polAlice)
	if got := backendTools(t, ci); !slices.Equal(got, []string{"fs__read_file"}) {
		t.Fatalf("ci lists %v, want only fs__read_file", got)
	}
	if got := backendTools(t, alice); !slices.Equal(got, []string{"fs__read_file", "fs__write_file"}) {
		t.Fatalf("alice lists %v", got)
	}
	res, err := ci.CallTool(context.Background(), &mcp.CallToolParams{Name: "fs__write_file", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(jsonString(res.StructuredContent), "ci-no-writes") {
		t.Fatalf("ci calls write_file on /mcp: %v %+v", err, res)
	}
	if res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "fs__write_file", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("alice calls write_file on /mcp: %v %+v", err, res)
	}
	if res, err := ci.CallTool(context.Background(), &mcp.CallToolParams{Name: "fs.write_file", Arguments: map[string]any{}}); err != nil || !res.IsError {
		t.Fatalf("ci calls write_file by its canonical name: %v %+v", err, res)
	}

	// The per-server endpoint (the backend's own names) applies the same rules.
	ciFS := connectTo("/mcp/servers/fs", polCI)
	if got := backendTools(t, ciFS); !slices.Equal(got, []string{"read_file"}) {
		t.Fatalf("ci lists %v on /mcp/servers/fs, want only read_file", got)
	}
	if res, err := ciFS.CallTool(context.Background(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{}}); err == nil &&
		!res.IsError {
		t.Fatalf("ci calls write_file on /mcp/servers/fs: %+v", res)
	}
	if got := backendTools(t, connectTo("/mcp/servers/fs", polAlice)); !slices.Equal(got, []string{"read_file", "write_file"}) {
		t.Fatalf("alice lists %v on /mcp/servers/fs", got)
	}

	// Search: alice finds write_file, ci never does.
	search := func(token string) []string {
		t.Helper()
		req, _ := http.NewRequest("POST", api+"/search", strings.NewReader(`{"query":"tool write_file","strategy":"direct","limit":10}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		var names []string
		for _, tl := range out.Tools {
			names = append(names, tl.Name)
		}
		slices.Sort(names)
		return names
	}
	deadline = time.Now().Add(20 * time.Second)
	for !slices.Contains(search(polAlice), "fs.write_file") {
		if time.Now().After(deadline) {
			t.Fatalf("alice's search never found fs.write_file: %v", search(polAlice))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := search(polCI); slices.Contains(got, "fs.write_file") || !slices.Contains(got, "fs.read_file") {
		t.Fatalf("ci's search answers %v, want fs.read_file without fs.write_file", got)
	}

	// The admin meta-tool shows and replaces the same document.
	admin := connect(polAdmin)
	res, err = admin.CallTool(context.Background(), &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: map[string]any{"action": "show_policy"}})
	if err != nil || res.IsError || !strings.Contains(jsonString(res.StructuredContent), "ci-no-writes") {
		t.Fatalf("show_policy: %v %+v", err, res)
	}
	res, err = admin.CallTool(context.Background(), &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: map[string]any{"action": "put_policy",
		"settings": map[string]any{"rules": []any{map[string]any{"name": "x", "effect": "deny", "when": "nobody"}}}}})
	if err != nil || !res.IsError || !strings.Contains(jsonString(res.StructuredContent), "undeclared reference to 'nobody'") {
		t.Fatalf("put_policy with a bad expression: %v %+v", err, res)
	}
	if res, err := ci.CallTool(context.Background(), &mcp.CallToolParams{Name: "manage_tool_curation", Arguments: map[string]any{"action": "show_policy"}}); err != nil || !res.IsError {
		t.Fatalf("show_policy as a client: %v %+v", err, res)
	}

	// The change is audited.
	if code, out := d.doAs(polAdmin, "GET", "/audit", nil); code != http.StatusOK || !strings.Contains(jsonString(out), "policy.updated") {
		t.Fatalf("audit: %d %v", code, out)
	}
	// Removing the rules restores today's behaviour.
	if code, out := d.doAs(polAdmin, "PUT", "/policy", map[string]any{"rules": []any{}}); code != http.StatusOK {
		t.Fatalf("PUT empty policy: %d %v", code, out)
	}
	if code, out := call(polCI, "fs.write_file", nil); code != http.StatusOK {
		t.Fatalf("ci write_file without rules: %d %v", code, out)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestAccessPolicyOAuth: rules read an OAuth caller's subject and its token's claims. Tokens of a real OpenID
// provider (oidc-provider, client credentials: the subject is the client): client-bot is denied write_file by a
// rule on its subject and a claim, admin-bot (another subject) calls it; the denied tool is not listed for
// client-bot on /mcp.
func TestAccessPolicyOAuth(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	idp := startOIDCProvider(t, d.mcp+"/mcp")
	d.env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+idp.issuer, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+polAdmin)
	d.start()
	_, url := toolBackend(t, "read_file", "write_file")
	if code, body := d.doAs(polAdmin, "POST", "/servers", map[string]any{"name": "fs", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": url}, "auto_connect": true}); code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, body)
	}
	if code, out := d.doAs(polAdmin, "PUT", "/policy", map[string]any{"rules": []any{
		map[string]any{"name": "bot-no-writes", "effect": "deny",
			"when": "subject == 'client-bot' && claims.?iss.orValue('') == '" + idp.issuer + "' && tool == 'write_file'"},
	}}); code != http.StatusOK {
		t.Fatalf("PUT policy: %d %v", code, out)
	}
	api := strings.TrimSuffix(d.base, "/aggregator")
	bot := idp.token(t, "client-bot", "aggregator:client")
	other := idp.token(t, "admin-bot", "aggregator:admin aggregator:client")
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := oauthDo(t, "POST", api+"/tools/call", other, `{"name":"fs.write_file","arguments":{}}`)
		if a.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin-bot calls write_file: %d %s", a.status, a.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := oauthDo(t, "POST", api+"/tools/call", bot, `{"name":"fs.write_file","arguments":{}}`); a.status != http.StatusForbidden ||
		!strings.Contains(a.body, "bot-no-writes") {
		t.Fatalf("client-bot calls write_file: %d %s", a.status, a.body)
	}
	if a := oauthDo(t, "POST", api+"/tools/call", bot, `{"name":"fs.read_file","arguments":{}}`); a.status != http.StatusOK {
		t.Fatalf("client-bot calls read_file: %d %s", a.status, a.body)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "policy-oauth-e2e", Version: "1"}, nil)
	s, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{bot}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := backendTools(t, s); !slices.Equal(got, []string{"fs__read_file"}) {
		t.Fatalf("client-bot lists %v, want only fs__read_file", got)
	}
}
