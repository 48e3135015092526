package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// TestClusterTaskStatusAfterFeedBreakE2E: two nodes on PostgreSQL, node B's way to the database through a proxy the
// test cuts. Alice's task runs on node A (server-everything's simulate-research-query waiting for her answer), and
// her 2025-11-25 session on B hears it input_required through the feed. Then B loses the database (its feed
// connection with it), and the task is cancelled through A: the notice is sent while B does not listen, and B's
// session hears nothing. Once B's way back is restored, its feed reconnects and B catches up from the store: the
// session hears the task cancelled.
func TestClusterTaskStatusAfterFeedBreakE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	db := pgtest.NewDatabase(t)
	proxy, viaProxy := pgtest.NewProxy(t, db)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		env := []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i]),
			// Leases outlive the break: the servers stay where they are.
			"MCP_AGGREGATOR_LEASE_TTL=15",
			"MCP_AGGREGATOR_ADMIN_TOKENS=ops:" + tcAdmin, "MCP_AGGREGATOR_CLIENT_TOKENS=alice:" + tcAlice + ",bob:" + tcBob}
		if i == 1 {
			env = append(env, "DATABASE_URL="+viaProxy) // the last value of a variable wins
		}
		return env
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s logs:\n%s", n.name, tail(nodeLog(n), 6000))
			}
		}
	})
	a, b := nodes[0], nodes[1]
	cmd, args := peertest.EverythingStdio(t)
	if code, s := a.doAs(tcAdmin, "POST", "/servers", map[string]any{"name": "every", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args}}); code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, s)
	}
	urlA, urlB := a.mcp+"/mcp", b.mcp+"/mcp"
	const tool = "every__simulate-research-query"

	aliceB := openMCPAs(t, urlB, tcAlice)
	if res, rerr := aliceB.post("tasks/list", map[string]any{}); rerr != nil { // one of alice's sessions on B
		t.Fatalf("tasks/list: %s %v", res, rerr)
	}
	hears := listenStatus(t, aliceB)

	id := startAmbiguousTaskV2(t, urlA, tcAlice, a.name, tool)
	waitFor(t, 60*time.Second, "alice's session on "+b.name+" hearing the task input_required", func() bool {
		return slices.Contains(hears.statuses(id), "input_required")
	})

	proxy.Cut()
	if res, rerr := v2Post(t, urlA, tcAlice, "tasks/cancel", map[string]any{"taskId": id}); rerr != nil {
		t.Fatalf("tasks/cancel through %s: %s %v", a.name, res, rerr)
	}
	// The notice went out while B was cut off: give it the time it takes through a live feed, then check B missed it.
	time.Sleep(2 * time.Second)
	if heard := hears.statuses(id); slices.Contains(heard, "cancelled") {
		t.Fatalf("B heard %v while cut off from the database: the break did not drop the notice", heard)
	}
	proxy.Restore()
	waitFor(t, 30*time.Second, "alice's session on "+b.name+" hearing the task cancelled after the feed came back", func() bool {
		heard := hears.statuses(id)
		return len(heard) > 0 && heard[len(heard)-1] == "cancelled"
	})
}
