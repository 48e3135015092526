// Package deploy_test checks the deployment files (Dockerfile, deploy/compose.yaml with deploy/haproxy.cfg,
// deploy/kubernetes/*.yaml) against the daemon they deploy: no container engine or Kubernetes runs here, so what
// can be wrong in them is checked by reading them, and their environment is handed to the real daemon binary,
// whose configuration check (MCP_AGGREGATOR_ENABLED=false: check everything, then exit) must accept it. No
// network is used.
package deploy_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/connconfig"
)

// ---- the daemon binary, for its configuration check

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	binaryDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// daemon builds cmd/aggregator once, with the flags cmd/aggregator's own end-to-end tests use (so that `go test
// ./...` compiles it once for both).
func daemon(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		binaryDir, binaryErr = os.MkdirTemp("", "deploy-test-")
		if binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(binaryDir, "aggregator")
		out, err := exec.Command("go", "build", "-race", "-o", binaryPath, "github.com/mcpgw/aggregator/cmd/aggregator").CombinedOutput()
		if err != nil {
			binaryErr = &buildError{err: err, out: string(out)}
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./cmd/aggregator: " + e.err.Error() + "\n" + e.out
}

// checkConfig runs `aggregator serve` with env (and nothing else of this process's environment) and
// MCP_AGGREGATOR_ENABLED=false: the daemon checks the whole configuration, the cluster's needs (DATABASE_URL,
// MCP_CREDENTIAL_KEY) and the exposure rule (tokens when listening beyond loopback), then exits 0 saying it is
// disabled, or exits 2 naming what is wrong. It returns the exit code and the output.
func checkConfig(t *testing.T, env map[string]string) (int, string) {
	t.Helper()
	cmd := exec.Command(daemon(t), "serve")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		if k != "MCP_AGGREGATOR_ENABLED" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, "MCP_AGGREGATOR_ENABLED=false")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("aggregator serve did not exit within 30 s with MCP_AGGREGATOR_ENABLED=false:\n%s", out)
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatal(err)
	}
	return 0, string(out)
}

// acceptConfig fails the test unless the daemon accepts env.
func acceptConfig(t *testing.T, who string, env map[string]string) {
	t.Helper()
	code, out := checkConfig(t, env)
	if code != 0 || !strings.Contains(out, "disabled") {
		t.Errorf("%s: the daemon refuses this configuration (exit %d):\n%s", who, code, out)
	}
}

// ---- values standing in for the secrets the files leave to the operator (made here, never written anywhere)

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func testSecrets(t *testing.T) map[string]string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"MCP_CREDENTIAL_KEY":           base64.StdEncoding.EncodeToString(key),
		"POSTGRES_PASSWORD":            randomHex(t, 24),
		"MCP_AGGREGATOR_ADMIN_TOKENS":  "admin:" + randomHex(t, 24),
		"MCP_AGGREGATOR_CLIENT_TOKENS": "client:" + randomHex(t, 24),
	}
}

// ---- checks shared by compose and Kubernetes

// isSecretSetting names the settings that must come from a secret, never be written in a file.
func isSecretSetting(name string) bool {
	return name == "DATABASE_URL" || strings.HasPrefix(name, "MCP_CREDENTIAL_KEY") || strings.HasSuffix(name, "_TOKENS") ||
		strings.HasSuffix(name, "_API_KEY")
}

// checkKnownSettings: every setting of the daemon's own (MCP_AGGREGATOR_*, MCP_CREDENTIAL_KEY*, DATABASE_URL,
// QDRANT_*) that a file sets is one the daemon reads; the daemon ignores an unknown name, so a misspelt one would
// silently not apply.
func checkKnownSettings(t *testing.T, who string, env map[string]string, table map[string]string) {
	t.Helper()
	for name := range env {
		if connconfig.IsDaemonSetting(name) {
			if _, ok := table[name]; !ok {
				t.Errorf("%s sets %s, which is not a setting of the daemon (README, Configuration)", who, name)
			}
		}
	}
}

// setting is the value the daemon will use: env's, else README's default.
func setting(env, table map[string]string, name string) string {
	if v := strings.TrimSpace(env[name]); v != "" {
		return v
	}
	return table[name]
}

func seconds(t *testing.T, s string) time.Duration {
	t.Helper()
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(f * float64(time.Second))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// checkClusterNode checks the settings every node of a cluster needs and returns the three listen ports.
func checkClusterNode(t *testing.T, who string, env, table map[string]string) (rest, mcp, cluster int) {
	t.Helper()
	if m := setting(env, table, "MCP_AGGREGATOR_CLUSTER"); m != "etcd" {
		t.Errorf("%s: MCP_AGGREGATOR_CLUSTER=%q, want etcd", who, m)
	}
	for _, name := range []string{"MCP_AGGREGATOR_CLUSTER_ETCD", "MCP_AGGREGATOR_CLUSTER_ADVERTISE", "DATABASE_URL", "MCP_CREDENTIAL_KEY", "MCP_AGGREGATOR_DATA_DIR"} {
		if _, ok := env[name]; !ok {
			t.Errorf("%s: %s is not set (every node of a cluster needs it)", who, name)
		}
	}
	if env["MCP_AGGREGATOR_ADMIN_TOKENS"] == "" && env["MCP_AGGREGATOR_TOKENS_FILE"] == "" {
		t.Errorf("%s: no admin token (MCP_AGGREGATOR_ADMIN_TOKENS or MCP_AGGREGATOR_TOKENS_FILE): nobody could manage servers", who)
	}
	rest = listenPort(setting(env, table, "MCP_AGGREGATOR_LISTEN"))
	mcp = listenPort(setting(env, table, "MCP_AGGREGATOR_MCP_LISTEN"))
	cluster = listenPort(setting(env, table, "MCP_AGGREGATOR_CLUSTER_LISTEN"))
	if cluster <= 0 {
		t.Errorf("%s: MCP_AGGREGATOR_CLUSTER_LISTEN=%q: want a fixed port (the one the network admits between nodes)", who, env["MCP_AGGREGATOR_CLUSTER_LISTEN"])
	}
	if rest <= 0 || mcp <= 0 || rest == mcp || rest == cluster || mcp == cluster {
		t.Errorf("%s: the REST (%d), MCP (%d) and cluster (%d) ports must be fixed and distinct", who, rest, mcp, cluster)
	}
	for _, name := range []string{"MCP_AGGREGATOR_LISTEN", "MCP_AGGREGATOR_MCP_LISTEN"} {
		if host, _, _ := net.SplitHostPort(setting(env, table, name)); host != "0.0.0.0" && host != "::" && host != "" {
			t.Errorf("%s: %s listens on %q: in a container it must listen on all interfaces to be reachable", who, name, host)
		}
	}
	return rest, mcp, cluster
}

// ---- Dockerfile

func TestDockerfile(t *testing.T) {
	args, stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	byName := map[string]dockerStage{}
	for _, s := range stages {
		byName[s.Name] = s
	}
	if len(stages) < 3 {
		t.Fatalf("want a build stage and the static and node targets, got %d stages", len(stages))
	}

	// The Go version follows go.mod.
	gomod := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFile(t, "go.mod"))
	if gomod == nil || args["GO_VERSION"] != gomod[1] {
		t.Errorf("Dockerfile ARG GO_VERSION=%q, go.mod says go %v", args["GO_VERSION"], gomod)
	}
	build, ok := byName["build"]
	if !ok || !strings.HasPrefix(build.Base, "golang:${GO_VERSION}") {
		t.Fatalf("want a stage `build` FROM golang:${GO_VERSION}, got %+v", build)
	}
	var goBuild string
	for _, i := range build.Instructions {
		if i[0] == "RUN" && strings.Contains(i[1], "go build") {
			goBuild = i[1]
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags", "./cmd/aggregator", "-o /out/aggregator"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("the build stage's go build lacks %q: %q", want, goBuild)
		}
	}

	// The runtime targets: static (the default, so the last stage) and node; both run as a non-root user given
	// by number (so that Kubernetes' runAsNonRoot can verify it) and start `serve`.
	if last := stages[len(stages)-1]; last.Name != "static" {
		t.Errorf("the last stage (docker build's default target) is %q, want static", last.Name)
	}
	for _, name := range []string{"static", "node"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no stage %q", name)
			continue
		}
		if strings.HasSuffix(s.Base, ":latest") || !strings.Contains(s.Base, ":") {
			t.Errorf("stage %s: base image %q is not pinned to a tag", name, s.Base)
		}
		user := strings.SplitN(s.last("USER"), ":", 2)[0]
		if uid, err := strconv.Atoi(user); err != nil || uid == 0 {
			t.Errorf("stage %s: USER %q, want a non-zero numeric uid", name, s.last("USER"))
		}
		if !strings.Contains(strings.Join(flatten(s.Instructions, "COPY"), " "), "--from=build /out/aggregator") {
			t.Errorf("stage %s does not copy the binary built in stage build", name)
		}
		entry := s.last("ENTRYPOINT") + " " + s.last("CMD")
		if !strings.Contains(entry, "aggregator") || !strings.Contains(entry, `"serve"`) {
			t.Errorf("stage %s: ENTRYPOINT/CMD %q do not run `aggregator serve`", name, entry)
		}
		env := strings.Join(flatten(s.Instructions, "ENV"), " ")
		for _, p := range strings.Fields(s.last("EXPOSE")) {
			if n, _ := strconv.Atoi(p); n != 7946 && !strings.Contains(env, ":"+p) {
				t.Errorf("stage %s exposes %s, which no listen address of its ENV uses", name, p)
			}
		}
	}
	if !strings.Contains(byName["node"].last("ENTRYPOINT"), "tini") {
		t.Errorf("stage node: stdio servers' orphans need an init as PID 1 (tini)")
	}

	// .dockerignore keeps the context small but must not drop what the build compiles or embeds.
	ignore := readFile(t, ".dockerignore")
	for _, p := range []string{"go.mod", "go.sum", "cmd/aggregator/main.go", "migrations/postgres", "search/embed/wordvec.bin.gz", "search/classify/skills.json"} {
		if pat := dockerIgnored(ignore, p); pat != "" {
			t.Errorf(".dockerignore pattern %q drops %s, which the build needs", pat, p)
		}
	}
	for _, p := range []string{".git", "testdata/peers/node_modules"} {
		if dockerIgnored(ignore, p) == "" {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
}

func flatten(ins [][2]string, name string) []string {
	var out []string
	for _, i := range ins {
		if i[0] == name {
			out = append(out, i[1])
		}
	}
	return out
}

// dockerIgnored returns the .dockerignore pattern that excludes path or one of its parent directories ("" if
// none). Patterns are matched from the context root; "**/" matches any leading directories; "!" exceptions are not
// used here and not supported.
func dockerIgnored(ignore, path string) string {
	for _, line := range strings.Split(ignore, "\n") {
		pat := strings.TrimPrefix(strings.TrimSpace(line), "/")
		if pat == "" || strings.HasPrefix(pat, "#") {
			continue
		}
		for p := path; p != "." && p != "/"; p = filepath.Dir(p) {
			if rest, ok := strings.CutPrefix(pat, "**/"); ok {
				if m, _ := filepath.Match(rest, filepath.Base(p)); m {
					return pat
				}
			} else if m, _ := filepath.Match(pat, p); m {
				return pat
			}
		}
	}
	return ""
}

// ---- compose

// composeValues are the variables the test interpolates compose.yaml with: test secrets for the required ones,
// nothing for the rest (their defaults apply).
func composeValues(t *testing.T, refs []varRef) map[string]string {
	secrets := testSecrets(t)
	vars := map[string]string{}
	for _, r := range refs {
		if !r.Required {
			continue
		}
		v, ok := secrets[r.Name]
		if !ok {
			t.Fatalf("compose.yaml requires ${%s}: give the test a value for it (testSecrets)", r.Name)
		}
		vars[r.Name] = v
	}
	return vars
}

func TestCompose(t *testing.T) {
	table := configTable(t)
	text := readFile(t, "deploy/compose.yaml")
	refs := composeRefs(text)
	raw := decodeCompose(t, text) // before interpolation: where values come from
	vars := composeValues(t, refs)
	interpolated, err := interpolate(text, vars)
	if err != nil {
		t.Fatal(err)
	}
	c := decodeCompose(t, interpolated)

	// Every variable compose.yaml reads is in env.example, which the operator copies to .env.
	example := readFile(t, "deploy/env.example")
	for _, r := range refs {
		if !regexp.MustCompile(`(?m)^` + r.Name + `=`).MatchString(example) {
			t.Errorf("compose.yaml reads ${%s}, which deploy/env.example does not list", r.Name)
		}
	}
	if m := regexp.MustCompile(`(?m)^[A-Z_]+=\S+`).FindAllString(example, -1); len(m) > 0 {
		t.Errorf("deploy/env.example must leave every value empty (no secret, even an example one, in a file): %v", m)
	}

	var nodes []string
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "mcp-aggregator:") {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	if len(nodes) != 3 {
		t.Fatalf("want 3 aggregator nodes (services with image mcp-aggregator:*), got %v", nodes)
	}
	roles := map[string]string{}
	for name, s := range c.Services {
		switch {
		case strings.HasPrefix(s.Image, "postgres:"):
			roles["postgres"] = name
		case strings.Contains(s.Image, "etcd:"):
			roles["etcd"] = name
		case strings.HasPrefix(s.Image, "haproxy:"):
			roles["lb"] = name
		}
	}
	for _, r := range []string{"postgres", "etcd", "lb"} {
		if roles[r] == "" {
			t.Fatalf("no %s service in compose.yaml", r)
		}
	}
	for name, s := range c.Services {
		if img := s.Image; !strings.Contains(img, ":") || strings.HasSuffix(img, ":latest") {
			t.Errorf("service %s: image %q is not pinned to a tag", name, img)
		}
	}

	_, stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	stageNames := map[string]bool{}
	for _, s := range stages {
		stageNames[s.Name] = true
	}
	shutdown := time.Duration(0)
	var keys []string
	advertised := map[string]bool{}
	owners := map[string]string{} // node -> the owner header value it answers with
	dataVolumes := map[string]string{}
	type ports struct{ rest, mcp int }
	nodePorts := map[string]ports{}
	for _, name := range nodes {
		s, rs := c.Services[name], raw.Services[name]
		who := "compose service " + name
		checkKnownSettings(t, who, s.Environment, table)
		rest, mcp, _ := checkClusterNode(t, who, s.Environment, table)
		nodePorts[name] = ports{rest, mcp}

		// Secrets come from the operator's .env, never from the file.
		for k, v := range rs.Environment {
			if !isSecretSetting(k) || v == "" {
				continue
			}
			secretPart := v
			if k == "DATABASE_URL" {
				m := regexp.MustCompile(`^postgres(?:ql)?://[^:/@]*:([^@]*)@`).FindStringSubmatch(v)
				if m == nil {
					t.Errorf("%s: DATABASE_URL %q has no password in it", who, v)
					continue
				}
				secretPart = m[1]
			}
			if !regexp.MustCompile(`^\$\{[A-Z_]+(:?[-?][^}]*)?\}$`).MatchString(secretPart) {
				t.Errorf("%s: %s is written in compose.yaml (%q); it must be a ${VAR} from the operator's .env", who, k, v)
			}
		}
		keys = append(keys, rs.Environment["MCP_CREDENTIAL_KEY"])

		// Cluster wiring: etcd and PostgreSQL are the services of this file, and the advertised host is this node's
		// name, which the others resolve on the compose network.
		for _, ep := range strings.Split(s.Environment["MCP_AGGREGATOR_CLUSTER_ETCD"], ",") {
			if host, _, err := net.SplitHostPort(strings.TrimSpace(ep)); err != nil || host != roles["etcd"] {
				t.Errorf("%s: MCP_AGGREGATOR_CLUSTER_ETCD %q does not name the etcd service %s", who, ep, roles["etcd"])
			}
		}
		if u, err := url.Parse(s.Environment["DATABASE_URL"]); err != nil || u.Hostname() != roles["postgres"] {
			t.Errorf("%s: DATABASE_URL does not point at the postgres service %s", who, roles["postgres"])
		}
		adv := s.Environment["MCP_AGGREGATOR_CLUSTER_ADVERTISE"]
		if adv != name && adv != s.Hostname {
			t.Errorf("%s: MCP_AGGREGATOR_CLUSTER_ADVERTISE=%q: want the service's own name, which the other nodes resolve", who, adv)
		}
		if advertised[adv] {
			t.Errorf("%s: advertises %q like another node", who, adv)
		}
		advertised[adv] = true
		owners[name] = net.JoinHostPort(adv, strconv.Itoa(nodePorts[name].mcp))
		deps := s.dependsOn(t)
		for _, r := range []string{"postgres", "etcd"} {
			if deps[roles[r]] != "service_healthy" {
				t.Errorf("%s: depends_on %s should wait for service_healthy, got %q", who, roles[r], deps[roles[r]])
			}
			if c.Services[roles[r]].Healthcheck == nil {
				t.Errorf("service %s has no healthcheck, so service_healthy never comes", roles[r])
			}
		}

		// Each node has a data directory of its own (node id slot, stdio process-group records).
		dataDir := s.Environment["MCP_AGGREGATOR_DATA_DIR"]
		var source string
		for _, v := range s.Volumes {
			f := strings.Split(v, ":")
			if len(f) >= 2 && f[1] == dataDir {
				source = f[0]
			}
		}
		switch {
		case source == "":
			t.Errorf("%s: nothing is mounted at its data directory %q", who, dataDir)
		case dataVolumes[source] != "":
			t.Errorf("%s and %s share the data volume %q: each node needs its own", dataVolumes[source], name, source)
		default:
			dataVolumes[source] = name
			if _, declared := c.Volumes[source]; !declared && !strings.HasPrefix(source, ".") && !strings.HasPrefix(source, "/") {
				t.Errorf("%s: volume %q is not declared under volumes:", who, source)
			}
		}

		// Non-root, and stopped no sooner than the daemon's shutdown allows.
		if u := strings.SplitN(s.User, ":", 2)[0]; u == "" || u == "0" || u == "root" {
			t.Errorf("%s: user %q, want a non-root uid", who, s.User)
		}
		shutdown = seconds(t, setting(s.Environment, table, "MCP_AGGREGATOR_SHUTDOWN_TIMEOUT"))
		if s.StopGracePeriod == "" || seconds(t, s.StopGracePeriod) <= shutdown {
			t.Errorf("%s: stop_grace_period %q must exceed MCP_AGGREGATOR_SHUTDOWN_TIMEOUT (%s), or Docker kills the node mid-shutdown (the default is 10 s)",
				who, s.StopGracePeriod, shutdown)
		}
		if s.Build == nil || !stageNames[s.Build.Target] || s.Build.Context != ".." {
			t.Errorf("%s: build %+v: want context .. (the repository root) and a target of the Dockerfile", who, s.Build)
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only the load balancer should be reachable from outside", who, s.Ports)
		}
		acceptConfig(t, who, s.Environment)
	}
	if len(slices.Compact(slices.Clone(keys))) != 1 {
		t.Errorf("the nodes must share one MCP_CREDENTIAL_KEY: %v", keys)
	}
	// A node reaches another's MCP listener at its advertised name (not an IP literal), so the host guard must
	// allow those names.
	for _, name := range nodes {
		allowed := strings.Split(c.Services[name].Environment["MCP_AGGREGATOR_ALLOWED_HOSTS"], ",")
		for adv := range advertised {
			if net.ParseIP(adv) == nil && !slices.Contains(allowed, adv) {
				t.Errorf("compose service %s: MCP_AGGREGATOR_ALLOWED_HOSTS lacks %q, the name other nodes use for it", name, adv)
			}
		}
	}

	// Published host ports do not collide.
	published := map[string]string{}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			pp := parsePort(t, p)
			if other, dup := published[pp.Host]; dup {
				t.Errorf("host port %s is published by %s and %s", pp.Host, other, name)
			}
			published[pp.Host] = name
		}
	}

	checkHAProxy(t, c, roles["lb"], nodes, func(n string) (int, int) { return nodePorts[n].rest, nodePorts[n].mcp }, owners)
}

// checkHAProxy checks the load balancer's configuration against the nodes of the compose file.
// owners is the owner header value (actors.OwnerHeader) each node answers with.
func checkHAProxy(t *testing.T, c composeFile, lb string, nodes []string, ports func(string) (rest, mcp int), owners map[string]string) {
	t.Helper()
	s := c.Services[lb]
	var cfgPath string
	for _, v := range s.Volumes {
		if f := strings.Split(v, ":"); len(f) >= 2 && strings.HasSuffix(f[1], "haproxy.cfg") {
			cfgPath = f[0]
		}
	}
	if cfgPath == "" {
		t.Fatalf("service %s mounts no haproxy.cfg", lb)
	}
	sections := parseHAProxy(readFile(t, filepath.Join("deploy", cfgPath)))
	backends := map[string]haproxySection{}
	var frontends []haproxySection
	var defaults haproxySection
	for _, sec := range sections {
		switch sec.Kind {
		case "backend":
			backends[sec.Name] = sec
		case "frontend":
			frontends = append(frontends, sec)
		case "defaults":
			defaults = sec
		}
	}

	// Streams (SSE) stay open: long client and server timeouts.
	for _, name := range []string{"client", "server"} {
		d := defaults.directive("timeout " + name)
		if len(d) == 0 || seconds(t, d[0][0]) < 10*time.Minute {
			t.Errorf("haproxy.cfg: timeout %s %v is too short for SSE streams (want 10 minutes or more)", name, d)
		}
	}
	if retry := defaults.directive("retry-on"); len(retry) > 0 && !slices.Equal(retry[0], []string{"conn-failure"}) {
		t.Errorf("haproxy.cfg: retry-on %v may send a tool call twice; retry only requests that were never sent (conn-failure)", retry[0])
	}

	// The published ports are the frontends' binds; each frontend's backends point at one listener of every node.
	binds := map[string]bool{}
	for _, f := range frontends {
		for _, b := range f.directive("bind") {
			binds[b[0][strings.LastIndexByte(b[0], ':')+1:]] = true
		}
	}
	for _, p := range s.Ports {
		if pp := parsePort(t, p); !binds[pp.Container] {
			t.Errorf("service %s publishes container port %s, where haproxy.cfg binds nothing", lb, pp.Container)
		}
	}
	sawListener := map[string]bool{}
	ownerRouted, restOwnerRouted := false, false
	for _, f := range frontends {
		var used []string
		for _, d := range f.directive("default_backend") {
			used = append(used, d[0])
		}
		for _, d := range f.directive("use_backend") {
			used = append(used, d[0])
		}
		if len(used) == 0 {
			t.Errorf("haproxy.cfg: frontend %s has no backend", f.Name)
		}
		for _, bname := range used {
			b, ok := backends[bname]
			if !ok {
				t.Errorf("haproxy.cfg: frontend %s uses backend %s, which does not exist", f.Name, bname)
				continue
			}
			servers := map[string]int{}
			lines := map[string]string{} // server line name -> node
			for _, d := range b.directive("server") {
				host, port, err := net.SplitHostPort(d[1])
				if err != nil {
					t.Errorf("haproxy.cfg: backend %s: server %v: %v", bname, d, err)
					continue
				}
				n, _ := strconv.Atoi(port)
				servers[host] = n
				lines[d[0]] = host
			}
			listener := ""
			for _, node := range nodes {
				rest, mcp := ports(node)
				switch p, ok := servers[node]; {
				case !ok:
					t.Errorf("haproxy.cfg: backend %s lacks node %s", bname, node)
				case p == rest && (listener == "" || listener == "rest"):
					listener = "rest"
				case p == mcp && (listener == "" || listener == "mcp"):
					listener = "mcp"
				default:
					t.Errorf("haproxy.cfg: backend %s sends to %s:%d, which is not the node's REST (%d) or MCP (%d) port, or mixes them", bname, node, p, rest, mcp)
				}
			}
			if len(servers) != len(nodes) {
				t.Errorf("haproxy.cfg: backend %s has %d servers for %d nodes", bname, len(servers), len(nodes))
			}
			sawListener[listener] = true
			// The REST backend sends a tool call to the owner of the server that answered the last call of its name.
			if listener == "rest" {
				for _, p := range checkOwnerRouting(b, backends, lines, owners, byToolName) {
					t.Error(p)
				}
				restOwnerRouted = true
			}
			// Only ready nodes get traffic.
			check := strings.Join(flattenDirectives(b.directive("http-check send")), " ")
			if len(b.directive("option httpchk")) == 0 || !strings.Contains(check, "uri /readyz") {
				t.Errorf("haproxy.cfg: backend %s does not check GET /readyz (%q)", bname, check)
			}
			if m := regexp.MustCompile(`hdr Host (\S+)`).FindStringSubmatch(check); m == nil || (m[1] != "localhost" && net.ParseIP(m[1]) == nil) {
				t.Errorf("haproxy.cfg: backend %s: the check must send a Host the host guard allows (localhost or an IP), got %q", bname, check)
			}
			// MCP sessions live on one node: every MCP backend keeps a session on its node.
			if listener == "mcp" {
				sticky := len(b.directive("stick store-response res.hdr(mcp-session-id)")) > 0 && len(b.directive("stick match req.hdr(mcp-session-id)")) > 0
				bySource := len(b.directive("balance source")) > 0
				if !sticky && !bySource {
					t.Errorf("haproxy.cfg: MCP backend %s neither sticks on Mcp-Session-Id nor balances by source: sessions would land on nodes that do not have them", bname)
				}
				// The backend of the streamable HTTP endpoints (not the legacy SSE one) sends a per-server path to
				// its owner.
				if sticky {
					for _, p := range checkOwnerRouting(b, backends, lines, owners, byServerPath) {
						t.Error(p)
					}
					ownerRouted = true
				}
			}
		}
	}
	if !sawListener["rest"] || !sawListener["mcp"] {
		t.Errorf("haproxy.cfg: want backends for both the REST and the MCP listener, got %v", sawListener)
	}
	if !restOwnerRouted {
		t.Errorf("haproxy.cfg: no REST backend, so no owner routing of tool calls")
	}
	if !ownerRouted {
		t.Errorf("haproxy.cfg: no MCP backend sticks on Mcp-Session-Id, so none routes /mcp/servers/{name} to its owner")
	}
}

// Owner routing in a backend (haproxy.cfg's header comment): the backend tracks each key (the MCP backend: a
// per-server path; the REST backend: a tool call's name) in a table whose gpt0 is the number of the key's owner,
// learnt from the owner header of the answers, and a use-server rule per number sends the key to that node's server
// line.
var (
	ownerTrack = regexp.MustCompile(`^http-request track-sc(\d) (\S+) table (\S+) if (.+)$`)
	ownerUse   = regexp.MustCompile(`^use-server (\S+) if \{ sc_get_gpt0\((\d)\) eq (\d+) \}$`)
	ownerLearn = regexp.MustCompile(`^http-response sc-set-gpt0\((\d)\) (\d+) if \{ res\.hdr\(([^)]+)\) -m str (\S+) \}$`)
	ownerStrip = regexp.MustCompile(`^http-response del-header (\S+)$`)
)

// ownerKey says what a backend's owner routing must be keyed by.
type ownerKey struct {
	what string
	ok   func(b haproxySection, key, cond string) bool
}

var (
	// The MCP backend: the path of the per-server endpoint.
	byServerPath = ownerKey{"/mcp/servers/ paths", func(_ haproxySection, key, cond string) bool {
		return key == "path" && cond == "{ path_beg /mcp/servers/ }"
	}}
	// The REST backend: the "name" of a tool call's body, which needs the body buffered.
	byToolName = ownerKey{"the name of POST /api/v1/tools/call", func(b haproxySection, key, cond string) bool {
		v, ok := strings.CutPrefix(key, "var(")
		v, ok2 := strings.CutSuffix(v, ")")
		return ok && ok2 && cond == "{ "+key+" -m found }" && len(b.directive("option http-buffer-request")) > 0 &&
			slices.Contains(b.Lines, "http-request set-var("+v+") req.body,json_query('$.name') if { method POST } { path /api/v1/tools/call }")
	}}
)

// checkOwnerRouting checks the owner routing of MCP backend b, whose server lines are lines (name -> node), against
// the owner header value each node answers with (owners); it returns what is wrong.
func checkOwnerRouting(b haproxySection, backends map[string]haproxySection, lines map[string]string, owners map[string]string, keyed ownerKey) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	sc, table := "", ""
	use := map[string]string{}   // number -> server line
	learn := map[string]string{} // owner header value -> number
	learnAt, stripAt := -1, -1   // positions of the last learning rule and of the header's removal
	for i, l := range b.Lines {
		if m := ownerTrack.FindStringSubmatch(l); m != nil && keyed.ok(b, m[2], m[4]) {
			sc, table = m[1], m[3]
		}
		if m := ownerUse.FindStringSubmatch(l); m != nil && m[2] == sc {
			use[m[3]] = m[1]
		}
		if m := ownerLearn.FindStringSubmatch(l); m != nil && m[1] == sc && strings.EqualFold(m[3], actors.OwnerHeader) {
			learn[m[4]] = m[2]
			learnAt = i
		}
		if m := ownerStrip.FindStringSubmatch(l); m != nil && strings.EqualFold(m[1], actors.OwnerHeader) {
			stripAt = i
		}
	}
	if sc == "" {
		report("haproxy.cfg: backend %s does not track %s (http-request track-scN <key> table T if <condition>): no owner routing", b.Name, keyed.what)
		return problems
	}
	if tb, ok := backends[table]; !ok || !slices.ContainsFunc(tb.directive("stick-table"), func(a []string) bool {
		return slices.Contains(a, "gpt0") && slices.Contains(a, "string")
	}) {
		report("haproxy.cfg: table %s of backend %s's owner routing is missing or stores no gpt0 keyed by string", table, b.Name)
	}
	numbers := map[string]string{}
	for node, owner := range owners {
		k, ok := learn[owner]
		switch {
		case !ok:
			report("haproxy.cfg: backend %s never learns owner %s (node %s) from the %s header (sc-set-gpt0(%s) K if { res.hdr(...) -m str %s })", b.Name, owner, node, actors.OwnerHeader, sc, owner)
			continue
		case k == "0":
			report("haproxy.cfg: backend %s: owner %s is number 0, which means unknown", b.Name, owner)
		case numbers[k] != "":
			report("haproxy.cfg: backend %s: owners of %s and %s share number %s", b.Name, numbers[k], node, k)
		}
		numbers[k] = node
		if line := use[k]; lines[line] != node {
			report("haproxy.cfg: backend %s sends the requests of owner %s (number %s) to server line %q (node %q), not to node %s", b.Name, owner, k, line, lines[line], node)
		}
	}
	if stripAt < 0 || stripAt < learnAt {
		report("haproxy.cfg: backend %s does not remove the %s header after learning from it: clients would see node addresses", b.Name, actors.OwnerHeader)
	}
	return problems
}

func flattenDirectives(d [][]string) []string {
	var out []string
	for _, a := range d {
		out = append(out, strings.Join(a, " "))
	}
	return out
}

// ---- Kubernetes

func TestKubernetes(t *testing.T) {
	table := configTable(t)
	objs := loadManifests(t)
	byKind := map[string][]k8sObject{}
	find := func(kind, name string) (k8sObject, bool) {
		for _, o := range byKind[kind] {
			if o.Metadata.Name == name {
				return o, true
			}
		}
		return k8sObject{}, false
	}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}

	// One namespace holds everything.
	if len(byKind["Namespace"]) != 1 {
		t.Fatalf("want one Namespace, got %d", len(byKind["Namespace"]))
	}
	ns := byKind["Namespace"][0].Metadata.Name
	for _, o := range objs {
		if o.Kind != "Namespace" && o.Metadata.Namespace != ns {
			t.Errorf("%s: namespace %q, want %q", o, o.Metadata.Namespace, ns)
		}
	}

	// kustomization.yaml lists every manifest.
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	if err := yamlUnmarshal(readFile(t, "deploy/kubernetes/kustomization.yaml"), &kust); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	var manifests []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			manifests = append(manifests, b)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(kust.Resources)), manifests) {
		t.Errorf("kustomization.yaml lists %v, the directory has %v", kust.Resources, manifests)
	}

	// Secrets hold placeholders only.
	secrets := map[string]map[string]string{}
	for _, o := range byKind["Secret"] {
		var s struct {
			StringData map[string]string `yaml:"stringData"`
			Data       map[string]string `yaml:"data"`
		}
		o.decode(t, &s)
		if len(s.Data) > 0 {
			t.Errorf("%s: data is set; ship placeholders in stringData only", o)
		}
		for k, v := range s.StringData {
			if !strings.Contains(v, "REPLACE_ME") {
				t.Errorf("%s: %s is not a REPLACE_ME placeholder: no secret may be shipped", o, k)
			}
		}
		secrets[o.Metadata.Name] = s.StringData
	}
	configMaps := map[string]map[string]string{}
	for _, o := range byKind["ConfigMap"] {
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		o.decode(t, &cm)
		configMaps[o.Metadata.Name] = cm.Data
	}

	sts, ok := find("StatefulSet", "aggregator")
	if !ok {
		t.Fatal("no StatefulSet aggregator")
	}
	var w workload
	sts.decode(t, &w)
	if w.Spec.Replicas == nil || *w.Spec.Replicas != 3 {
		t.Errorf("%s: want 3 replicas, got %v", sts, w.Spec.Replicas)
	}
	podLabels := w.Spec.Template.Metadata.Labels
	if !w.Spec.Selector.matches(podLabels) {
		t.Errorf("%s: its selector does not match its pod template's labels", sts)
	}
	pod := w.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", sts, len(pod.Containers))
	}
	ctr := pod.Containers[0]
	who := sts.String()

	// The environment as the pod gets it; secrets are REPLACE_ME placeholders at first.
	env := map[string]string{}
	from := map[string]string{} // name -> "configmap", "secret", "field", "value"
	for _, ef := range ctr.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			data, ok := configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", who, ef.ConfigMapRef.Name)
			}
			for k, v := range data {
				env[k], from[k] = v, "configmap"
			}
		case ef.SecretRef != nil:
			data, ok := secrets[ef.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom Secret %s does not exist", who, ef.SecretRef.Name)
			}
			for k, v := range data {
				env[k], from[k] = v, "secret"
			}
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.Value != nil:
			env[e.Name], from[e.Name] = *e.Value, "value"
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok && !ref.Optional {
				t.Errorf("%s: %s reads key %s of Secret %s, which does not exist", who, e.Name, ref.Key, ref.Name)
			}
			env[e.Name], from[e.Name] = v, "secret"
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := configMaps[ref.Name][ref.Key]
			if !ok {
				t.Errorf("%s: %s reads key %s of ConfigMap %s, which does not exist", who, e.Name, ref.Key, ref.Name)
			}
			env[e.Name], from[e.Name] = v, "configmap"
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name], from[e.Name] = "10.1.2.3", "field:"+e.ValueFrom.FieldRef.FieldPath
		default:
			t.Errorf("%s: env %s has no value", who, e.Name)
		}
	}
	checkKnownSettings(t, who, env, table)
	rest, mcp, cluster := checkClusterNode(t, who, env, table)
	for name, src := range from {
		if isSecretSetting(name) && src != "secret" {
			t.Errorf("%s: %s comes from a %s; it must come from a Secret", who, name, src)
		}
	}
	if src := from["MCP_AGGREGATOR_CLUSTER_ADVERTISE"]; src != "field:status.podIP" {
		t.Errorf("%s: MCP_AGGREGATOR_CLUSTER_ADVERTISE comes from %q, want the downward API's status.podIP", who, src)
	}
	services := map[string]bool{}
	for _, o := range byKind["Service"] {
		services[o.Metadata.Name] = true
		services[o.Metadata.Name+"."+ns+".svc"] = true
		services[o.Metadata.Name+"."+ns+".svc.cluster.local"] = true
	}
	for _, ep := range strings.Split(env["MCP_AGGREGATOR_CLUSTER_ETCD"], ",") {
		if host, _, err := net.SplitHostPort(strings.TrimSpace(ep)); err != nil || !services[host] {
			t.Errorf("%s: MCP_AGGREGATOR_CLUSTER_ETCD %q is not host:port of a Service of these manifests", who, ep)
		}
	}
	if u, err := url.Parse(env["DATABASE_URL"]); err != nil || !services[u.Hostname()] {
		t.Errorf("%s: DATABASE_URL does not name a Service of these manifests", who)
	}

	// Ports: declared once each, and the listeners' ports are declared.
	portByName := map[string]int{}
	declared := map[int]string{}
	for _, p := range ctr.Ports {
		if _, dup := portByName[p.Name]; dup || declared[p.ContainerPort] != "" {
			t.Errorf("%s: container port %s/%d declared twice", who, p.Name, p.ContainerPort)
		}
		portByName[p.Name], declared[p.ContainerPort] = p.ContainerPort, p.Name
	}
	for what, p := range map[string]int{"REST": rest, "MCP": mcp, "cluster": cluster} {
		if declared[p] == "" {
			t.Errorf("%s: the %s port %d is not a declared container port", who, what, p)
		}
	}
	resolve := func(p intOrString) int {
		if n, err := strconv.Atoi(p.S); err == nil {
			return n
		}
		return portByName[p.S]
	}

	// Probes: liveness on /livez and readiness on /readyz (different paths), on a listener's declared port.
	probes := map[string]*probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe}
	wantPath := map[string]string{"liveness": "/livez", "readiness": "/readyz", "startup": "/livez"}
	for kind, p := range probes {
		if p == nil {
			if kind != "startup" {
				t.Errorf("%s: no %s probe", who, kind)
			}
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s: the %s probe is not an HTTP GET", who, kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("%s: %s probe on %q, want %s", who, kind, p.HTTPGet.Path, wantPath[kind])
		}
		if port := resolve(p.HTTPGet.Port); port == 0 || (port != rest && port != mcp) {
			t.Errorf("%s: %s probe port %q is not the REST (%d) or MCP (%d) listener's declared port", who, kind, p.HTTPGet.Port.S, rest, mcp)
		}
	}
	if ctr.LivenessProbe != nil && ctr.ReadinessProbe != nil && ctr.LivenessProbe.HTTPGet != nil && ctr.ReadinessProbe.HTTPGet != nil &&
		ctr.LivenessProbe.HTTPGet.Path == ctr.ReadinessProbe.HTTPGet.Path {
		t.Errorf("%s: liveness and readiness probe the same path %q: a store outage would restart every pod", who, ctr.LivenessProbe.HTTPGet.Path)
	}

	// Termination: the grace period covers the preStop pause plus the daemon's shutdown timeout.
	shutdown := seconds(t, setting(env, table, "MCP_AGGREGATOR_SHUTDOWN_TIMEOUT"))
	preStop := 0
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil && ctr.Lifecycle.PreStop.Sleep != nil {
		preStop = ctr.Lifecycle.PreStop.Sleep.Seconds
	}
	grace := 30 // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if time.Duration(grace)*time.Second <= shutdown+time.Duration(preStop)*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %d does not exceed the preStop pause (%d s) plus MCP_AGGREGATOR_SHUTDOWN_TIMEOUT (%s)", who, grace, preStop, shutdown)
	}

	// Non-root, no privilege; every workload of the manifests.
	for _, kind := range []string{"StatefulSet", "Deployment", "DaemonSet"} {
		for _, o := range byKind[kind] {
			var wl workload
			o.decode(t, &wl)
			checkPodSecurity(t, o.String(), wl.Spec.Template.Spec)
		}
	}

	// Each pod has a data directory of its own: a volumeClaimTemplate of the StatefulSet.
	dataDir := env["MCP_AGGREGATOR_DATA_DIR"]
	var dataVolume string
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == dataDir {
			dataVolume = m.Name
		}
	}
	perPod := false
	for _, v := range w.Spec.VolumeClaimTemplates {
		perPod = perPod || v.Metadata.Name == dataVolume
	}
	if dataVolume == "" || !perPod {
		t.Errorf("%s: the data directory %q is not mounted from a volumeClaimTemplate (volume %q): each node needs its own", who, dataDir, dataVolume)
	}

	// Services: selectors select pods of these manifests and target declared ports; the StatefulSet's governing
	// Service is headless and carries the cluster port; MCP needs session affinity.
	var workloads []workload
	for _, kind := range []string{"StatefulSet", "Deployment"} {
		for _, o := range byKind[kind] {
			var wl workload
			o.decode(t, &wl)
			workloads = append(workloads, wl)
		}
	}
	for _, o := range byKind["Service"] {
		var svc service
		o.decode(t, &svc)
		sel := labelSelector{MatchLabels: svc.Spec.Selector}
		var target *workload
		for i := range workloads {
			if sel.matches(workloads[i].Spec.Template.Metadata.Labels) {
				target = &workloads[i]
			}
		}
		if target == nil {
			t.Errorf("%s: its selector %v selects no pod of these manifests", o, svc.Spec.Selector)
			continue
		}
		if !sel.matches(podLabels) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			tp := resolve(p.TargetPort)
			if declared[tp] == "" {
				t.Errorf("%s: port %s targets %q, which the aggregator container does not declare", o, p.Name, p.TargetPort.S)
			}
			if tp == mcp && svc.Spec.SessionAffinity != "ClientIP" {
				t.Errorf("%s: MCP sessions live on one node: want sessionAffinity ClientIP", o)
			}
		}
	}
	gov, ok := find("Service", w.Spec.ServiceName)
	if !ok {
		t.Errorf("%s: serviceName %q is not a Service of these manifests", who, w.Spec.ServiceName)
	} else {
		var svc service
		gov.decode(t, &svc)
		hasCluster := false
		for _, p := range svc.Spec.Ports {
			hasCluster = hasCluster || resolve(p.TargetPort) == cluster
		}
		if svc.Spec.ClusterIP != "None" || !hasCluster {
			t.Errorf("%s: the governing Service must be headless with the cluster port", gov)
		}
	}

	// A disruption budget for the nodes.
	pdbOK := false
	for _, o := range byKind["PodDisruptionBudget"] {
		var pdb struct {
			Spec struct {
				Selector       labelSelector `yaml:"selector"`
				MaxUnavailable *int          `yaml:"maxUnavailable"`
				MinAvailable   *int          `yaml:"minAvailable"`
			} `yaml:"spec"`
		}
		o.decode(t, &pdb)
		if pdb.Spec.Selector.matches(podLabels) {
			pdbOK = (pdb.Spec.MaxUnavailable != nil && *pdb.Spec.MaxUnavailable >= 1 && *pdb.Spec.MaxUnavailable < 3) ||
				(pdb.Spec.MinAvailable != nil && *pdb.Spec.MinAvailable >= 1 && *pdb.Spec.MinAvailable < 3)
		}
	}
	if !pdbOK {
		t.Errorf("no PodDisruptionBudget selects the aggregator pods and lets a drain proceed while keeping nodes up")
	}

	// The cluster port is unauthenticated: the NetworkPolicy admits only the nodes to it.
	policed := false
	for _, o := range byKind["NetworkPolicy"] {
		var np networkPolicy
		o.decode(t, &np)
		if !np.Spec.PodSelector.matches(podLabels) {
			continue
		}
		policed = true
		for i, rule := range np.Spec.Ingress {
			reaches := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				reaches = reaches || resolve(p.Port) == cluster
			}
			if !reaches {
				continue
			}
			if len(rule.From) == 0 {
				t.Errorf("%s: ingress rule %d admits anyone to the cluster port", o, i)
			}
			for _, peer := range rule.From {
				if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil || !peer.PodSelector.matches(podLabels) {
					t.Errorf("%s: ingress rule %d admits more than the aggregator pods to the cluster port", o, i)
				}
			}
		}
	}
	if !policed {
		t.Errorf("no NetworkPolicy covers the aggregator pods: their cluster port would be open to every pod")
	}

	// The daemon accepts the configuration once real values replace the placeholders, and refuses each
	// placeholder it can tell from a real value (all but DATABASE_URL's password), so that the manifests cannot
	// start with a value anyone can read here.
	real := testSecrets(t)
	filled := maps.Clone(env)
	for k := range env {
		if from[k] != "secret" {
			continue
		}
		if k == "DATABASE_URL" {
			filled[k] = strings.Replace(env[k], "REPLACE_ME", real["POSTGRES_PASSWORD"], 1)
			continue
		}
		v, ok := real[k]
		if !ok {
			t.Fatalf("the test has no value for %s", k)
		}
		filled[k] = v
	}
	for k, v := range filled {
		if strings.Contains(v, "REPLACE_ME") {
			t.Fatalf("the test has no value for %s", k)
		}
	}
	acceptConfig(t, who, filled)
	for k := range env {
		if from[k] != "secret" || k == "DATABASE_URL" {
			continue
		}
		one := maps.Clone(filled)
		one[k] = env[k]
		if code, out := checkConfig(t, one); code == 0 {
			t.Errorf("%s: the daemon accepts the Secret's placeholder for %s; it must be refused:\n%s", who, k, out)
		}
	}
}

func checkPodSecurity(t *testing.T, who string, pod podSpec) {
	t.Helper()
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := securityContext{}
		if c.SecurityContext != nil {
			sc = *c.SecurityContext
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.SecurityContext.RunAsNonRoot
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = pod.SecurityContext.RunAsUser
		}
		if nonRoot == nil || !*nonRoot || uid == nil || *uid == 0 {
			t.Errorf("%s: container %s must run as non-root (runAsNonRoot true and a non-zero runAsUser)", who, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: set allowPrivilegeEscalation false", who, c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s: drop ALL capabilities", who, c.Name)
		}
		if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
			t.Errorf("%s: container %s: image %q is not pinned to a tag", who, c.Name, c.Image)
		}
	}
}

// TestHAProxyOwnerRoutingCheck runs the owner routing check on deploy/haproxy.cfg as it is (nothing wrong) and on
// copies broken one way each (each must be caught). The owners are the MCP backend's own server addresses, which
// TestCompose ties to the nodes' advertised names and MCP ports.
func TestHAProxyOwnerRoutingCheck(t *testing.T) {
	text := readFile(t, filepath.Join("deploy", "haproxy.cfg"))
	check := func(text string) []string {
		backends := map[string]haproxySection{}
		for _, sec := range parseHAProxy(text) {
			if sec.Kind == "backend" {
				backends[sec.Name] = sec
			}
		}
		b, ok := backends["mcp"]
		if !ok {
			return []string{"no backend mcp"}
		}
		lines, owners := map[string]string{}, map[string]string{}
		for _, d := range b.directive("server") {
			host, _, err := net.SplitHostPort(d[1])
			if err != nil {
				return []string{err.Error()}
			}
			lines[d[0]] = host
			owners[host] = d[1]
		}
		if len(owners) == 0 {
			return []string{"backend mcp has no servers"}
		}
		problems := checkOwnerRouting(b, backends, lines, owners, byServerPath)
		rest, ok := backends["rest"]
		if !ok {
			return append(problems, "no backend rest")
		}
		return append(problems, checkOwnerRouting(rest, backends, lines, owners, byToolName)...)
	}
	if p := check(text); len(p) > 0 {
		t.Fatalf("deploy/haproxy.cfg: %v", p)
	}
	replace := func(old, new string) func(string) string {
		return func(s string) string {
			if !strings.Contains(s, old) {
				t.Fatalf("mutation: haproxy.cfg has no %q", old)
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(string) string
	}{
		{"paths not tracked", replace("http-request track-sc1 path table mcp_owners if { path_beg /mcp/servers/ }", "")},
		{"other paths tracked", replace("path_beg /mcp/servers/ }", "path_beg /mcp }")},
		{"table missing", replace("backend mcp_owners", "backend mcp_owners_old")},
		{"table stores no gpt0", replace("expire 1h store gpt0", "expire 1h")},
		{"owner sent to another node", replace("use-server aggregator-1 if", "use-server aggregator-2 if")},
		{"use-server reads another counter", replace("use-server aggregator-2 if { sc_get_gpt0(1)", "use-server aggregator-2 if { sc_get_gpt0(0)")},
		{"owner learnt under a wrong address", replace("-m str aggregator-3:8082", "-m str aggregator-3:8081")},
		{"owner learnt from another header", replace("res.hdr(mcp-aggregator-owner) -m str aggregator-2:8082", "res.hdr(mcp-owner) -m str aggregator-2:8082")},
		{"two owners share a number", replace("sc-set-gpt0(1) 3 if", "sc-set-gpt0(1) 2 if")},
		{"owner numbered 0 (unknown)", replace("sc-set-gpt0(1) 1 if", "sc-set-gpt0(1) 0 if")},
		{"header reaches the client", replace("http-response del-header mcp-aggregator-owner", "")},
		{"REST: tool names not tracked", replace("http-request track-sc1 var(txn.tool) table rest_owners", "http-request track-sc1 var(txn.other) table rest_owners")},
		{"REST: body not buffered", replace("option http-buffer-request", "")},
		{"REST: key not the tool name", replace("json_query('$.name')", "json_query('$.arguments')")},
		{"REST: table missing", replace("backend rest_owners", "backend rest_owners_old")},
		{"REST: owner sent to another node", replace("use-server aggregator-3 if { sc_get_gpt0(1) eq 3 }", "use-server aggregator-1 if { sc_get_gpt0(1) eq 3 }")},
		{"REST: owner learnt under a wrong address", replace("res.hdr(mcp-aggregator-owner) -m str aggregator-1:8082", "res.hdr(mcp-aggregator-owner) -m str aggregator-1:8081")},
		{"REST: header reaches the client", replace("    http-response del-header mcp-aggregator-owner\n", "")},
		{"header removed before learning", func(s string) string {
			s = replace("    http-response del-header mcp-aggregator-owner\n", "")(s)
			return replace("    http-response sc-set-gpt0(1) 1", "    http-response del-header mcp-aggregator-owner\n    http-response sc-set-gpt0(1) 1")(s)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := check(tc.mutate(text)); len(p) == 0 {
				t.Errorf("the check accepts haproxy.cfg with %s", tc.name)
			} else {
				t.Logf("caught: %v", p)
			}
		})
	}
}
