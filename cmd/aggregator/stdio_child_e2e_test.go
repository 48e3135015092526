package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// authDo is daemon.do with a bearer token; it returns the raw body too.
func (d *daemon) authDo(token, method, path string, body any) (int, map[string]any, string) {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	url := d.base + path
	if strings.HasPrefix(path, "/api/") {
		url = strings.TrimSuffix(d.base, "/api/v1/aggregator") + path
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

func (d *daemon) waitStatusToken(token, id, want string, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	var last map[string]any
	for time.Now().Before(deadline) {
		_, last, _ = d.authDo(token, "GET", "/servers/"+id, nil)
		if last["status"] == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("server %s not %s within %v: %v\nlogs:\n%s", id, want, within, last, d.logs)
}

// TestStdioChildEnvironment: a stdio backend sees a minimal environment plus its own env and the operator's
// passthrough list, never the daemon's settings: a client-token call of server-everything's get-env cannot read the
// admin token, the client tokens, the credential key or DATABASE_URL. A ${VAR} reference naming one of the daemon's
// settings is refused at registration and PATCH with a 422 naming it.
func TestStdioChildEnvironment(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	const credKey = "6b1e2f3a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"
	d := newDaemon(t, "")
	d.env = append(d.env,
		"MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+e2eAdminToken,
		"MCP_AGGREGATOR_CLIENT_TOKENS=ci:"+e2eClientToken,
		"MCP_CREDENTIAL_KEY="+credKey,
		"E2E_PASSED_VAR=passed-value-1234",
		"E2E_HIDDEN_VAR=hidden-value-5678",
		"MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH=E2E_PASSED_VAR",
	)
	d.start()
	node, args := peertest.EverythingStdio(t)
	code, s, raw := d.authDo(e2eAdminToken, "POST", "/servers", map[string]any{
		"name": "everything", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": node, "args": args, "env": map[string]string{"OWN_VAR": "own-value"}},
	})
	if code != 201 {
		t.Fatalf("register: %d %s", code, raw)
	}
	id := s["id"].(string)
	d.waitStatusToken(e2eClientToken, id, "CONNECTED", 30*time.Second)

	// Discovery runs after CONNECTED: wait for the tool.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, _, raw = d.authDo(e2eClientToken, "POST", "/api/v1/tools/call", map[string]any{"name": "everything.get-env", "arguments": map[string]any{}})
		if code != 404 || time.Now().After(deadline) {
			break
		}
	}
	if code != 200 {
		t.Fatalf("get-env: %d %s", code, raw)
	}
	for _, secret := range []string{e2eAdminToken, e2eClientToken, credKey, "MCP_CREDENTIAL_KEY", "DATABASE_URL", "hidden-value-5678"} {
		if strings.Contains(raw, secret) {
			t.Errorf("the stdio child's environment contains %q:\n%s", secret, raw)
		}
	}
	// The only MCP_AGGREGATOR_ variable is the process-group marker the daemon sets itself.
	var result struct {
		Content []struct{ Text string } `json:"content"`
	}
	var childEnv map[string]string
	if err := json.Unmarshal([]byte(raw), &result); err != nil || len(result.Content) != 1 ||
		json.Unmarshal([]byte(result.Content[0].Text), &childEnv) != nil {
		t.Fatalf("get-env answer: %v %s", err, raw)
	}
	for k := range childEnv {
		if strings.HasPrefix(k, "MCP_AGGREGATOR_") && k != "MCP_AGGREGATOR_PGROUP" {
			t.Errorf("the stdio child's environment has %s", k)
		}
	}
	for _, want := range []string{`\"OWN_VAR\": \"own-value\"`, `\"E2E_PASSED_VAR\": \"passed-value-1234\"`, `\"PATH\"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("the stdio child's environment lacks %s:\n%s", want, raw)
		}
	}
	// The admin token was not readable, so a client cannot become admin.
	if code, _, _ := d.authDo(e2eClientToken, "POST", "/servers/"+id+"/disconnect", nil); code != 403 {
		t.Errorf("client token on an admin route: %d", code)
	}

	for _, c := range []struct {
		method, path, variable string
		body                   map[string]any
	}{
		{"POST", "/servers", "MCP_CREDENTIAL_KEY", map[string]any{"name": "leak", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": node, "env": map[string]string{"LEAK": "${MCP_CREDENTIAL_KEY}"}}}},
		{"POST", "/servers", "MCP_AGGREGATOR_ADMIN_TOKENS", map[string]any{"name": "leak", "transport_type": "STDIO",
			"connection_config": map[string]any{"command": node, "args": []string{"--t=${MCP_AGGREGATOR_ADMIN_TOKENS}"}}}},
		{"POST", "/servers", "DATABASE_URL", map[string]any{"name": "leak", "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": "https://h.example/mcp", "headers": map[string]string{"X-Db": "${DATABASE_URL}"}}}},
		{"PATCH", "/servers/" + id, "MCP_CREDENTIAL_KEY_PREVIOUS", map[string]any{
			"connection_config": map[string]any{"command": node, "env": map[string]string{"LEAK": "${MCP_CREDENTIAL_KEY_PREVIOUS}"}}}},
	} {
		code, body, raw := d.authDo(e2eAdminToken, c.method, c.path, c.body)
		if code != 422 || body["error_code"] != "VALIDATION_ERROR" || !strings.Contains(raw, c.variable) {
			t.Errorf("%s %s referencing %s: %d %s", c.method, c.path, c.variable, code, raw)
		}
		if strings.Contains(raw, credKey) || strings.Contains(raw, e2eAdminToken) {
			t.Errorf("the answer holds a secret: %s", raw)
		}
	}
	d.signal(syscall.SIGTERM, 15*time.Second)
}

// procStart is a process's start time (field 22 of /proc/<pid>/stat), or "" when it is gone or a zombie.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// TestStdioGrandchildrenReaped: a stdio server that leaves a helper in its process group (bash -c "helper & exec
// server") leaves nothing behind: disconnect, SIGTERM and delete kill the whole group, and after kill -9 of the
// daemon the next start reaps the group the dead daemon recorded (the server then works again).
func TestStdioGrandchildrenReaped(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	dataDir := ""
	for _, e := range d.env {
		if v, ok := strings.CutPrefix(e, "MCP_AGGREGATOR_DATA_DIR="); ok {
			dataDir = v
		}
	}
	d.start()
	node, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("orphan-helper-%d", time.Now().UnixNano())
	code, s := d.do("POST", "/servers", map[string]any{
		"name": "wrapped", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": "bash",
			"args": []string{"-c", `exec -a "$0" sleep 1000 & exec "$1" "$2" stdio`, marker, node, args[0]}},
	})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	id := s["id"].(string)
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	helpers := func() []int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if p := peertest.ProcessesWithArg(marker); len(p) == 1 || time.Now().After(deadline) {
				if len(p) != 1 {
					t.Fatalf("want one helper process, have %v", p)
				}
				return p
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	helpers()

	// Disconnect kills the group, connect starts a new one.
	if code, body := d.do("POST", "/servers/"+id+"/disconnect", map[string]any{"force": true}); code != 200 {
		t.Fatalf("disconnect: %d %v", code, body)
	}
	waitGone(t, marker)
	if code, body := d.do("POST", "/servers/"+id+"/connect", nil); code != 200 && code != 202 {
		t.Fatalf("connect: %d %v", code, body)
	}
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	helpers()

	// SIGTERM kills the group.
	d.signal(syscall.SIGTERM, 15*time.Second)
	waitGone(t, marker)

	// kill -9: the helper outlives the daemon (no Pdeathsig reaches a grandchild); the next start reaps it.
	d.start()
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	old := helpers()[0]
	oldStart := procStart(old)
	d.signal(syscall.SIGKILL, 5*time.Second)
	d.start()
	deadline := time.Now().Add(10 * time.Second)
	for procStart(old) == oldStart && oldStart != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the helper of the killed daemon's server (pid %d) survived the restart", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	if now := helpers(); now[0] == old && procStart(now[0]) == oldStart {
		t.Fatalf("the old helper is still there: %v", now)
	}
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err = http.Post(strings.TrimSuffix(d.base, "/aggregator")+"/tools/call", "application/json",
			strings.NewReader(`{"name":"wrapped.echo","arguments":{"message":"after reaping"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 404 || time.Now().After(deadline) {
			break
		}
		resp.Body.Close()
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(out), "after reaping") {
		t.Fatalf("the restarted server does not work: %d %s", resp.StatusCode, out)
	}

	// Delete kills the group and removes its record.
	if code, _ := d.do("DELETE", "/servers/"+id, nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	waitGone(t, marker)
	if entries, _ := os.ReadDir(filepath.Join(dataDir, "stdio-groups")); len(entries) != 0 {
		t.Errorf("records left after delete: %v", entries)
	}
	d.signal(syscall.SIGTERM, 15*time.Second)
}
