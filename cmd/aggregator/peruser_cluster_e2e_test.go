package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

const (
	pucAdmin = "puc-admin-token-0000000001"
	pucAlice = "puc-alice-token-0000000001"
	pucBob   = "puc-bob-token-00000000000001"
	pucCarol = "puc-carol-token-0000000001"
)

// TestPerUserClusterE2E: per_user servers called through the node that does not own them (issue 28). The call is
// forwarded to the owner with the caller's identity; the owner (and only the owner) opens each caller's own
// session with that caller's credential, so two callers with different credentials see their own identities, a
// credential replaced through the non-owner ends the caller's session on the owner, and a caller without a
// credential is answered 403 CREDENTIAL_REQUIRED with credential_url through the non-owner too. Both kinds of
// caller credential: a typed secret injected as a header, and an OAuth grant to a protected backend.
func TestPerUserClusterE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i]),
			"MCP_AGGREGATOR_ADMIN_TOKENS=ops:" + pucAdmin,
			"MCP_AGGREGATOR_CLIENT_TOKENS=alice:" + pucAlice + ",bob:" + pucBob + ",carol:" + pucCarol}
	})

	// A backend that answers with the X-Api-Key its request carried: the caller's own secret, on a caller's session.
	keyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "keyed", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key := ""
			if r.Extra != nil && r.Extra.Header != nil {
				key = r.Extra.Header.Get("X-Api-Key")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "key=" + key}}}, nil
		})
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go func() { _ = hs.Serve(keyLn) }()
	t.Cleanup(func() { _ = hs.Close() })

	// An OAuth protected backend and its authorization server (oidc-provider).
	oLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + oLn.Addr().String() + "/mcp"
	issuer := oauthtest.StartAS(t, resource, "http://127.0.0.1:9"+backendauth.CallbackPath)
	oauthtest.Backend(t, oLn, resource, issuer)

	register := func(body map[string]any) string {
		t.Helper()
		code, out := nodes[0].doAs(pucAdmin, "POST", "/servers", body)
		if code != http.StatusCreated {
			t.Fatalf("register %v: %d %v", body["name"], code, out)
		}
		id, _ := out["id"].(string)
		return id
	}
	keyedID := register(map[string]any{"name": "keyed", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": "http://" + keyLn.Addr().String() + "/mcp"},
		"credential_mode":   "per_user", "user_credential": map[string]any{"header": "X-Api-Key"}})
	oauthID := register(map[string]any{"name": "ob", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": resource, "headers": map[string]any{"Authorization": "Bearer svc-token"}},
		"credential_mode":   "per_user", "user_credential": map[string]any{"oauth": map[string]any{}}})

	// The owner of each server holds its own session; the other node is the one every caller goes through.
	via := map[string]*clusterNode{}
	owner := map[string]*clusterNode{}
	waitFor(t, 30*time.Second, "both servers owned", func() bool {
		for _, n := range nodes {
			s, _ := n.backendSessions(t)
			for _, name := range []string{"keyed", "ob"} {
				if s[name] {
					owner[name] = n
				}
			}
		}
		return owner["keyed"] != nil && owner["ob"] != nil
	})
	for name, o := range owner {
		via[name] = nodes[0]
		if o == nodes[0] {
			via[name] = nodes[1]
		}
		t.Logf("%s is owned by %s, called through %s", name, o.name, via[name].name)
	}

	// No credential yet: CREDENTIAL_REQUIRED through the non-owner, naming where to store it.
	wantRequired := func(server, id, token, wantURL, wantMethod string) {
		t.Helper()
		waitFor(t, 30*time.Second, server+" asking "+token[:9]+" for a credential through "+via[server].name, func() bool {
			code, out := callAs(via[server], token, server+".whoami")
			if code != http.StatusForbidden {
				return false
			}
			var m struct {
				ErrorCode string         `json:"error_code"`
				Context   map[string]any `json:"context"`
			}
			if err := json.Unmarshal([]byte(out), &m); err != nil || m.ErrorCode != "CREDENTIAL_REQUIRED" {
				t.Fatalf("403 without CREDENTIAL_REQUIRED: %s", out)
			}
			if m.Context["credential_url"] != wantURL || m.Context["method"] != wantMethod {
				t.Fatalf("CREDENTIAL_REQUIRED context %v, want credential_url %s (%s)", m.Context, wantURL, wantMethod)
			}
			return true
		})
	}
	const api = "/api/v1/aggregator"
	wantRequired("keyed", keyedID, pucCarol, api+"/servers/"+keyedID+"/credentials/me", "PUT")
	wantRequired("ob", oauthID, pucCarol, api+"/servers/"+oauthID+"/credentials/me/oauth", "POST")

	// Typed secrets, stored through the non-owner: each caller's call carries their own.
	put := func(token, secret string, want int) {
		t.Helper()
		if code, out := via["keyed"].doAs(token, "PUT", "/servers/"+keyedID+"/credentials/me", map[string]any{"secret": secret}); code != want {
			t.Fatalf("PUT credential: %d %v, want %d", code, out, want)
		}
	}
	put(pucAlice, "alice-key-1", http.StatusCreated)
	put(pucBob, "bob-key-1", http.StatusCreated)
	wantAnswer := func(server, token, want string) {
		t.Helper()
		waitFor(t, 30*time.Second, server+".whoami answering "+want+" through "+via[server].name, func() bool {
			code, out := callAs(via[server], token, server+".whoami")
			if code == http.StatusOK && !strings.Contains(out, want) {
				t.Fatalf("%s.whoami answered another identity: %s, want %s", server, out, want)
			}
			return code == http.StatusOK
		})
	}
	for range 3 { // interleaved: each caller's session stays theirs
		wantAnswer("keyed", pucAlice, "key=alice-key-1")
		wantAnswer("keyed", pucBob, "key=bob-key-1")
	}
	wantRequired("keyed", keyedID, pucCarol, api+"/servers/"+keyedID+"/credentials/me", "PUT")
	// Replaced through the non-owner: the owner ends alice's session, her next call carries the new secret.
	put(pucAlice, "alice-key-2", http.StatusOK)
	code, out := callAs(via["keyed"], pucAlice, "keyed.whoami")
	if code != http.StatusOK || !strings.Contains(out, "key=alice-key-2") {
		t.Fatalf("after the replacement: %d %s, want key=alice-key-2", code, out)
	}
	wantAnswer("keyed", pucBob, "key=bob-key-1")
	// The same on /mcp of the non-owner: bob's own key; carol's tool error names where to store hers.
	for token, want := range map[string]string{pucBob: `key=bob-key-1`, pucCarol: `"error_code":"CREDENTIAL_REQUIRED"`} {
		cl := mcp.NewClient(&mcp.Implementation{Name: "puc", Version: "1"}, nil)
		sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: via["keyed"].mcp + "/mcp",
			HTTPClient: &http.Client{Transport: bearerRT{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "keyed__whoami", Arguments: map[string]any{}})
		sess.Close()
		if err != nil {
			t.Fatalf("/mcp call: %v", err)
		}
		b, _ := json.Marshal(res)
		if !strings.Contains(string(b), want) || res.IsError != (token == pucCarol) {
			t.Fatalf("/mcp keyed__whoami through %s: %s, want %s", via["keyed"].name, b, want)
		}
	}
	// Revoked by the admin through the non-owner: alice is asked again.
	if code, out := via["keyed"].doAs(pucAdmin, "DELETE", "/servers/"+keyedID+"/credentials/token%3Aalice", nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d %v", code, out)
	}
	wantRequired("keyed", keyedID, pucAlice, api+"/servers/"+keyedID+"/credentials/me", "PUT")

	// OAuth grants: alice and bob each authorize through the non-owner as a different backend user.
	authorize := func(token, user string) {
		t.Helper()
		n := via["ob"]
		code, body := n.doAs(token, "POST", "/servers/"+oauthID+"/credentials/me/oauth", nil)
		authURL, _ := body["authorization_url"].(string)
		if code != http.StatusOK || authURL == "" {
			t.Fatalf("start: %d %v", code, body)
		}
		cb := oauthtest.Browse(t, authURL+"&login_hint="+user, n.rest+backendauth.CallbackPath)
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noFollow.Get(n.rest + backendauth.CallbackPath + "?" + cb.RawQuery)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("callback: %d", res.StatusCode)
		}
		if code, body := n.doAs(token, "POST", "/oauth/complete", map[string]any{"state": cb.Query().Get("state")}); code != http.StatusCreated {
			t.Fatalf("complete: %d %v", code, body)
		}
	}
	authorize(pucAlice, "alice-at-backend")
	authorize(pucBob, "bob-at-backend")
	for range 3 {
		wantAnswer("ob", pucAlice, "user=alice-at-backend")
		wantAnswer("ob", pucBob, "user=bob-at-backend")
	}
	wantRequired("ob", oauthID, pucCarol, api+"/servers/"+oauthID+"/credentials/me/oauth", "POST")

	// Only the owners opened callers' sessions; the node the calls came through opened none.
	opened := func(n *clusterNode, id string) int {
		c := 0
		for _, line := range strings.Split(n.logs.String(), "\n") {
			if strings.Contains(line, "per-user session opening") && strings.Contains(line, "server_id="+id) {
				c++
			}
		}
		return c
	}
	for name, id := range map[string]string{"keyed": keyedID, "ob": oauthID} {
		if c := opened(owner[name], id); c < 2 {
			t.Errorf("%s (owner of %s) opened %d callers' sessions of it, want at least 2", owner[name].name, name, c)
		}
		if c := opened(via[name], id); c != 0 {
			t.Errorf("%s (not the owner of %s) opened %d callers' sessions of it", via[name].name, name, c)
		}
	}
}

// callAs runs a tool through a node's REST API with a bearer token.
func callAs(n *clusterNode, token, tool string) (int, string) {
	b, _ := json.Marshal(map[string]any{"name": tool, "arguments": map[string]any{}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", n.rest+"/api/v1/tools/call", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
