package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// credBackend is an in-process go-sdk streamable HTTP MCP server with one echo tool, on a loopback port. When
// wantAuth is set, a request without that Authorization header is answered 401.
func credBackend(t *testing.T, wantAuth string) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "cred-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Params.Arguments)}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wantAuth != "" && r.Header.Get("Authorization") != wantAuth {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// envOf returns the last value of key in env.
func envOf(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// openInner opens the daemon's store directly (the daemon stopped), without decryption.
func openInner(t *testing.T, d *daemon) persistence.Store {
	t.Helper()
	var (
		s   persistence.Store
		err error
	)
	if u := envOf(d.env, "DATABASE_URL"); u != "" {
		s, err = postgres.Open(context.Background(), u)
	} else {
		s, err = sqlite.Open(context.Background(), filepath.Join(envOf(d.env, "MCP_AGGREGATOR_DATA_DIR"), "aggregator.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runBinary runs the aggregator with d's environment plus extra, and returns its exit code and output.
func runBinary(t *testing.T, d *daemon, timeout time.Duration, extra []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append([]string{}, d.env...), extra...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("aggregator %v did not finish within %v:\n%s", args, timeout, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestRotateKeyEndToEnd: servers registered under one key (with a caller's credential, a pending OAuth flow and a
// registered OAuth client) are re-encrypted by `aggregator rotate-key`, and the
// daemon started with the new key alone connects every one of them again, on both stores. A daemon started with
// the old key alone refuses to start, naming the key it needs.
func TestRotateKeyEndToEnd(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the stores' runs are independent: each its own daemon and database
			oldKey, newKey := crypt.EncodeKey(crypt.NewKey()), crypt.EncodeKey(crypt.NewKey())
			newBytes, _ := crypt.ParseKey(newKey)
			d := newDaemon(t, dbURL(t))
			d.env = append(d.env, "MCP_CREDENTIAL_KEY="+oldKey, "ROTATE_TOKEN=rotate-token-value")
			d.start()

			cmd, args := peertest.EverythingStdio(t)
			ids := map[string]string{}
			for _, reg := range []map[string]any{
				{"name": "everything", "transport_type": "STDIO",
					"connection_config": map[string]any{"command": cmd, "args": args, "env": map[string]string{"TOKEN": "${ROTATE_TOKEN}"}}},
				{"name": "http-backend", "transport_type": "HTTP",
					"connection_config": map[string]any{"base_url": credBackend(t, "Bearer rotate-token-value"),
						"headers": map[string]string{"Authorization": "Bearer ${ROTATE_TOKEN}"}}},
				{"name": "per-user", "transport_type": "STDIO", "connection_config": map[string]any{"command": cmd, "args": args},
					"credential_mode": "per_user", "user_credential": map[string]any{"env": "API_KEY"}},
			} {
				code, s := d.do("POST", "/servers", reg)
				if code != 201 {
					t.Fatalf("register: %d %v", code, s)
				}
				ids[reg["name"].(string)] = s["id"].(string)
			}
			for _, id := range ids {
				d.waitStatus(id, "CONNECTED", 30*time.Second)
			}
			// A caller's own credential (auth is off: the anonymous caller's) is sealed and rotated too.
			if code, s := d.do("PUT", "/servers/"+ids["per-user"]+"/credentials/me", map[string]any{"secret": "rotate-user-secret"}); code != 201 {
				t.Fatalf("put credential: %d %v", code, s)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)

			// Stored under the old key.
			inner := openInner(t, d)
			for _, id := range ids {
				v, err := inner.GetServer(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if kid, ok := crypt.SealedKeyID(v.ConnectionConfig); !ok || strings.Contains(string(v.ConnectionConfig), "ROTATE_TOKEN") {
					t.Fatalf("not sealed at rest: %s (%s)", v.ConnectionConfig, kid)
				}
			}
			if v, err := inner.GetUserSecret(context.Background(), ids["per-user"], "anonymous"); err != nil ||
				strings.Contains(string(v.Secret), "rotate-user-secret") {
				t.Fatalf("credential not sealed at rest: %s (%v)", v.Secret, err)
			}
			// A pending OAuth flow and a registered OAuth client, sealed under the old key as the daemon seals them.
			oldBytes, _ := crypt.ParseKey(oldKey)
			oldRing, err := crypt.NewKeyring(oldBytes, nil)
			if err != nil {
				t.Fatal(err)
			}
			sealedOld, now := crypt.Wrap(inner, oldRing), time.Now()
			if err := sealedOld.CreateOAuthFlow(context.Background(), persistence.OAuthFlow{State: "rotate-state", ServerID: ids["per-user"],
				Subject: "anonymous", Data: []byte(`{"verifier":"v"}`), ExpiresAt: now.Add(time.Hour)}, 0, 0, now); err != nil {
				t.Fatal(err)
			}
			if err := sealedOld.PutOAuthClient(context.Background(), persistence.OAuthClient{ServerID: ids["per-user"],
				Issuer: "https://as.example", Data: []byte(`{"client_id":"c"}`)}); err != nil {
				t.Fatal(err)
			}
			inner.Close()

			code, out := runBinary(t, d, time.Minute, []string{"MCP_CREDENTIAL_KEY=" + newKey, "MCP_CREDENTIAL_KEY_PREVIOUS=" + oldKey}, "rotate-key")
			if code != 0 || !strings.Contains(out, "re-encrypted 3 of 3") || !strings.Contains(out, "re-encrypted 1 callers' credentials") ||
				!strings.Contains(out, "re-encrypted 1 pending OAuth flows and 1 registered OAuth clients") {
				t.Fatalf("rotate-key: exit %d\n%s", code, out)
			}
			code, out = runBinary(t, d, time.Minute, []string{"MCP_CREDENTIAL_KEY=" + newKey, "MCP_CREDENTIAL_KEY_PREVIOUS=" + oldKey}, "rotate-key")
			if code != 0 || !strings.Contains(out, "re-encrypted 0 of 3") || !strings.Contains(out, "re-encrypted 0 callers' credentials") ||
				!strings.Contains(out, "re-encrypted 0 pending OAuth flows and 0 registered OAuth clients") {
				t.Fatalf("second rotate-key: exit %d\n%s", code, out)
			}
			inner = openInner(t, d)
			for _, id := range ids {
				v, _ := inner.GetServer(context.Background(), id)
				if kid, _ := crypt.SealedKeyID(v.ConnectionConfig); kid != crypt.KeyID(newBytes) {
					t.Fatalf("server %s under key %s after rotation, want %s", id, kid, crypt.KeyID(newBytes))
				}
			}
			if v, err := inner.GetUserSecret(context.Background(), ids["per-user"], "anonymous"); err != nil {
				t.Fatal(err)
			} else if kid, _ := crypt.SealedKeyID(v.Secret); kid != crypt.KeyID(newBytes) {
				t.Fatalf("credential under key %s after rotation, want %s", kid, crypt.KeyID(newBytes))
			}
			if c, err := inner.GetOAuthClient(context.Background(), ids["per-user"], "https://as.example"); err != nil {
				t.Fatal(err)
			} else if kid, _ := crypt.SealedKeyID(c.Data); kid != crypt.KeyID(newBytes) {
				t.Fatalf("OAuth client under key %s after rotation, want %s", kid, crypt.KeyID(newBytes))
			}
			inner.Close()

			// The old key alone no longer opens the store: a clear refusal naming the key.
			code, out = runBinary(t, d, time.Minute, []string{"MCP_CREDENTIAL_KEY=" + oldKey}, "serve")
			if code == 0 || !strings.Contains(out, crypt.KeyID(newBytes)) || !strings.Contains(out, "unknown credential key") {
				t.Fatalf("serve with the old key: exit %d\n%s", code, out)
			}

			d.env = append(d.env, "MCP_CREDENTIAL_KEY="+newKey, "MCP_CREDENTIAL_KEY_PREVIOUS=")
			d.start()
			for _, id := range ids {
				d.waitStatus(id, "CONNECTED", 30*time.Second)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}

// TestSecretsNeverLeak plants one unique secret in servers' headers (Authorization: Bearer, X-API-Key), env values
// and URL passwords and query parameters, drives the daemon (register, get, list, patch, connect failures that echo
// URLs and stderr, the MCP meta-tools), and scans every response body, the daemon's whole log, /metrics and the
// embedded database's files: the secret never appears.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	secret := fmt.Sprintf("canary-%d-secret", time.Now().UnixNano())
	// health_check_url is its own column, not encrypted at rest (only connection_config is): its password is a
	// second secret, checked in responses and logs but not in the database files.
	healthSecret := fmt.Sprintf("hcanary-%d", time.Now().UnixNano())
	d := newDaemon(t, "")
	d.env = append(d.env, "SCAN_SECRET="+secret, "MCP_AGGREGATOR_HEALTH_INTERVAL=0.5")
	d.start()

	var bodies []string
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		url := path
		if !strings.HasPrefix(path, "http") {
			url = d.base + path
		}
		req, _ := http.NewRequest(method, url, r)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, fmt.Sprintf("%s %s -> %d %s", method, path, resp.StatusCode, raw))
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}

	good := credBackend(t, "Bearer "+secret)
	goodURL := strings.Replace(good, "http://", "http://monitor:"+secret+"@", 1)
	healthURL := strings.Replace(good, "http://", "http://monitor:"+healthSecret+"@", 1) + "?token=" + healthSecret
	closed := peertest.FreePort(t)
	cmd, args := peertest.EverythingStdio(t)
	regs := []struct {
		body map[string]any
		want string // the status it settles in
	}{
		{map[string]any{"name": "good-http", "transport_type": "HTTP", "health_check_url": healthURL,
			"connection_config": map[string]any{"base_url": goodURL + "?api_key=" + secret,
				"headers": map[string]string{"Authorization": "Bearer " + secret, "X-API-Key": secret, "X-Ref": "${SCAN_SECRET}"}}}, "CONNECTED"},
		{map[string]any{"name": "refused-sse", "transport_type": "SSE",
			"connection_config": map[string]any{"url": fmt.Sprintf("http://user:%s@127.0.0.1:%d/sse?token=%s", secret, closed, secret),
				"headers": map[string]string{"Authorization": "Bearer " + secret}}}, "ERROR"},
		{map[string]any{"name": "wrong-auth", "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": good, "headers": map[string]string{"Authorization": "Bearer not-the-" + secret}}}, "ERROR"},
		{map[string]any{"name": "leaky-child", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": "sh", "args": []string{"-c", `echo "env $LEAKY $REF" >&2; exit 3`},
				"env": map[string]string{"LEAKY": secret, "REF": "${SCAN_SECRET}"}}}, "ERROR"},
		{map[string]any{"name": "everything", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": cmd, "args": append(args, "--api-key="+secret),
				"env": map[string]string{"API_TOKEN": secret}}}, "CONNECTED"},
	}
	ids := map[string]string{}
	for _, r := range regs {
		code, s := call("POST", "/servers", r.body)
		if code != 201 {
			t.Fatalf("register %s: %d %v", r.body["name"], code, s)
		}
		ids[r.body["name"].(string)] = s["id"].(string)
	}
	// A plain-http URL to a remote host is refused, and the refusal does not echo it.
	if code, _ := call("POST", "/servers", map[string]any{"name": "remote-plain", "transport_type": "SSE",
		"connection_config": map[string]any{"url": "http://u:" + secret + "@mcp.example.com/sse"}}); code != 422 {
		t.Fatalf("plain http to a remote host: %d, want 422", code)
	}
	for _, r := range regs {
		d.waitStatus(ids[r.body["name"].(string)], r.want, 30*time.Second)
	}
	time.Sleep(1500 * time.Millisecond) // a few health checks (with the password in health_check_url) and retries

	for name, id := range ids {
		_, detail := call("GET", "/servers/"+id, nil)
		if name == "good-http" {
			cfg, _ := json.Marshal(detail["connection_config"])
			if !strings.Contains(string(cfg), `"Authorization":"Bearer ***"`) || !strings.Contains(string(cfg), `"X-Ref":"${SCAN_SECRET}"`) {
				t.Errorf("masked config: %s", cfg)
			}
		}
		if name == "leaky-child" && !strings.Contains(fmt.Sprint(detail["error_message"]), "env ***") {
			t.Errorf("error_message of the leaky child: %v", detail["error_message"])
		}
		call("GET", "/servers/"+id+"/history", nil)
		call("GET", "/servers/"+id+"/tools", nil)
		call("POST", "/servers/"+id+"/connect", nil)
	}
	call("PATCH", "/servers/"+ids["good-http"], map[string]any{"description": "patched"})
	call("POST", "/servers/"+ids["wrong-auth"]+"/disconnect", map[string]any{"force": true})
	call("GET", "/servers", nil)
	call("GET", "/servers?include_tools=true", nil)
	call("GET", "/state", nil)
	call("GET", "/health", nil)
	call("GET", "/audit", nil)
	// Export (both formats), one tool in detail, and imports whose entries carry the secret (valid, invalid, and
	// one whose name exists).
	call("GET", "/export", nil)
	call("GET", "/export?format=vscode", nil)
	call("GET", "/servers/"+ids["everything"]+"/tools/echo", nil)
	for _, dry := range []string{"?dry_run=true", ""} {
		call("POST", "/import"+dry, map[string]any{"mcpServers": map[string]any{
			"Imported Secret": map[string]any{"url": "https://127.0.0.1:1/mcp?api_key=" + secret, "headers": map[string]string{"Authorization": "Bearer " + secret}},
			"bad-secret":      map[string]any{"type": "ws", "url": "wss://u:" + secret + "@h/x", "env": map[string]string{"K": secret}},
			"bad-url":         map[string]any{"url": "ftp://u:" + secret + "@h/x"},
			"everything":      map[string]any{"command": "x", "env": map[string]string{"K": secret}},
		}})
	}
	call("GET", "/export", nil)
	call("POST", strings.TrimSuffix(d.base, "/aggregator")+"/tools/call",
		map[string]any{"name": "good-http.echo", "arguments": map[string]any{"x": 1}})
	// A call to a server in ERROR answers with its (scrubbed) state.
	call("POST", strings.TrimSuffix(d.base, "/aggregator")+"/tools/call",
		map[string]any{"name": "echo", "server_id": ids["refused-sse"], "arguments": map[string]any{}})

	// The MCP meta-tools.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "secret-scan", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	mcpCall := func(tool string, args map[string]any) {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("MCP %s: %v", tool, err)
		}
		b, _ := json.Marshal(res)
		bodies = append(bodies, "MCP "+tool+" -> "+string(b))
	}
	for name := range ids {
		mcpCall("get_server_status", map[string]any{"server_id": name})
	}
	mcpCall("list_mcp_servers", map[string]any{})
	mcpCall("add_mcp_server", map[string]any{"name": "added-over-mcp", "transport_type": "HTTP", "auto_connect": false,
		"connection_config": map[string]any{"base_url": good, "headers": map[string]string{"Authorization": "Bearer " + secret}}})
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tools)
	bodies = append(bodies, "MCP tools/list -> "+string(b))
	_ = sess.Close()

	metricsSeen := false
	for _, u := range []string{strings.TrimSuffix(d.base, "/api/v1/aggregator") + "/metrics", d.mcp + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			metricsSeen = true
			bodies = append(bodies, "GET "+u+" -> "+string(raw))
		}
	}
	if !metricsSeen {
		t.Log("no /metrics route answered: metrics not scanned")
	}

	d.signal(syscall.SIGTERM, 15*time.Second)
	for _, sec := range []string{secret, healthSecret} {
		for _, b := range bodies {
			if strings.Contains(b, sec) {
				t.Errorf("a response shows the secret %s:\n%s", sec, b)
			}
		}
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(line, sec) {
				t.Errorf("a log line shows the secret %s: %s", sec, line)
			}
		}
	}
	// At rest: the embedded database's files (the WAL included) never hold it in plain.
	files, _ := filepath.Glob(filepath.Join(envOf(d.env, "MCP_AGGREGATOR_DATA_DIR"), "aggregator.db*"))
	if len(files) == 0 {
		t.Fatal("no database files found")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("%s holds the secret in plain", f)
		}
	}
	t.Logf("scanned %d responses and %d bytes of logs", len(bodies), len(d.logs.String()))
}
