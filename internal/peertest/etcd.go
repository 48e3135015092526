package peertest

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// StartEtcd runs an etcd of its own (Debian's etcd-server, installed by `make test`) on free loopback ports with
// its data in a temporary directory, waits until it takes clients, and returns its client endpoint (host:port). It
// is killed when the test ends.
func StartEtcd(t testing.TB) string {
	t.Helper()
	return StartEtcdServer(t).Endpoint
}

// EtcdServer is an etcd process a test can stop and start again on the same ports and data directory (an etcd
// restart).
type EtcdServer struct {
	// Endpoint is the client endpoint (host:port).
	Endpoint string

	t    testing.TB
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartEtcdServer is StartEtcd returning the server, to stop and restart it.
func StartEtcdServer(t testing.TB) *EtcdServer {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		missingTool(t, "etcd (Debian package etcd-server)")
	}
	client, peer := FreePort(t), FreePort(t)
	endpoint := fmt.Sprintf("127.0.0.1:%d", client)
	e := &EtcdServer{Endpoint: endpoint, t: t, args: []string{bin, "--name", "test", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "http://" + endpoint, "--advertise-client-urls", "http://" + endpoint,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("test=http://127.0.0.1:%d", peer), "--log-level", "error"}}
	t.Cleanup(e.Stop)
	e.Start()
	return e
}

// Start starts the etcd process (again, with the same data) and waits until it takes clients.
func (e *EtcdServer) Start() {
	e.t.Helper()
	cmd := exec.Command(e.args[0], e.args[1:]...)
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start etcd: %v", err)
	}
	e.mu.Lock()
	e.cmd = cmd
	e.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", e.Endpoint, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("etcd did not listen on %s", e.Endpoint)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the etcd process (its data stays for Start).
func (e *EtcdServer) Stop() {
	e.mu.Lock()
	cmd := e.cmd
	e.cmd = nil
	e.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
