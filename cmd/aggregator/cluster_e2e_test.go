package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// clusterNode is one aggregator process of a test cluster.
type clusterNode struct {
	*daemon
	name string
	rest string // http://127.0.0.1:port (REST listener root)
	id   string // node id, read from /health
}

// newCluster starts n nodes on one PostgreSQL with the membership env given (MCP_AGGREGATOR_CLUSTER...), and
// waits until every node has joined and sees all n members.
func newCluster(t *testing.T, n int, dbURL string, membership func(i int) []string) []*clusterNode {
	t.Helper()
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	key := base64.StdEncoding.EncodeToString(raw)
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		d := newDaemon(t, dbURL)
		d.env = append(d.env, "MCP_CREDENTIAL_KEY="+key, "MCP_AGGREGATOR_LEASE_TTL=3", "MCP_AGGREGATOR_METRICS_OPEN=true",
			"MCP_AGGREGATOR_LOG_FORMAT=text", "MCP_AGGREGATOR_SHUTDOWN_TIMEOUT=15",
			"MCP_AGGREGATOR_RATE_LIMIT=0") // the hand-over phase calls as fast as it can
		d.env = append(d.env, membership(i)...)
		// An explicit cluster port: a free port picked by the kernel at start could be one the next node's
		// listeners were given by FreePort a moment ago.
		d.env = append(d.env, fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_LISTEN=127.0.0.1:%d", peertest.FreePort(t)))
		nodes[i] = &clusterNode{daemon: d, name: fmt.Sprintf("node%d", i+1), rest: strings.SplitN(d.base, "/api/", 2)[0]}
	}
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); nd.start() }()
	}
	wg.Wait()
	for _, nd := range nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, h := nd.do("GET", "/health", nil)
			c, _ := h["cluster"].(map[string]any)
			if c != nil {
				nd.id, _ = c["node"].(string)
				if m, _ := c["members"].(float64); c["joined"] == true && int(m) == n {
					break
				}
			}
			if time.Now().After(deadline) {
				for _, o := range nodes {
					t.Logf("%s logs:\n%s", o.name, tail(o.logs.String(), 4000))
				}
				t.Fatalf("%s does not see %d members within 30 s: %v", nd.name, n, h)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// backendSessions scrapes a node's /metrics: the servers (by name) it holds a backend session of now.
func (n *clusterNode) backendSessions(t *testing.T) (map[string]bool, bool) {
	return scrapeSessions(http.DefaultClient, n.rest)
}

// scrapeSessions reads mcp_aggregator_backend_sessions from the /metrics of the REST listener at rest: the servers
// whose session the node holds now; false when the node does not answer (within the client's timeout) in whole.
func scrapeSessions(client *http.Client, rest string) (map[string]bool, bool) {
	resp, err := client.Get(rest + "/metrics")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := sessionLine.FindStringSubmatch(sc.Text()); m != nil && m[2] == "1" {
			out[m[1]] = true
		}
	}
	return out, sc.Err() == nil
}

// gauge sums the values of the metric lines of a node's /metrics that start with prefix.
func (n *clusterNode) gauge(t *testing.T, prefix string) int {
	t.Helper()
	resp, err := http.Get(n.rest + "/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", n.name, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return int(sum)
}

var sessionLine = regexp.MustCompile(`^mcp_aggregator_backend_sessions\{[^}]*server="([^"]+)"[^}]*\} (\S+)$`)

// call runs a tool through a node's REST API.
func (n *clusterNode) call(tool string, args map[string]any, timeout time.Duration) (int, string) {
	b, _ := json.Marshal(map[string]any{"name": tool, "arguments": args})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", n.rest+"/api/v1/tools/call", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// statuses reads every server's status through a node's REST API (name -> status).
func (n *clusterNode) statuses(t *testing.T) map[string]string {
	t.Helper()
	_, body := n.do("GET", "/servers?limit=1000", nil)
	out := map[string]string{}
	list, _ := body["servers"].([]any)
	for _, s := range list {
		m := s.(map[string]any)
		out[m["name"].(string)], _ = m["status"].(string)
	}
	return out
}

// TestClusterFailoverE2E is the cluster of issue 13 on loopback: etcd, PostgreSQL and three nodes. Ten servers
// (six stdio, four streamable HTTP) are registered through node 1; calls through node 3 reach servers owned
// elsewhere. Throughout, a sampler checks that each server has at most one backend session among the nodes and at
// most one stdio process. A node that owns servers is killed (SIGKILL): a call in flight to one of its servers
// gets 503 with context, and every server is CONNECTED again on the survivors within the bound, with no
// registration lost. Then another node leaves with SIGTERM while calls keep coming through the last one: its
// servers are handed over without a failed call.
func TestClusterFailoverE2E(t *testing.T) {
	etcd := peertest.StartEtcd(t)
	db := pgtest.NewDatabase(t)
	nodes := newCluster(t, 3, db, func(int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_ETCD=" + etcd}
	})
	n1, n3 := nodes[0], nodes[2]

	// Ten servers through node 1.
	cmd, args := peertest.EverythingStdio(t)
	echoBin := peertest.GoBinary(t, "./cmd/mcp-echo-backend")
	markers := map[string]string{}
	var names []string
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("stdio%d", i)
		markers[name] = fmt.Sprintf("cluster-%s-%d", name, time.Now().UnixNano())
		code, body := n1.do("POST", "/servers", map[string]any{"name": name, "transport_type": "STDIO",
			"connection_config": map[string]any{"command": cmd, "args": append(append([]string{}, args...), markers[name])}})
		if code != 201 {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
		names = append(names, name)
	}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("http%d", i)
		code, body := n1.do("POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": startEchoBackend(t, echoBin, 0), "allow_insecure_http": true}})
		if code != 201 {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
		names = append(names, name)
	}
	allConnected := func(n *clusterNode) bool {
		st := n.statuses(t)
		for _, name := range names {
			if st[name] != "CONNECTED" {
				return false
			}
		}
		return true
	}
	waitFor(t, 60*time.Second, "every server CONNECTED, seen through node 3", func() bool { return allConnected(n3) })
	callAll := func(n *clusterNode) {
		t.Helper()
		for _, name := range names {
			waitFor(t, 20*time.Second, "a call to "+name+" through "+n.name, func() bool {
				code, _ := n.call(name+".echo", map[string]any{"message": "hi " + name}, 10*time.Second)
				return code == 200
			})
		}
	}
	callAll(n3)

	// The gauges: each node reports its share; over the nodes, every server once.
	total := 0
	for _, n := range nodes {
		total += n.gauge(t, `mcp_aggregator_servers_total{`)
	}
	if total != len(names) {
		t.Errorf("mcp_aggregator_servers_total summed over the nodes = %d, want %d", total, len(names))
	}
	// The aggregated endpoint of node 3 lists every server's tools; the per-server endpoint of node 3 serves a
	// server another node owns (forwarded to it).
	sess := connectMCP(t, n3.mcp+"/mcp", nil)
	tools, err := sess.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, tl := range tools.Tools {
		listed[tl.Name] = true
	}
	for _, name := range names {
		if !listed[name+"__echo"] {
			t.Errorf("node 3's /mcp does not list %s__echo", name)
		}
	}
	// Node 3's /mcp gets a prompt and reads a resource of a server another node owns (a FeatureRequest across
	// nodes); the six copies of server-everything list the same URIs, so each is listed rewritten.
	owned3, _ := n3.backendSessions(t)
	for _, name := range names {
		if !strings.HasPrefix(name, "stdio") || owned3[name] {
			continue
		}
		waitFor(t, 20*time.Second, "prompts/get of "+name+" through node 3", func() bool {
			got, err := sess.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name + "__simple-prompt"})
			return err == nil && len(got.Messages) > 0
		})
		uri := routing.RewriteURI(name, "demo://resource/static/document/architecture.md")
		rr, err := sess.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(rr.Contents) == 0 || rr.Contents[0].URI != uri || rr.Contents[0].Text == "" {
			t.Fatalf("resources/read %s through node 3 (owned elsewhere): %v %+v", uri, err, rr)
		}
		break
	}
	sess.Close()
	// (An HTTP server: a per-server session over stdio runs a child process of its own, which the sampler below
	// would count beside the server's.)
	// Through node 3 when it does not own every HTTP server (placement may give it all four), else through another.
	var remote string
	var entry *clusterNode
	for _, n := range []*clusterNode{n3, nodes[1], n1} {
		held, _ := n.backendSessions(t)
		for _, name := range names {
			if !held[name] && strings.HasPrefix(name, "http") {
				remote, entry = name, n
				break
			}
		}
		if remote != "" {
			break
		}
	}
	if remote == "" {
		t.Fatalf("every node holds every HTTP server's session")
	}
	ps := connectMCP(t, entry.mcp+"/mcp/servers/"+remote, nil)
	res, err := ps.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "through " + entry.name}})
	if err != nil || res.IsError {
		t.Fatalf("per-server session on %s for %s (owned elsewhere): %v %+v", entry.name, remote, err, res)
	}
	ps.Close()

	// The sampler: at most one session and one stdio process per server, whatever happens.
	var violations atomic.Value
	violations.Store("")
	var alive sync.Map // node name -> *clusterNode
	for _, n := range nodes {
		alive.Store(n.name, n)
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	var samples atomic.Int64
	go func() {
		defer close(samplerDone)
		for {
			select {
			case <-stopSampler:
				return
			case <-time.After(100 * time.Millisecond):
			}
			// Scrapes of several processes are not one instant: a node counts as holding a session only when it
			// reports it in two rounds of scrapes, so that its holding spans the other nodes' first scrape (a
			// hand-over between two scrapes is not an overlap). Processes likewise must be there in two scans.
			var rounds [2]map[string]map[string]bool // node -> servers
			for i := range rounds {
				rounds[i] = map[string]map[string]bool{}
				alive.Range(func(_, v any) bool {
					n := v.(*clusterNode)
					if sess, ok := n.backendSessions(t); ok {
						rounds[i][n.name] = sess
					}
					return true
				})
			}
			holders := map[string][]string{}
			for node, sess := range rounds[0] {
				for server := range sess {
					if rounds[1][node][server] {
						holders[server] = append(holders[server], node)
					}
				}
			}
			for server, hs := range holders {
				if len(hs) > 1 && violations.Load() == "" {
					violations.Store(fmt.Sprintf("%s has sessions on %v at once", server, hs))
				}
			}
			for name, marker := range markers {
				first := peertest.ProcessesWithArg(marker)
				if len(first) < 2 {
					continue
				}
				var both []int
				for _, pid := range peertest.ProcessesWithArg(marker) {
					for _, f := range first {
						if f == pid {
							both = append(both, pid)
						}
					}
				}
				if len(both) > 1 && violations.Load() == "" {
					parents := make([]string, 0, len(both))
					for _, pid := range both {
						parents = append(parents, fmt.Sprintf("%d (parent %d)", pid, parentOf(pid)))
					}
					violations.Store(fmt.Sprintf("%s has %d stdio processes at once at %s: %v", name, len(both),
						time.Now().Format("15:04:05.000"), parents))
				}
			}
			samples.Add(1)
		}
	}()

	// Who owns what.
	owned := func(n *clusterNode) []string {
		sess, _ := n.backendSessions(t)
		var out []string
		for s := range sess {
			out = append(out, s)
		}
		return out
	}
	victim := nodes[1]
	if len(owned(victim)) == 0 {
		victim = nodes[0] // node 2 drew no server (rendezvous over random node ids): kill node 1 instead
	}
	victimServers := owned(victim)
	if len(victimServers) == 0 {
		t.Fatalf("neither node 1 nor node 2 owns a server: %v / %v", owned(nodes[0]), owned(nodes[1]))
	}
	t.Logf("killing %s (pid %d), which owns %v, at %s", victim.name, victim.cmd.Process.Pid, victimServers, time.Now().Format("15:04:05.000"))
	for _, n := range nodes {
		t.Logf("%s is pid %d", n.name, n.cmd.Process.Pid)
	}

	// A call in flight to one of the victim's servers, through node 3: 503 with context once the victim is gone.
	var inflight string
	for _, s := range victimServers {
		if strings.HasPrefix(s, "stdio") {
			inflight = s
		}
	}
	inflightDone := make(chan [2]any, 1)
	if inflight != "" {
		go func() {
			code, body := n3.call(inflight+".trigger-long-running-operation", map[string]any{"duration": 60, "steps": 60}, 90*time.Second)
			inflightDone <- [2]any{code, body}
		}()
		time.Sleep(500 * time.Millisecond)
	}

	alive.Delete(victim.name)
	killed := time.Now()
	victim.signal(syscall.SIGKILL, 5*time.Second)
	survivors := []*clusterNode{}
	for _, n := range nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	for _, n := range survivors {
		waitFor(t, 45*time.Second, "every server CONNECTED again, seen through "+n.name, func() bool { return allConnected(n) })
	}
	callAll(n3)
	recovered := time.Since(killed)
	t.Logf("every server CONNECTED and answering on the survivors %v after the SIGKILL", recovered.Round(10*time.Millisecond))
	if inflight != "" {
		select {
		case r := <-inflightDone:
			// The connection with the killed node breaks at once, usually before the membership sees it leave.
			if code, body := r[0].(int), r[1].(string); code != 503 || !strings.Contains(body, "left") && !strings.Contains(body, "connection with the cluster node serving the server broke") {
				t.Errorf("the call in flight to %s on the killed node: %d %s, want 503 saying the node left or its connection broke", inflight, code, r[1])
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the call in flight to %s did not end after its node was killed", inflight)
		}
	}
	for _, n := range survivors {
		if st := n.statuses(t); len(st) != len(names) {
			t.Fatalf("%s lists %d servers after the failover, want %d: %v", n.name, len(st), len(names), st)
		}
	}

	// The survivor that owns more servers leaves with SIGTERM (so there is something to hand over: placement may
	// have left the other with none) while calls keep coming through the other one.
	leaving, stayer := survivors[0], survivors[1]
	if len(owned(stayer)) > len(owned(leaving)) {
		leaving, stayer = stayer, leaving
	}
	var failed atomic.Value
	failed.Store("")
	var calls atomic.Int64
	stopCalls := make(chan struct{})
	callsDone := make(chan struct{})
	go func() {
		defer close(callsDone)
		for i := 0; ; i++ {
			select {
			case <-stopCalls:
				return
			default:
			}
			name := names[i%len(names)]
			code, body := stayer.call(name+".echo", map[string]any{"message": "during hand-over"}, 30*time.Second)
			calls.Add(1)
			if code != 200 && failed.Load() == "" {
				failed.Store(fmt.Sprintf("%s: %d %s", name, code, body))
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	leavingServers := owned(leaving)
	alive.Delete(leaving.name)
	started := time.Now()
	t.Logf("SIGTERM to %s at %s", leaving.name, started.Format("15:04:05.000"))
	took := leaving.signal(syscall.SIGTERM, 30*time.Second)
	waitFor(t, 30*time.Second, "every server CONNECTED on the last node", func() bool { return allConnected(stayer) })
	time.Sleep(500 * time.Millisecond)
	close(stopCalls)
	<-callsDone
	t.Logf("%s handed %d servers over and stopped in %v; %d calls through %s meanwhile; all CONNECTED %v after SIGTERM",
		leaving.name, len(leavingServers), took.Round(10*time.Millisecond), calls.Load(), stayer.name, time.Since(started).Round(10*time.Millisecond))
	if f := failed.Load().(string); f != "" {
		t.Errorf("a call failed during the hand-over: %s", f)
	}
	if !strings.Contains(leaving.logs.String(), "hand-over done") {
		t.Errorf("%s did not log its hand-over", leaving.name)
	}
	for _, l := range strings.Split(leaving.logs.String(), "\n") {
		if strings.Contains(l, "hand-over") || strings.Contains(l, "shutting down") || strings.Contains(l, "stopped") {
			t.Logf("%s: %s", leaving.name, l)
		}
	}

	// On a loaded machine a sample (two scrapes of every node, a process scan) takes long: keep sampling the
	// settled cluster until the sampler has its minimum, so that the check below counts samples, not load.
	for wait := time.Now().Add(20 * time.Second); samples.Load() < 10 && time.Now().Before(wait); {
		time.Sleep(100 * time.Millisecond)
	}
	close(stopSampler)
	<-samplerDone
	if v := violations.Load().(string); v != "" {
		t.Errorf("single ownership broken: %s", v)
	}
	if samples.Load() < 10 {
		t.Errorf("only %d samples taken", samples.Load())
	}
	if st := stayer.statuses(t); len(st) != len(names) {
		t.Fatalf("%s lists %d servers at the end, want %d", stayer.name, len(st), len(names))
	}
}

// TestClusterAutomanagedE2E: the zero-config membership (automanaged: the nodes probe a static list of health
// ports) on loopback, two nodes: a registration through one is callable through the other, and a node killed is
// replaced by the other for its servers.
func TestClusterAutomanagedE2E(t *testing.T) {
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i])}
	})
	echoBin := peertest.GoBinary(t, "./cmd/mcp-echo-backend")
	var names []string
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("am%d", i)
		code, body := nodes[0].do("POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": startEchoBackend(t, echoBin, 0), "allow_insecure_http": true}})
		if code != 201 {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
		names = append(names, name)
	}
	for _, name := range names {
		waitFor(t, 30*time.Second, "a call to "+name+" through node 2", func() bool {
			code, _ := nodes[1].call(name+".echo", map[string]any{"message": "x"}, 10*time.Second)
			return code == 200
		})
	}
	nodes[0].signal(syscall.SIGKILL, 5*time.Second)
	killed := time.Now()
	for _, name := range names {
		waitFor(t, 30*time.Second, "a call to "+name+" after node 1 died", func() bool {
			code, _ := nodes[1].call(name+".echo", map[string]any{"message": "y"}, 10*time.Second)
			return code == 200
		})
	}
	t.Logf("every server answering through node 2 %v after node 1 was killed", time.Since(killed).Round(10*time.Millisecond))
}

// TestClusterRefusesEmbeddedStoreAndGeneratedKey: a cluster node refuses to start without PostgreSQL or without an
// explicit credential key, saying why.
func TestClusterRefusesEmbeddedStoreAndGeneratedKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"embedded store", []string{"MCP_AGGREGATOR_CLUSTER=etcd", "DATABASE_URL="}, "needs DATABASE_URL"},
		{"no credential key", []string{"MCP_AGGREGATOR_CLUSTER=etcd", "DATABASE_URL=postgres://x@127.0.0.1:1/x", "MCP_CREDENTIAL_KEY="}, "needs MCP_CREDENTIAL_KEY"},
		{"listen on all interfaces without advertise", []string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_LISTEN=0.0.0.0:7946"}, "MCP_AGGREGATOR_CLUSTER_ADVERTISE"},
		{"unknown mode", []string{"MCP_AGGREGATOR_CLUSTER=consul"}, "want etcd, automanaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDaemon(t, "")
			d.env = append(d.env, tc.env...)
			out, code := d.runOnce("serve")
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output %q; want 2 and %q", code, out, tc.want)
			}
		})
	}
}

// parentOf is a process's parent pid (0 when it is gone).
func parentOf(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// runOnce runs the binary with the daemon's environment until it exits (within 20 s) and returns its output and
// exit code.
func (d *daemon) runOnce(args ...string) (string, int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = d.env
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		d.t.Fatalf("run %v: %v", args, err)
	}
	return string(out), 0
}
