package placement_test

import (
	"fmt"
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
