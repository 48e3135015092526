package main

// The failover benchmark (issue 26): how long after a SIGKILL of the node that owns the most servers every server
// answers through every survivor, on etcd and on the automanaged provider. Run it with
//
//	go test -run '^$' -bench 'Failover' -benchtime 1x -count 3 -timeout 30m ./cmd/aggregator/
//
// Each run starts a fresh cluster of three nodes (the daemons built without -race) on loopback, with six go-sdk echo
// backends registered through node 1.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// BenchmarkFailover reports, per provider: back-after-kill-ms, from the SIGKILL until every server has answered a
// call through each survivor; leave-seen-after-kill-ms, until the first survivor saw the node leave the membership
// (from its log); evicted (1 when a survivor confirmed the death and evicted the node, 0 when the membership's own
// detection saw it first); servers-moved.
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
			for _, n := range nodes {
				for _, name := range names {
					checkRESTEcho(b, client, n.call, name+".echo")
				}
			}
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
			b.ReportMetric(float64(len(victim.owned(b))), "servers-moved")
			victimID := nodeIDOf(b, victim)
			killed := time.Now()
			_ = victim.cmd.Process.Kill()
			<-victim.done
			for _, n := range survivors {
				allAnswer(b, client, n, names, 60*time.Second)
			}
			back := time.Since(killed)
			b.ReportMetric(ms(back), "back-after-kill-ms")
			first := time.Time{}
			for _, n := range survivors {
				if seen, ok := leftSeenAt(n.logs.String(), victimID); ok && (first.IsZero() || seen.Before(first)) {
					first = seen
				}
			}
			if !first.IsZero() {
				b.ReportMetric(ms(first.Sub(killed)), "leave-seen-after-kill-ms")
			}
			evicted := 0.0
			for _, n := range survivors {
				if strings.Contains(n.logs.String(), "member confirmed dead") {
					evicted = 1
				}
			}
			b.ReportMetric(evicted, "evicted")
		})
	}
}
