package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// TestConsoleSignsInThroughTheProvider: with an issuer and a console client configured, the console in a real
// Chromium signs in through a real OpenID provider (oidc-provider) with the authorization code flow and PKCE, and
// then works as the user the provider vouched for (alice, admin scope); a forged callback is refused.
func TestConsoleSignsInThroughTheProvider(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	browser := peertest.Chromium(t)
	script := filepath.Join(filepath.Dir(peertest.ConsoleScript(t)), "console-oidc.mjs")
	d := newDaemon(t, "")
	idp := startOIDCProvider(t, d.mcp+"/mcp")
	origin := strings.TrimSuffix(d.base, "/api/v1/aggregator")
	clientID := registerConsoleClient(t, idp.issuer, origin+"/ui/")
	d.env = append(d.env, "MCP_AGGREGATOR_OIDC_ISSUER="+idp.issuer, "MCP_AGGREGATOR_OIDC_CONSOLE_CLIENT_ID="+clientID)
	d.start()

	shots, err := os.MkdirTemp("", "aggregator-console-oidc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", shots)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, peertest.Node(t), script)
	cmd.Env = append(os.Environ(), "BASE_URL="+origin, "ISSUER="+idp.issuer, "CHROMIUM="+browser, "SHOTS="+shots)
	out, err := cmd.CombinedOutput()
	t.Logf("console script:\n%s", out)
	if err != nil {
		t.Fatalf("the console script failed (%v); screenshots in %s; daemon logs:\n%s", err, shots, d.logs.String())
	}
	if !strings.Contains(string(out), "console oidc OK") {
		t.Fatal("the console script did not finish")
	}
}

// registerConsoleClient registers the console at the provider as a public client (RFC 7591: no secret, the
// authorization code grant, redirect_uri) and returns its client id.
func registerConsoleClient(t *testing.T, issuer, redirect string) string {
	t.Helper()
	var meta struct {
		Registration string `json:"registration_endpoint"`
	}
	resp, err := http.Get(issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil || meta.Registration == "" {
		t.Fatalf("discovery: %v %+v", err, meta)
	}
	body, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none",
		"grant_types": []string{"authorization_code"}, "response_types": []string{"code"}, "client_name": "aggregator console",
		"scope": "openid aggregator:admin aggregator:client"})
	resp, err = http.Post(meta.Registration, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var client struct {
		ID string `json:"client_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&client); err != nil || resp.StatusCode != http.StatusCreated || client.ID == "" {
		t.Fatalf("register the console: %d %v %+v", resp.StatusCode, err, client)
	}
	return client.ID
}
