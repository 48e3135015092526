package main

// Cluster benchmarks: real daemon processes (built without -race) forming a cluster on loopback with etcd and
// PostgreSQL, go-sdk echo backends, the load generated here. Run them with
//
//	go test -run '^$' -bench 'Cluster' -benchtime 1x -timeout 30m ./cmd/aggregator/
//
// Every process (etcd, PostgreSQL, the nodes, the backends, the load generator) shares this machine's cores:
// throughput across nodes says how the cluster spends CPU, not how it scales across machines.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// benchNode is one node of a benchmark cluster.
type benchNode struct {
	*benchDaemon
	rest string
	cmd  *exec.Cmd
	done chan struct{}
}

// startBenchNode runs `aggregator serve` with extra environment (cluster settings) and waits until it answers.
func startBenchNode(b *testing.B, bin string, env []string) *benchNode {
	b.Helper()
	port, mcpPort, clusterPort := peertest.FreePort(b), peertest.FreePort(b), peertest.FreePort(b)
	rest := fmt.Sprintf("http://127.0.0.1:%d", port)
	n := &benchNode{benchDaemon: &benchDaemon{api: rest + "/api/v1/aggregator", call: rest + "/api/v1/tools/call",
		mcp: fmt.Sprintf("http://127.0.0.1:%d/mcp", mcpPort), logs: &syncBuf{}}, rest: rest, done: make(chan struct{})}
	n.cmd = exec.Command(bin, "serve")
	n.cmd.Env = append(append(os.Environ(),
		fmt.Sprintf("MCP_AGGREGATOR_LISTEN=127.0.0.1:%d", port),
		fmt.Sprintf("MCP_AGGREGATOR_MCP_LISTEN=127.0.0.1:%d", mcpPort),
		fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_LISTEN=127.0.0.1:%d", clusterPort),
		"MCP_AGGREGATOR_DATA_DIR="+b.TempDir(),
		"MCP_AGGREGATOR_LOG_FORMAT=json",
		"MCP_AGGREGATOR_RATE_LIMIT=0",
		"MCP_AGGREGATOR_METRICS_OPEN=true",
	), env...)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		b.Fatalf("start node: %v", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	b.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(20 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	})
	waitHTTP(b, n.api+"/health")
	return n
}

// owned is the set of servers (by name) whose session this node holds, from its metrics.
func (n *benchNode) owned(b *testing.B) map[string]bool {
	b.Helper()
	out, _ := scrapeSessions(http.DefaultClient, n.rest)
	return out
}

// membersSeen waits until the node reports n members.
func (n *benchNode) membersSeen(b *testing.B, want int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, h, err := restJSON(context.Background(), http.DefaultClient, "GET", n.api+"/health", nil)
		if c, _ := h["cluster"].(map[string]any); err == nil && c != nil && c["joined"] == true {
			if m, _ := c["members"].(float64); int(m) == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("node %s does not see %d members", n.rest, want)
}

// clusterEnv is the environment of a cluster node on etcd with a shared key.
func clusterEnv(etcd, db, key string) []string {
	env := []string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_ETCD=" + etcd, "DATABASE_URL=" + db,
		"MCP_CREDENTIAL_KEY=" + key, "MCP_AGGREGATOR_LOG_LEVEL=info"}
	// CLUSTER_NODE_GOMAXPROCS gives each node that many Ps: three nodes on this machine's cores each believe they
	// have all of them (an experiment of BENCHMARKS.md, "Scale-out per call").
	if p := os.Getenv("CLUSTER_NODE_GOMAXPROCS"); p != "" {
		env = append(env, "GOMAXPROCS="+p)
	}
	if l := os.Getenv("CLUSTER_NODE_GOMEMLIMIT"); l != "" {
		env = append(env, "GOMEMLIMIT="+l)
	}
	return env
}

// roundRobin spreads calls over callers (one per node), in turn.
func roundRobin(callers []caller) caller {
	var next atomic.Uint64
	return func(ctx context.Context) error {
		return callers[next.Add(1)%uint64(len(callers))](ctx)
	}
}

// BenchmarkCluster measures what the cluster adds and what it recovers from, on one machine:
//   - hop: one caller, calls to one server through the node that owns it (owner) and through another (nonowner):
//     the cost of the cross-node hop (protoactor remoting);
//   - throughput: 32 callers over 6 servers, round-robin over 3 nodes, against the same load on one node (no
//     cluster) with the same servers: calls/s and their ratio;
//   - failover: SIGKILL of the node that owns most servers; how long until every server answers through a
//     survivor, from the kill and from the moment a survivor saw the node leave;
//   - handover: SIGTERM of another node while calls keep coming; how long until every server answers from the
//     last node, and how many calls failed.
func BenchmarkCluster(b *testing.B) {
	bins := buildBenchBinaries(b)
	etcd := peertest.StartEtcd(b)
	db := pgtest.NewDatabase(b)
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	key := base64.StdEncoding.EncodeToString(raw)
	const servers = 6
	urls := make([]string, servers)
	for i := range urls {
		urls[i] = startEchoBackend(b, bins.echo, 0)
	}
	client := benchHTTPClient()

	// One node, no cluster, for the throughput baseline.
	var single cpuMeasure
	b.Run("throughput/1node", func(b *testing.B) {
		d := startBenchDaemon(b, bins.aggregator, "warn")
		var callers []caller
		for i, u := range urls {
			name := fmt.Sprintf("s%d", i)
			id := registerHTTPServer(b, d, client, name, u)
			waitTools(b, d, client, id, 1)
			callers = append(callers, restCaller(client, d.call, name+".echo"))
		}
		single = measureCPU(b, roundRobin(callers), []int{d.pid})
		single.report(b)
	})

	nodes := make([]*benchNode, 3)
	for i := range nodes {
		nodes[i] = startBenchNode(b, bins.aggregator, clusterEnv(etcd, db, key))
	}
	for _, n := range nodes {
		n.membersSeen(b, len(nodes))
	}
	names := make([]string, servers)
	for i, u := range urls {
		names[i] = fmt.Sprintf("c%d", i)
		id := registerHTTPServer(b, nodes[0].benchDaemon, client, names[i], u)
		waitTools(b, nodes[0].benchDaemon, client, id, 1)
	}
	// Every server callable through every node.
	for _, n := range nodes {
		for _, name := range names {
			checkRESTEcho(b, client, n.call, name+".echo")
		}
	}

	b.Run("hop", func(b *testing.B) {
		var owner, other *benchNode
		var server string
		for _, name := range names {
			for _, n := range nodes {
				if n.owned(b)[name] {
					owner, server = n, name
				}
			}
			if owner != nil {
				break
			}
		}
		for _, n := range nodes {
			if n != owner {
				other = n
				break
			}
		}
		if owner == nil || other == nil {
			b.Fatal("no owner found")
		}
		b.Run("owner", func(b *testing.B) { measure(b, routingLoads()[0], restCaller(client, owner.call, server+".echo")) })
		b.Run("nonowner", func(b *testing.B) { measure(b, routingLoads()[0], restCaller(client, other.call, server+".echo")) })
	})

	b.Run("throughput/3nodes", func(b *testing.B) {
		var callers []caller
		for i, name := range names {
			callers = append(callers, restCaller(client, nodes[i%len(nodes)].call, name+".echo"))
		}
		c := measureCPU(b, roundRobin(callers), pidsOf(nodes))
		c.report(b)
		if single.perCall > 0 {
			b.ReportMetric(c.res.Rate()/single.res.Rate(), "ratio-to-1node")
			c.project(b, single, len(nodes))
		}
	})

	// The same load, each server's calls sent to the node that owns it (what a load balancer aware of the owners
	// would do): the cluster's cost without the hop.
	b.Run("throughput/3nodes-owner", func(b *testing.B) {
		var callers []caller
		for _, name := range names {
			for _, n := range nodes {
				if n.owned(b)[name] {
					callers = append(callers, restCaller(client, n.call, name+".echo"))
				}
			}
		}
		if len(callers) != len(names) {
			b.Fatalf("found the owners of %d of %d servers", len(callers), len(names))
		}
		c := measureCPU(b, roundRobin(callers), pidsOf(nodes))
		c.report(b)
		if single.perCall > 0 {
			b.ReportMetric(c.res.Rate()/single.res.Rate(), "ratio-to-1node")
			c.project(b, single, len(nodes))
		}
	})

	// The per-server endpoint through HAProxy running deploy/haproxy.cfg: four sessions per server (24), the load
	// spread over them; without the owner routing (the use-server lines left out: a session stays on the node that
	// took its initialize, and that node forwards each request to the owner) and with it (every session on the
	// owner). forwarded-share is the share of the nodes' per-server requests that arrived at a node that does not
	// own the server (each forwarded once more to the owner, which counts it too).
	// The REST variants: 32 callers over the 6 servers' echo through the balancer's REST frontend, round robin over
	// the nodes (two calls in three take the hop) or sent to each tool name's owner.
	for _, variant := range []struct {
		name       string
		owner, api bool
	}{{"throughput/haproxy-perserver", false, false}, {"throughput/haproxy-perserver-owner", true, false},
		{"throughput/haproxy-rest", false, true}, {"throughput/haproxy-rest-owner", true, true}} {
		b.Run(variant.name, func(b *testing.B) {
			var rests, restAddrs, mcpAddrs []string
			for _, n := range nodes {
				rests = append(rests, n.rest)
				restAddrs = append(restAddrs, strings.TrimPrefix(n.rest, "http://"))
				mcpAddrs = append(mcpAddrs, strings.TrimSuffix(strings.TrimPrefix(n.mcp, "http://"), "/mcp"))
			}
			mcpBind, restBind := fmt.Sprintf("127.0.0.1:%d", peertest.FreePort(b)), fmt.Sprintf("127.0.0.1:%d", peertest.FreePort(b))
			cfg := peertest.LoopbackHAProxyConfig(b, restAddrs, mcpAddrs, restBind, mcpBind)
			if !variant.owner {
				var kept []string
				for _, l := range strings.Split(cfg, "\n") {
					if !strings.Contains(l, "use-server aggregator-") {
						kept = append(kept, l)
					}
				}
				cfg = strings.Join(kept, "\n")
			}
			cfg = strings.Replace(cfg, "log stdout format raw local0 info", "", 1) // no request log under load
			peertest.StartHAProxy(b, cfg, mcpBind, restBind)
			var callers []caller
			if variant.api {
				for _, name := range names {
					// One call per name, which teaches the balancer its owner when it learns.
					checkRESTEcho(b, client, "http://"+restBind+"/api/v1/tools/call", name+".echo")
					callers = append(callers, restCaller(client, "http://"+restBind+"/api/v1/tools/call", name+".echo"))
				}
			}
			if !variant.api {
				if variant.owner {
					// One request per path teaches the balancer its owner.
					for _, name := range names {
						resp, err := client.Get("http://" + mcpBind + "/mcp/servers/" + name)
						if err != nil {
							b.Fatal(err)
						}
						resp.Body.Close()
					}
				}
				for _, name := range names {
					for range 4 {
						sess := connectMCP(b, "http://"+mcpBind+"/mcp/servers/"+name, nil)
						checkEcho(b, sess, "echo")
						callers = append(callers, mcpCaller(sess, "echo"))
					}
				}
			}
			route := mcpproxy.Prefix + "{name}"
			if variant.api {
				route = "/api/v1/tools/call"
			}
			reqBefore := settledRequests(b, rests, route)
			var before time.Duration
			for _, n := range nodes {
				before += cpuOf(n.cmd.Process.Pid)
			}
			// Every call counts here, the load's warm-up included, as it does in the nodes' CPU and request counts.
			var made atomic.Int64
			rr := roundRobin(callers)
			measure(b, routingLoads()[2], func(ctx context.Context) error { made.Add(1); return rr(ctx) })
			var after time.Duration
			for _, n := range nodes {
				after += cpuOf(n.cmd.Process.Pid)
			}
			reqAfter := settledRequests(b, rests, route)
			total := 0
			for i := range nodes {
				total += reqAfter[i] - reqBefore[i]
			}
			calls := int(made.Load())
			if !variant.api {
				// A call is one request at the node that receives it, and one more at the owner when it was
				// forwarded. (A REST call's hop is not an HTTP request: not counted here.)
				b.ReportMetric(float64(total-calls)/float64(calls), "forwarded-share")
			}
			perCall := float64(after-before) / float64(calls)
			b.ReportMetric(perCall/float64(time.Microsecond), "daemon-cpu-us/call")
		})
	}

	// Failover: kill the node owning most servers.
	victim := nodes[0]
	for _, n := range nodes {
		if len(n.owned(b)) > len(victim.owned(b)) {
			victim = n
		}
	}
	var survivors []*benchNode
	for _, n := range nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	b.Run("failover/sigkill", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(len(victim.owned(b))), "servers-moved")
		victimID := nodeIDOf(b, victim)
		killed := time.Now()
		_ = victim.cmd.Process.Kill()
		<-victim.done
		allAnswer(b, client, survivors[0], names, 60*time.Second)
		back := time.Since(killed)
		seen, ok := leftSeenAt(survivors[0].logs.String(), victimID)
		b.ReportMetric(ms(back), "back-after-kill-ms")
		if ok {
			b.ReportMetric(ms(killed.Add(back).Sub(seen)), "back-after-leave-seen-ms")
			b.ReportMetric(ms(seen.Sub(killed)), "leave-seen-after-kill-ms")
		}
	})

	b.Run("handover/sigterm", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		leaving, last := survivors[0], survivors[1]
		b.ReportMetric(float64(len(leaving.owned(b))), "servers-moved")
		var failed, calls atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					err := restCaller(client, last.call, names[i%len(names)]+".echo")(ctx)
					cancel()
					calls.Add(1)
					if err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		_ = leaving.cmd.Process.Signal(syscall.SIGTERM)
		<-leaving.done
		exited := time.Since(start)
		allAnswer(b, client, last, names, 60*time.Second)
		back := time.Since(start)
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
		b.ReportMetric(ms(exited), "node-exit-ms")
		b.ReportMetric(ms(back), "all-answering-ms")
		b.ReportMetric(float64(calls.Load()), "calls")
		b.ReportMetric(float64(failed.Load()), "failed-calls")
	})
}

// cpuOf is the CPU time (user + system) a process has used, from /proc/<pid>/stat (0 when unreadable).
// cpuMeasure is a saturating load's calls and what they cost the daemons: CPU per measured call, and the CPU the
// daemons spend without calls (leases, heartbeats, the membership, the collector), measured between the warm-up and
// the calls.
type cpuMeasure struct {
	res     loadResult
	perCall float64 // ns of the daemons' CPU per measured call, idle share included
	idle    float64 // ns of the daemons' CPU per second without calls, all of them together
	elapsed time.Duration
}

// idleFor is how long the daemons' CPU is read without calls.
const idleFor = 3 * time.Second

// measureCPU warms the daemons (pids) up with the saturating load's warm-up, reads their CPU over idleFor without
// calls, then measures the load's calls and the CPU they took (the warm-up's calls not counted in either).
func measureCPU(b *testing.B, call caller, pids []int) cpuMeasure {
	b.Helper()
	closedLoop(call, saturateCallers, 4*warmupCalls, closedLimit)
	time.Sleep(200 * time.Millisecond) // the warm-up's last answers
	cpu := func() (t time.Duration) {
		for _, p := range pids {
			t += cpuOf(p)
		}
		return t
	}
	idle0, idleAt := cpu(), time.Now()
	time.Sleep(idleFor)
	idle := float64(cpu()-idle0) / time.Since(idleAt).Seconds()
	before, start := cpu(), time.Now()
	b.ResetTimer()
	res := closedLoop(call, saturateCallers, saturateMaxCalls, saturateFor)
	elapsed := time.Since(start)
	calls := len(res.Lat) + res.Errs
	if calls == 0 {
		b.Fatal("no call was made")
	}
	return cpuMeasure{res: res, perCall: float64(cpu()-before) / float64(calls), idle: idle, elapsed: elapsed}
}

// net is the CPU per call less the idle share: what each more call costs.
func (c cpuMeasure) net() float64 {
	return c.perCall - c.idle*c.elapsed.Seconds()/float64(len(c.res.Lat)+c.res.Errs)
}

// report reports the load's figures and its CPU.
func (c cpuMeasure) report(b *testing.B) {
	b.StopTimer()
	reportLoad(b, c.res)
	b.ReportMetric(c.perCall/float64(time.Microsecond), "daemon-cpu-us/call")
	b.ReportMetric(c.net()/float64(time.Microsecond), "daemon-net-cpu-us/call")
	b.ReportMetric(c.idle/float64(time.Millisecond), "daemon-idle-cpu-ms/s")
}

// project reports what nodes machines like this one would serve against one machine running one node (single),
// from the CPU per call. projected-ratio-3-machines counts every CPU second the daemons spent during the calls
// against the calls; the -net variant gives each machine its whole CPU less its node's idle CPU, spent at the cost
// of each more call (on one machine the nodes share the cores, so their idle CPU would otherwise count as a cost
// of the calls, and three times over).
func (c cpuMeasure) project(b *testing.B, single cpuMeasure, nodes int) {
	b.ReportMetric(float64(nodes)*single.perCall/c.perCall, "projected-ratio-3-machines")
	if single.net() <= 0 || c.net() <= 0 {
		return
	}
	capacity := float64(runtime.NumCPU()) * float64(time.Second) // CPU ns per second of one machine
	one := (capacity - single.idle) / single.net()
	each := (capacity - c.idle/float64(nodes)) / c.net()
	b.ReportMetric(float64(nodes)*each/one, "projected-ratio-3-machines-net")
}

// pidsOf is the nodes' process ids.
func pidsOf(nodes []*benchNode) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n.cmd.Process.Pid
	}
	return out
}

func cpuOf(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// allAnswer waits until every server answers a call through the node.
func allAnswer(b *testing.B, client *http.Client, n *benchNode, names []string, within time.Duration) {
	b.Helper()
	deadline := time.Now().Add(within)
	for _, name := range names {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := restCaller(client, n.call, name+".echo")(ctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s does not answer through %s: %v", name, n.rest, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// nodeIDOf reads a node's id from /health.
func nodeIDOf(b *testing.B, n *benchNode) string {
	b.Helper()
	_, h, err := restJSON(context.Background(), http.DefaultClient, "GET", n.api+"/health", nil)
	c, _ := h["cluster"].(map[string]any)
	if err != nil || c == nil {
		b.Fatalf("node id of %s: %v %v", n.rest, err, h)
	}
	id, _ := c["node"].(string)
	return id
}

// leftSeenAt finds when a node logged the membership change in which member id left.
func leftSeenAt(logs, id string) (time.Time, bool) {
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Left []string  `json:"left"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "cluster membership changed" {
			continue
		}
		for _, left := range l.Left {
			if left == id {
				return l.Time, true
			}
		}
	}
	return time.Time{}, false
}
