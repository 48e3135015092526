package placement_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/persistence"
)

// Every node makes the same rendezvous choice for a server nobody holds, and a lease names the member that serves
// its server; once that member leaves, its live lease may be taken over (it is named as dead).
func ExampleMembers() {
	members := map[string]string{"node-a": "10.0.0.1:4000", "node-b": "10.0.0.2:4000", "node-c": "10.0.0.3:4000"}
	a := placement.NewMembers("node-a", members["node-a"])
	b := placement.NewMembers("node-b", members["node-b"])
	a.Update(members)
	b.Update(members)
	onA, _ := a.Choose("server-1")
	onB, _ := b.Choose("server-1")
	fmt.Println("same choice on every node:", onA == onB)

	now := time.Now()
	lease := persistence.Lease{ServerID: "server-1", Owner: "node-c", ExpiresAt: now.Add(10 * time.Second)}
	holder, dead, _ := a.Holder(lease, now)
	fmt.Printf("holder %q, dead %q\n", holder, dead)

	delete(members, "node-c")
	a.Update(members)
	holder, dead, _ = a.Holder(lease, now)
	fmt.Printf("after node-c left: holder %q, dead %q\n", holder, dead)
	// Output:
	// same choice on every node: true
	// holder "node-c", dead ""
	// after node-c left: holder "", dead "node-c"
}

// A server actor asks for its server's lease when it activates; the verdict says what it does with the answer. A
// lease another member holds sends the caller there; one a process outside the cluster holds (`aggregator stdio`)
// makes the actor stand by.
func ExampleDecide() {
	members := placement.NewMembers("node-a", "10.0.0.1:4000")
	members.Update(map[string]string{"node-a": "10.0.0.1:4000", "node-b": "10.0.0.2:4000"})
	held := fmt.Errorf("take over lease: %w", persistence.ErrLeaseHeld)
	for _, owner := range []string{"node-b", "stdio-1"} {
		v := placement.Decide(members, "node-a", persistence.Lease{ServerID: "server-1", Owner: owner}, nil, held)
		fmt.Printf("held by %s: %v\n", owner, v)
	}
	fmt.Println("granted:", placement.Decide(members, "node-a", persistence.Lease{ServerID: "server-1", Owner: "node-a"}, nil, nil))
	fmt.Println("lost in a cluster:", placement.AfterLoss(members))
	// Output:
	// held by node-b: moved
	// held by stdio-1: stand-by
	// granted: own
	// lost in a cluster: moved
}

// ExampleDialProbe: a port nothing listens on any more (its process is gone) refuses the probe; a live one answers.
func ExampleDialProbe() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	fmt.Println(placement.DialProbe(context.Background(), addr, placement.ProbeTimeout) == placement.ProbeAnswered)
	ln.Close()
	fmt.Println(placement.DialProbe(context.Background(), addr, placement.ProbeTimeout) == placement.ProbeRefused)
	// Output:
	// true
	// true
}
