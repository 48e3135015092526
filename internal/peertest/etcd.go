package peertest

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartEtcd runs an etcd of its own (Debian's etcd-server, installed by `make test`) on free loopback ports with
// its data in a temporary directory, waits until it takes clients, and returns its client endpoint (host:port). It
// is killed when the test ends.
func StartEtcd(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		missingTool(t, "etcd (Debian package etcd-server)")
	}
	client, peer := FreePort(t), FreePort(t)
	endpoint := fmt.Sprintf("127.0.0.1:%d", client)
	cmd := exec.Command(bin, "--name", "test", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "http://"+endpoint, "--advertise-client-urls", "http://"+endpoint,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("test=http://127.0.0.1:%d", peer), "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", endpoint, 200*time.Millisecond); err == nil {
			c.Close()
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not listen on %s", endpoint)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
