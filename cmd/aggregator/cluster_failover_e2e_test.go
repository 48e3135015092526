package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// Fast failover (issue 26) with the binary: a node killed (SIGKILL) is confirmed dead by the survivors as soon as
// its connections break (its remoting port refuses connections) and evicted from the membership, instead of the
// survivors waiting for the membership's own detection (etcd's lease, automanaged's next health round). How fast
// is measured by BenchmarkFailover; these tests check what must hold.

// evictedBy lists the nodes that logged confirming the member id dead and evicting it.
func evictedBy(nodes []*clusterNode, id string) []string {
	var out []string
	for _, n := range nodes {
		for _, l := range strings.Split(n.logs.String(), "\n") {
			if strings.Contains(l, "member confirmed dead") && strings.Contains(l, "member="+id) {
				out = append(out, n.name)
				break
			}
		}
	}
	return out
}

// TestClusterKillOwnerE2E: three nodes (etcd, and automanaged), three stdio and three HTTP servers, calls through
// every node and the single-ownership sampler throughout. The node that serves the most servers is killed: a
// survivor confirms it dead and evicts it (the fast path, not the membership's timeout), every server answers
// through every survivor, no server ever has two sessions or two stdio processes at a sample, and every call that
// failed is a 503 (with Retry-After, or saying it was in flight), none a 500.
func TestClusterKillOwnerE2E(t *testing.T) {
	for _, provider := range []string{"etcd", "automanaged"} {
		t.Run(provider, func(t *testing.T) {
			db := pgtest.NewDatabase(t)
			var membership func(i int) []string
			switch provider {
			case "etcd":
				etcd := peertest.StartEtcd(t)
				membership = func(int) []string {
					return []string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_ETCD=" + etcd}
				}
			case "automanaged":
				health := []int{peertest.FreePort(t), peertest.FreePort(t), peertest.FreePort(t)}
				peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", health[0], health[1], health[2])
				membership = func(i int) []string {
					return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
						fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i])}
				}
			}
			nodes := newCluster(t, 3, db, membership)
			t.Cleanup(func() {
				if t.Failed() {
					for _, n := range nodes {
						t.Logf("%s logs:\n%s", n.name, nodeLog(n))
					}
				}
			})
			r := newOutageRig(t, nodes)
			r.checkProcs.Store(true)
			r.start()
			// The victim is the node that serves the most servers, read once every node answered its scrape and
			// every server's session was seen.
			var victim *clusterNode
			most := 0
			waitFor(t, 30*time.Second, "every server's session seen on some node", func() bool {
				victim, most = nil, 0
				total := 0
				for _, n := range nodes {
					sess, ok := r.sessions(n)
					if !ok {
						return false
					}
					total += len(sess)
					if victim == nil || len(sess) > most {
						victim, most = n, len(sess)
					}
				}
				return total == len(r.names)
			})
			var survivors []*clusterNode
			for _, n := range nodes {
				if n != victim {
					survivors = append(survivors, n)
				}
			}
			time.Sleep(500 * time.Millisecond) // calls under way when the node dies
			t.Logf("killing %s (%s), which serves %d servers", victim.name, victim.id, most)
			r.paused.Store(victim.name, true)
			victim.signal(syscall.SIGKILL, 5*time.Second)
			killed := time.Now()
			for _, n := range survivors {
				for _, name := range r.names {
					waitFor(t, 30*time.Second, "a call to "+name+" through "+n.name+" after the kill", func() bool {
						return r.call(n, name).code == 200
					})
				}
			}
			t.Logf("every server answering through every survivor %v after the kill", time.Since(killed).Round(10*time.Millisecond))
			if by := evictedBy(survivors, victim.id); len(by) == 0 {
				t.Errorf("no survivor confirmed %s dead and evicted it: the failover waited for the membership's own detection", victim.id)
			}
			// The sampler and the callers keep going on the survivors for a few more samples.
			after := r.samples.Load()
			waitFor(t, 60*time.Second, "ten more samples", func() bool { return r.samples.Load() >= max(after+10, 10) })
			r.finish()
			// A call to the killed node itself fails with its connection (it is the client's to retry elsewhere);
			// every call through a survivor is answered, a failure being a 503 saying why.
			total, failed := 0, 0
			for _, a := range r.since(time.Time{}) {
				if a.node == victim.name {
					continue
				}
				total++
				if a.code == 200 {
					continue
				}
				failed++
				if a.code != 503 || a.retryAfter == "" && !strings.Contains(a.body, `"in_progress"`) {
					t.Errorf("a failed call through a survivor must be 503 with Retry-After or saying it was in flight: %s", a)
				} else if failed <= 5 {
					t.Logf("failed call: %s", a)
				}
			}
			t.Logf("%d calls through the survivors, %d failed", total, failed)
		})
	}
}
