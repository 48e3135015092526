package mcpproxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// suiteResult is what one conformance run printed: checks passed and failed, in total and per scenario.
type suiteResult struct {
	passed, failed int
	scenarios      map[string][2]int // scenario -> {passed, failed}
	output         string
}

var (
	ansi        = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	totalLine   = regexp.MustCompile(`(?m)^Total: (\d+) passed, (\d+) failed`)
	scenarioRow = regexp.MustCompile(`(?m)^[✓✗] (\S+): (\d+) passed, (\d+) failed`)
)

// TestConformance runs @modelcontextprotocol/conformance against the go-sdk's conformance everything-server
// directly and through /mcp/servers/{name}: the proxy must pass at least as many checks, and every scenario the
// server passes directly.
func TestConformance(t *testing.T) {
	root := peertest.RepoRoot(t)
	node := filepath.Join(root, "testdata", "peers", "node_modules", ".bin", "node")
	suite := filepath.Join(root, "testdata", "peers", "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	baseline := filepath.Join(root, "testdata", "conformance", "baseline.yml")
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			missing(t, p)
		}
	}

	bin := buildEverything(t, root)
	addr := startEverything(t, bin)
	backend := "http://" + addr + "/mcp"

	direct := runSuite(t, node, suite, backend, baseline)
	t.Logf("direct against the go-sdk everything-server: %d passed, %d failed", direct.passed, direct.failed)

	r := newRig(t, mcpproxy.Options{})
	r.register("conformance", persistence.TransportHTTP, map[string]any{"base_url": backend})
	proxied := runSuite(t, node, suite, r.url("conformance"), baseline)
	t.Logf("through /mcp/servers/conformance: %d passed, %d failed", proxied.passed, proxied.failed)

	var worse []string
	for name, d := range direct.scenarios {
		p, ok := proxied.scenarios[name]
		if !ok || d[1] == 0 && p[1] > 0 || p[0] < d[0] {
			worse = append(worse, fmt.Sprintf("%s: direct %d/%d, proxy %d/%d passed/failed", name, d[0], d[1], p[0], p[1]))
		}
	}
	sort.Strings(worse)
	if proxied.passed < direct.passed || len(worse) > 0 {
		t.Errorf("the proxy passes fewer checks than the server directly (%d < %d) or regresses scenarios:\n%s\n--- proxy run ---\n%s",
			proxied.passed, direct.passed, strings.Join(worse, "\n"), proxied.output)
	}
	for name, p := range proxied.scenarios {
		if p[1] > 0 {
			t.Logf("scenario failing through the proxy (and directly: %v): %s", direct.scenarios[name][1] > 0, name)
		}
	}
}

// buildEverything compiles the go-sdk's conformance server from the module cache, with the module's go-sdk version.
func buildEverything(t *testing.T, root string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "everything")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the go-sdk conformance everything-server: %v\n%s", err, out)
	}
	return bin
}

// startEverything runs the server stateful on a free loopback port until the test ends.
func startEverything(t *testing.T, bin string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", peertest.FreePort(t))
	cmd := exec.Command(bin, "-http", addr, "-stateless=false")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start everything-server: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("everything-server did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runSuite runs the active server suite against url and parses its summary. The suite exits non-zero when a check
// fails, so its exit status is not an error here: the counts are compared.
func runSuite(t *testing.T, node, suite, url, baseline string) suiteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url, "--expected-failures", baseline)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	text := ansi.ReplaceAllString(string(out), "")
	m := totalLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("conformance run against %s printed no total (%v):\n%s", url, err, text)
	}
	res := suiteResult{scenarios: map[string][2]int{}, output: text}
	res.passed, _ = strconv.Atoi(m[1])
	res.failed, _ = strconv.Atoi(m[2])
	for _, row := range scenarioRow.FindAllStringSubmatch(text, -1) {
		p, _ := strconv.Atoi(row[2])
		f, _ := strconv.Atoi(row[3])
		res.scenarios[row[1]] = [2]int{p, f}
	}
	return res
}

// TestConformanceAggregatedEndpoint runs the suite against the aggregated /mcp with the same server registered as a
// backend. Tools and prompts are aliased as {server}__{name} and resolve by their bare name when one server has it;
// resources keep their URIs (one server lists them); a backend's elicitation, sampling and log messages reach the
// calling client. Scenarios that do not pass there yet are listed in testdata/conformance/aggregate-baseline.yml:
// every other scenario must pass, and the baseline must not list a scenario that passes (it is kept exact).
func TestConformanceAggregatedEndpoint(t *testing.T) {
	root := peertest.RepoRoot(t)
	node := filepath.Join(root, "testdata", "peers", "node_modules", ".bin", "node")
	suite := filepath.Join(root, "testdata", "peers", "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	baseline := filepath.Join(root, "testdata", "conformance", "aggregate-baseline.yml")
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			missing(t, p)
		}
	}
	raw, err := os.ReadFile(baseline)
	if err != nil {
		t.Fatal(err)
	}
	expected := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+- (\S+)`).FindAllStringSubmatch(string(raw), -1) {
		expected[m[1]] = true
	}

	bin := buildEverything(t, root)
	addr := startEverything(t, bin)
	r := newRig(t, mcpproxy.Options{})
	r.register("conformance", persistence.TransportHTTP, map[string]any{"base_url": "http://" + addr + "/mcp"})
	ep := mcpserver.New(r.sys, r.store, mcpserver.Options{})
	t.Cleanup(ep.Close)
	hs := httptest.NewServer(ep.StreamableHandler())
	t.Cleanup(hs.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rt := r.sys.Routes()
		if _, ok := rt.Tool("conformance.test_simple_text"); ok && len(rt.Prompts()) > 0 && len(rt.Resources()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the conformance server's tools, prompts and resources were never routable")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := runSuite(t, node, suite, hs.URL, baseline)
	t.Logf("aggregated /mcp: %d passed, %d failed", res.passed, res.failed)
	var unexpected, stale []string
	for name, s := range res.scenarios {
		switch {
		case s[1] > 0 && !expected[name]:
			unexpected = append(unexpected, fmt.Sprintf("%s (%d passed, %d failed)", name, s[0], s[1]))
		case s[1] == 0 && expected[name]:
			stale = append(stale, name)
		}
	}
	sort.Strings(unexpected)
	sort.Strings(stale)
	if len(unexpected) > 0 || len(stale) > 0 {
		t.Errorf("failing outside the baseline: %v\npassing but listed in the baseline: %v\n--- run ---\n%s", unexpected, stale, res.output)
	}
}
