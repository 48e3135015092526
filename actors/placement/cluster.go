package placement

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/mcpgw/aggregator/persistence"
)

// ClusterConfig makes the daemon one node of a cluster (nil: a single node, no extra port). Nodes share one
// PostgreSQL store; membership comes from protoactor's providers (etcd, or automanaged: a static list of nodes
// probing each other); server actors live where their lease is (Lookup) and any node serves any request by
// messaging them there over protoactor's remoting (gRPC on Host:Port).
type ClusterConfig struct {
	// Name is the cluster's name: nodes join the cluster of that name (MCP_AGGREGATOR_CLUSTER_NAME).
	Name string
	// Provider is the membership provider (built by cmd/aggregator from the MCP_AGGREGATOR_CLUSTER_* settings).
	Provider cluster.ClusterProvider
	// Host and Port are where this node's remoting listens (Port 0: a free port).
	Host string
	Port int
	// Advertise is the host other nodes dial this one at (empty: Host).
	Advertise string
}

// Settle picks a free port when Port is 0 and defaults Advertise to Host, before the node's address is used.
func (c *ClusterConfig) Settle() error {
	if c.Port == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(c.Host, "0"))
		if err != nil {
			return fmt.Errorf("cluster: find a free port: %w", err)
		}
		c.Port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	if c.Advertise == "" {
		c.Advertise = c.Host
	}
	return nil
}

// Address is where the other nodes reach this one's remoting (host:port; after Settle).
func (c *ClusterConfig) Address() string { return net.JoinHostPort(c.Advertise, strconv.Itoa(c.Port)) }

// Configure is protoactor's cluster configuration of this node: remoting on Host:Port with links watching the
// connections the others open, the lookup placing server actors, and requests that wait at most requestTimeout.
func (c *ClusterConfig) Configure(lookup cluster.IdentityLookup, links *Links, requestTimeout time.Duration) *cluster.Config {
	rc := remote.Configure(c.Host, c.Port, remote.WithAdvertisedHost(c.Address()), remote.WithServerOptions(links.ServerOption()))
	return cluster.Configure(c.Name, c.Provider, lookup, rc,
		cluster.WithKinds(cluster.NewKind(ServerKind, actor.PropsFromFunc(func(actor.Context) {}))),
		cluster.WithRequestTimeout(requestTimeout),
		// protoactor's gossip blocks for good the actor system of a member whose gossip heartbeat it has not heard
		// for this long (20 s by default), refusing its connections: a node frozen that long (SIGSTOP, a GC pause)
		// could never rejoin. The membership is etcd's (or automanaged's) to decide, not the gossip's.
		cluster.WithHeartbeatExpiration(100*365*24*time.Hour))
}

// TakeoverRisk is the rule of a cluster node for Leases.SetTakeoverRisk: while the store is unreachable, the others
// can take this node's servers over only once they saw it leave the membership, so it gives its sessions up then
// (m says it is out), or when the provider (etcd) may have dropped its registration; not merely because its leases
// lapsed.
func (c *ClusterConfig) TakeoverRisk(m *Members) func() bool {
	registered, _ := c.Provider.(interface{ Registered() bool })
	return func() bool {
		if _, joined := m.Status(); !joined {
			return true
		}
		return registered != nil && !registered.Registered()
	}
}

// Leave has the provider deregister this node, so the others see it leave at once instead of after a timeout;
// false when that took longer than timeout (the node stops anyway).
func (c *ClusterConfig) Leave(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Provider.Shutdown(true)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// StartMember starts the cluster member; protoactor panics when the membership provider cannot start (an etcd
// that does not answer): that is an error of the daemon's start, not a crash.
func StartMember(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: join the membership: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

// TopologyMembers is a membership as Members.Update takes it (node id -> remoting address) from protoactor's
// topology.
func TopologyMembers(t *cluster.ClusterTopology) map[string]string {
	members := make(map[string]string, len(t.Members))
	for _, m := range t.Members {
		members[MemberNode(m.Id)] = net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
	}
	return members
}

// MCPAddress is the base URL of the MCP listener of node as recorded with its heartbeat (nodes); false when none
// is on record.
func MCPAddress(nodes []persistence.Node, node string) (string, bool) {
	for _, n := range nodes {
		if n.ID == node && n.Address != "" {
			return n.Address, true
		}
	}
	return "", false
}
