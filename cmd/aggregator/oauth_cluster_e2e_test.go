package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/oauthtest"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// TestBackendOAuthClusterE2E: a caller's OAuth flow to a protected backend spans two daemons of a cluster sharing
// PostgreSQL. The flow starts on node 1; the authorization server's redirect lands on node 2 (as a load balancer
// may send it), which also completes it; the caller's calls then run with their own identity at the backend
// through either node. The redirect is taken once across the cluster.
func TestBackendOAuthClusterE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i])}
	})
	ln, resource := oauthtest.Listen(t)
	issuer := oauthtest.StartAS(t, resource, "http://127.0.0.1:9"+backendauth.CallbackPath)
	oauthtest.Backend(t, ln, resource, issuer)

	code, body := nodes[0].do("POST", "/servers", map[string]any{"name": "ob", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": resource, "headers": map[string]any{"Authorization": "Bearer svc-token"}},
		"credential_mode":   "per_user", "user_credential": map[string]any{"oauth": map[string]any{}}})
	if code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, body)
	}
	id, _ := body["id"].(string)
	for _, n := range nodes {
		waitFor(t, 30*time.Second, "ob.whoami asking for a credential through "+n.name, func() bool {
			code, out := n.call("ob.whoami", map[string]any{}, 10*time.Second)
			return code == http.StatusForbidden && strings.Contains(out, "CREDENTIAL_REQUIRED")
		})
	}

	code, body = nodes[0].do("POST", "/servers/"+id+"/credentials/me/oauth", nil)
	authURL, _ := body["authorization_url"].(string)
	if code != http.StatusOK || authURL == "" {
		t.Fatalf("start on node 1: %d %v", code, body)
	}
	cb := oauthtest.Browse(t, authURL+"&login_hint=alice", nodes[0].rest+backendauth.CallbackPath)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	back := func(n *clusterNode) int {
		t.Helper()
		res, err := noFollow.Get(n.rest + backendauth.CallbackPath + "?" + cb.RawQuery)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := back(nodes[1]); code != http.StatusSeeOther {
		t.Fatalf("the callback on node 2: %d", code)
	}
	for _, n := range nodes {
		if code := back(n); code != http.StatusNotFound {
			t.Fatalf("the callback again on %s: %d, want 404", n.name, code)
		}
	}
	state := cb.Query().Get("state")
	if code, body := nodes[1].do("POST", "/oauth/complete", map[string]any{"state": state}); code != http.StatusCreated {
		t.Fatalf("completion on node 2: %d %v", code, body)
	}
	if code, _ := nodes[0].do("POST", "/oauth/complete", map[string]any{"state": state}); code != http.StatusNotFound {
		t.Fatalf("a second completion on node 1: %d, want 404", code)
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, "ob.whoami as alice through "+n.name, func() bool {
			code, out := n.call("ob.whoami", map[string]any{}, 10*time.Second)
			return code == http.StatusOK && strings.Contains(out, `user=alice`)
		})
	}
}
