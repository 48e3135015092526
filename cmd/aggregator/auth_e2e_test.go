package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
)

const (
	e2eAdminToken  = "admin-secret-token-e2e1"
	e2eClientToken = "client-secret-token-e2e1"
)

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func status(t *testing.T, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDaemonWithTokens: the real binary with tokens guards REST and MCP; /health stays open; the start log says
// auth is on. Without tokens it says auth is off and loopback only.
func TestDaemonWithTokens(t *testing.T) {
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+e2eAdminToken, "MCP_AGGREGATOR_CLIENT_TOKENS=ci:"+e2eClientToken)
	d.start()
	if !strings.Contains(d.logs.String(), "bearer-token auth on") {
		t.Fatalf("start log does not say auth is on:\n%s", d.logs)
	}
	for _, c := range []struct {
		method, url, token string
		want               int
	}{
		{"GET", d.base + "/health", "", 200},
		{"GET", d.base + "/servers", "", 401},
		{"GET", d.base + "/servers", "wrong-token-0123456789", 401},
		{"GET", d.base + "/servers", e2eClientToken, 200},
		{"POST", d.base + "/servers", e2eClientToken, 403},
		{"POST", d.base + "/servers", e2eAdminToken, 422},
		{"GET", d.base + "/audit", e2eClientToken, 403},
		{"GET", d.base + "/audit", e2eAdminToken, 200},
		{"POST", d.mcp + "/mcp", "", 401},
		{"GET", d.mcp + "/sse", "wrong-token-0123456789", 401},
		{"POST", d.mcp + "/mcp/servers/x", "", 401},
	} {
		if got := status(t, c.method, c.url, c.token); got != c.want {
			t.Errorf("%s %s with %q: %d, want %d", c.method, c.url, c.token, got, c.want)
		}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	sess, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{e2eClientToken}}}, &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		t.Fatalf("client token on /mcp: %v", err)
	}
	defer sess.Close()
	res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "add_mcp_server", Arguments: map[string]any{
		"name": "x", "transport_type": "HTTP", "connection_config": map[string]any{"base_url": "http://127.0.0.1:1/mcp"}}})
	if err != nil || !res.IsError {
		t.Fatalf("client calling add_mcp_server: %v %+v", err, res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "FORBIDDEN") {
		t.Fatalf("want FORBIDDEN: %+v", res.Content)
	}

	off := newDaemon(t, "")
	off.start()
	if !strings.Contains(off.logs.String(), "auth is off") || !strings.Contains(off.logs.String(), "loopback only") {
		t.Fatalf("start log without tokens:\n%s", off.logs)
	}
}
