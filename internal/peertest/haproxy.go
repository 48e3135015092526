package peertest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/syncbuf"
)

// HAProxy is a haproxy process (Debian's package, 2.6) running a configuration in the foreground.
type HAProxy struct {
	logs syncbuf.Buffer
}

func (h *HAProxy) Write(p []byte) (int, error) { return h.logs.Write(p) }

// Logs is what haproxy printed so far (its request log, with `log stdout`).
func (h *HAProxy) Logs() string { return h.logs.String() }

// StartHAProxy checks config with `haproxy -c`, runs it, and waits until every address in waitFor takes
// connections (its frontends' binds); the process is killed when the test ends.
func StartHAProxy(t testing.TB, config string, waitFor ...string) *HAProxy {
	t.Helper()
	bin := HAProxyBinary(t)
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c refuses the configuration: %v\n%s\n%s", err, out, config)
	}
	h := &HAProxy{}
	cmd := exec.Command(bin, "-db", "-f", path) // -db: foreground, no daemon
	cmd.Stdout, cmd.Stderr = h, h
	if err := cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range waitFor {
		for {
			if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("haproxy does not listen on %s; its output:\n%s", addr, h.Logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return h
}

var (
	dockerResolvers = regexp.MustCompile(`(?m)^resolvers docker\n(?:[ \t]+.*\n)*`)
	composeNode     = regexp.MustCompile(`aggregator-(\d+):(8081|8082)`)
	composeBind     = regexp.MustCompile(`(?m)^(\s+bind) :(8081|8082)$`)
)

// LoopbackHAProxyConfig turns deploy/haproxy.cfg (written for compose's network: nodes aggregator-N, REST on 8081 and
// MCP on 8082, Docker's DNS) into the same configuration for nodes on loopback: node N's REST and MCP listeners
// are rest[N-1] and mcp[N-1] (host:port), and the frontends bind restBind and mcpBind. Everything else, the
// balancing, stickiness and owner routing, is the file's own.
func LoopbackHAProxyConfig(t testing.TB, rest, mcp []string, restBind, mcpBind string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(t), "deploy", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := dockerResolvers.ReplaceAllString(string(raw), "")
	cfg = strings.ReplaceAll(cfg, " resolvers docker", "")
	cfg = composeBind.ReplaceAllStringFunc(cfg, func(m string) string {
		sub := composeBind.FindStringSubmatch(m)
		if sub[2] == "8081" {
			return sub[1] + " " + restBind
		}
		return sub[1] + " " + mcpBind
	})
	var bad []string
	cfg = composeNode.ReplaceAllStringFunc(cfg, func(m string) string {
		sub := composeNode.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[1])
		i := n - 1
		if i < 0 || i >= len(rest) || i >= len(mcp) {
			bad = append(bad, m)
			return m
		}
		if sub[2] == "8081" {
			return rest[i]
		}
		return mcp[i]
	})
	if len(bad) > 0 || strings.Contains(cfg, "resolvers docker") {
		t.Fatalf("deploy/haproxy.cfg names nodes this rig cannot map (%v), or Docker's resolvers remain:\n%s", bad, cfg)
	}
	return cfg
}

// HAProxyBinary returns the haproxy binary on PATH; without it the test is skipped (fails under CI=true: `make test`
// installs it).
func HAProxyBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		missingTool(t, "haproxy (Debian package haproxy)")
	}
	return bin
}
