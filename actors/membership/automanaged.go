package membership

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
)

// Automanaged is protoactor's automanaged provider (each node polls the others' health ports every refresh period)
// with Evict (placement.Evictor): a member confirmed dead is taken out of this node's membership at once instead of
// at the next round of health checks. The membership of this provider is each node's own view anyway (every node
// polls): each node that sees the member's connection break evicts it from its own view, and the provider's next
// round agrees (the dead node's health port refuses). protoactor blocks the id of a member that left, as it does
// when the provider drops it, so a round that started before the death cannot bring it back.
type Automanaged struct {
	*automanaged.AutoManagedProvider

	mu sync.Mutex
	c  *cluster.Cluster
	// members is the membership last published (followed on the event stream: protoactor's member list has no
	// locked read).
	members cluster.Members
}

var _ cluster.ClusterProvider = (*Automanaged)(nil)

// StartMember implements cluster.ClusterProvider.
func (a *Automanaged) StartMember(c *cluster.Cluster) error {
	a.follow(c)
	return a.AutoManagedProvider.StartMember(c)
}

// StartClient implements cluster.ClusterProvider.
func (a *Automanaged) StartClient(c *cluster.Cluster) error {
	a.follow(c)
	return a.AutoManagedProvider.StartClient(c)
}

// follow keeps the membership that c publishes.
func (a *Automanaged) follow(c *cluster.Cluster) {
	a.mu.Lock()
	a.c = c
	a.mu.Unlock()
	c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok {
			a.mu.Lock()
			a.members = t.Members
			a.mu.Unlock()
		}
	})
}

// Evict implements placement.Evictor: the member at addr leaves this node's membership now. This node is never
// evicted; false when no other member listens at addr.
func (a *Automanaged) Evict(_ context.Context, addr string) (bool, error) {
	a.mu.Lock()
	c, current := a.c, a.members
	a.mu.Unlock()
	if c == nil {
		return false, nil
	}
	keep := make(cluster.Members, 0, len(current))
	found := false
	for _, m := range current {
		if m.Address() == addr && m.Id != c.ActorSystem.ID {
			found = true
			continue
		}
		keep = append(keep, m)
	}
	if !found {
		return false, nil
	}
	c.MemberList.UpdateClusterTopology(keep)
	return true, nil
}
