package main

// The failover benchmark (issue 26): how long after a SIGKILL of the node that owns the most servers every server
// answers through every survivor, on etcd and on the automanaged provider. Run it with
//
//	go test -run '^$' -bench 'Failover' -benchtime 1x -timeout 30m ./cmd/aggregator/
//
// Each provider gets a cluster of three nodes (the daemons built without -race) on loopback, with six go-sdk echo
// backends registered through the first node; the node owning the most servers is killed, then replaced by a new
// node once every server answers again, failoverKills times in all.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// failoverKills is how many SIGKILLs each provider's run measures.
const failoverKills = 5

// BenchmarkFailover reports, per provider, over failoverKills kills: back-after-kill-ms (median and max), from the
// SIGKILL until every server has answered a call through each survivor; leave-seen-after-kill-ms (median), until
// the first survivor logged the node leaving the membership; leave-seen-by-all-ms (median and max), until every
// survivor had; evicted, how many kills a survivor confirmed dead and
// evicted (the rest were seen by the membership's own detection first); servers-moved (mean). Each kill is logged.
// With BENCH_FAILOVER_LOG_DIR set, each survivor's log is written there after each kill.
func BenchmarkFailover(b *testing.B) {
	bins := buildBenchBinaries(b)
	for _, provider := range []string{"etcd", "automanaged"} {
		b.Run(provider, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			db := pgtest.NewDatabase(b)
			raw := make([]byte, 32)
			_, _ = rand.Read(raw)
			key := base64.StdEncoding.EncodeToString(raw)
			envs := make([][]string, 3)
			switch provider {
			case "etcd":
				etcd := peertest.StartEtcd(b)
				for i := range envs {
					envs[i] = clusterEnv(etcd, db, key)
				}
			case "automanaged":
				health := []int{peertest.FreePort(b), peertest.FreePort(b), peertest.FreePort(b)}
				var peers []string
				for _, p := range health {
					peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p))
				}
				for i := range envs {
					envs[i] = []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + strings.Join(peers, ","),
						fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i]), "DATABASE_URL=" + db,
						"MCP_CREDENTIAL_KEY=" + key, "MCP_AGGREGATOR_LOG_LEVEL=info"}
				}
			}
			nodes := make([]*benchNode, 3)
			for i := range nodes {
				nodes[i] = startBenchNode(b, bins.aggregator, envs[i])
			}
			for _, n := range nodes {
				n.membersSeen(b, len(nodes))
			}
			client := benchHTTPClient()
			names := make([]string, 6)
			for i := range names {
				names[i] = fmt.Sprintf("f%d", i)
				id := registerHTTPServer(b, nodes[0].benchDaemon, client, names[i], startEchoBackend(b, bins.echo, 0))
				waitTools(b, nodes[0].benchDaemon, client, id, 1)
			}
			var back, seen, seenAll []float64
			evicted, moved := 0, 0
			for kill := 1; kill <= failoverKills; kill++ {
				for _, n := range nodes {
					// (a call may fail while a node that just joined connects with the others: retried)
					allAnswer(b, client, n, names, 60*time.Second)
				}
				vi := 0
				for i, n := range nodes {
					if len(n.owned(b)) > len(nodes[vi].owned(b)) {
						vi = i
					}
				}
				victim := nodes[vi]
				var survivors []*benchNode
				for _, n := range nodes {
					if n != victim {
						survivors = append(survivors, n)
					}
				}
				owned := len(victim.owned(b))
				moved += owned
				victimID := nodeIDOf(b, victim)
				killed := time.Now()
				_ = victim.cmd.Process.Kill()
				<-victim.done
				var answered []float64
				for _, n := range survivors {
					allAnswer(b, client, n, names, 60*time.Second)
					answered = append(answered, ms(time.Since(killed)))
				}
				took := ms(time.Since(killed))
				if dir := os.Getenv("BENCH_FAILOVER_LOG_DIR"); dir != "" {
					// Each survivor's whole log, to read where the time went (the kill's UTC time in the first line).
					for i, n := range survivors {
						f := filepath.Join(dir, fmt.Sprintf("%s-kill%d-survivor%d.log", provider, kill, i+1))
						head := fmt.Sprintf("killed %s at %s; every server answered through this survivor %.0f ms after\n",
							victimID, killed.UTC().Format(time.RFC3339Nano), answered[i])
						if err := os.WriteFile(f, []byte(head+n.logs.String()), 0o644); err != nil {
							b.Logf("failover log: %v", err)
						}
					}
				}
				back = append(back, took)
				first, last := time.Time{}, time.Time{}
				ev, evictors, told, seenBy := false, 0, 0, 0
				for _, n := range survivors {
					logs := n.logs.String()
					if t, ok := leftSeenAt(logs, victimID); ok {
						seenBy++
						if first.IsZero() || t.Before(first) {
							first = t
						}
						if t.After(last) {
							last = t
						}
					}
					for _, l := range strings.Split(logs, "\n") {
						if strings.Contains(l, "member confirmed dead") && strings.Contains(l, victimID) {
							ev = true
							evictors++
							if strings.Contains(l, "another member found it dead") {
								told++ // upon a peer's word (MemberDead), not a broken link of its own
							}
							break
						}
					}
				}
				if ev {
					evicted++
				}
				leave, leaveAll := -1.0, -1.0
				if !first.IsZero() {
					leave = ms(first.Sub(killed))
					seen = append(seen, leave)
				}
				if seenBy == len(survivors) {
					leaveAll = ms(last.Sub(killed))
					seenAll = append(seenAll, leaveAll)
				}
				if leaveAll < 0 || leaveAll-leave > 300 {
					// A survivor learnt of the death late: what each survivor logged about the dead node.
					for i, n := range survivors {
						for _, l := range strings.Split(n.logs.String(), "\n") {
							if strings.Contains(l, victimID) {
								b.Logf("  survivor %d: %.400s", i+1, l)
							}
						}
					}
				}
				b.Logf("kill %d: %d servers moved, every server answering through both survivors %.0f ms after the kill; leave seen after %.0f ms (by every survivor: %.0f ms); evicted %v (survivors that evicted it: %d, of which upon a peer's word: %d)",
					kill, owned, took, leave, leaveAll, ev, evictors, told)
				if kill < failoverKills {
					// A new node (a new member) takes the dead one's place; new servers are not moved to it
					// (placement is sticky), so the next kill takes the survivor that owns the most.
					nodes[vi] = startBenchNode(b, bins.aggregator, envs[vi])
					for _, n := range nodes {
						n.membersSeen(b, len(nodes))
					}
				}
			}
			b.ReportMetric(median(back), "back-after-kill-ms-median")
			b.ReportMetric(slices.Max(back), "back-after-kill-ms-max")
			if len(seen) > 0 {
				b.ReportMetric(median(seen), "leave-seen-after-kill-ms-median")
			}
			if len(seenAll) > 0 {
				b.ReportMetric(median(seenAll), "leave-seen-by-all-ms-median")
				b.ReportMetric(slices.Max(seenAll), "leave-seen-by-all-ms-max")
			}
			b.ReportMetric(float64(evicted), "evicted")
			b.ReportMetric(float64(moved)/failoverKills, "servers-moved")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
