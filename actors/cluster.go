package actors

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"

	"github.com/mcpgw/aggregator/actors/placement"
)

// ClusterConfig makes the daemon one node of a cluster (Deps.Cluster; nil: a single node, no extra port). Nodes
// share one PostgreSQL store; membership comes from protoactor's providers (etcd, or automanaged: a static list of
// nodes probing each other); server actors live where their lease is (placement.Lookup) and any node serves any request
// by messaging them there over protoactor's remoting (gRPC on Host:Port).
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

// startMember starts the cluster member; protoactor panics when the membership provider cannot start (an etcd
// that does not answer): that is an error of the daemon's start, not a crash.
func startMember(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: join the membership: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

// prepareCluster settles this node's cluster address and its view of the membership, before any server actor
// exists (they read the view).
func (s *System) prepareCluster() error {
	cc := s.deps.Cluster
	if cc.Port == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(cc.Host, "0"))
		if err != nil {
			return fmt.Errorf("cluster: find a free port: %w", err)
		}
		cc.Port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	if cc.Advertise == "" {
		cc.Advertise = cc.Host
	}
	s.members = placement.NewMembers(s.deps.NodeID, net.JoinHostPort(cc.Advertise, strconv.Itoa(cc.Port)))
	s.links = placement.NewLinks()
	s.links.Follow(s.sys.EventStream)
	s.deps.members = s.members
	// While the store is unreachable, the others can take this node's servers over only once they saw it leave the
	// membership: it gives its sessions up then (or when etcd may have dropped it), not merely because its leases
	// lapsed (placement.Leases).
	registered, _ := cc.Provider.(interface{ Registered() bool })
	s.deps.owners.SetTakeoverRisk(func() bool {
		if _, joined := s.members.Status(); !joined {
			return true
		}
		return registered != nil && !registered.Registered()
	})
	return nil
}

// joinCluster starts remoting and joins the membership. The node's member id is its node id (the lease owner name),
// so that a lease names the member that holds it.
func (s *System) joinCluster() error {
	cc := s.deps.Cluster
	rc := remote.Configure(cc.Host, cc.Port, remote.WithAdvertisedHost(net.JoinHostPort(cc.Advertise, strconv.Itoa(cc.Port))),
		remote.WithServerOptions(s.links.ServerOption()))
	s.lookup = &placement.Lookup{Leases: s.deps.Store, Members: s.members, Activate: s.askPlacement, Unplaceable: s.unplaceable,
		OnTopology: s.onTopology, GetTimeout: 2 * s.deps.Config.AskTimeout}
	cfg := cluster.Configure(cc.Name, cc.Provider, s.lookup, rc,
		cluster.WithKinds(cluster.NewKind(placement.ServerKind, actor.PropsFromFunc(func(actor.Context) {}))),
		cluster.WithRequestTimeout(s.deps.Config.AskTimeout),
		// protoactor's gossip blocks for good the actor system of a member whose gossip heartbeat it has not heard
		// for this long (20 s by default), refusing its connections: a node frozen that long (SIGSTOP, a GC pause)
		// could never rejoin. The membership is etcd's (or automanaged's) to decide, not the gossip's.
		cluster.WithHeartbeatExpiration(100*365*24*time.Hour))
	s.cluster = cluster.New(s.sys, cfg)
	if err := startMember(s.cluster); err != nil {
		return err
	}
	s.deps.Logger.Info("joined the cluster", "cluster", cc.Name, "node", s.deps.NodeID, "address", s.sys.Address(),
		"members", s.members.Count())
	return nil
}

// onTopology follows a membership change: the view is updated, calls in flight to members that left fail at once
// (departure channels), their cached actors are forgotten (protoactor does that), and the reconciler runs, so that
// the servers of a member that left are activated again on the survivors.
func (s *System) onTopology(t *cluster.ClusterTopology) {
	members := make(map[string]string, len(t.Members))
	for _, m := range t.Members {
		members[placement.MemberNode(m.Id)] = net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
	}
	_, wasMember := s.members.Status()
	joined, gone := s.members.Update(members)
	if len(joined) > 0 || len(gone) > 0 {
		s.deps.Logger.Info("cluster membership changed", "members", len(members), "joined", joined, "left", gone)
	}
	if _, member := s.members.Status(); wasMember && !member {
		// The others saw this node leave and take its servers over at once: two sessions of a server must never
		// run together, so this node gives all of its up, and places and reconciles nothing until it has rejoined.
		s.deps.Logger.Warn("this node dropped out of the cluster's membership: giving its servers up until it has rejoined")
		s.giveUpHosted("node dropped out of the cluster's membership")
	} else if member && !wasMember && s.reconciling.Load() {
		s.deps.Logger.Info("this node has rejoined the cluster", "members", len(members))
	}
	if s.deps.MembersChanged != nil {
		s.deps.MembersChanged(len(members))
	}
	s.reconcileSoon() // (before the reconciler runs, its first pass happens anyway)
}

// giveUpHosted retires every server actor of this node at once (calls in flight cancelled, sessions and children
// closed, leases released when the store answers).
func (s *System) giveUpHosted(reason string) {
	s.hosted.Range(func(id, pid any) bool {
		s.forget(id.(string))
		s.sys.Root.Send(pid.(*actor.PID), &pb.Deactivate{Reason: reason})
		return true
	})
}

// leaveCluster leaves the membership (nothing on a single node): the provider deregisters the node, so the others
// see it leave at once instead of after a timeout. Remoting is not shut down: protoactor's remote shutdown races
// with messages still arriving (the race detector reports it in the version we build with), and the process exits
// next anyway, which closes its connections.
func (s *System) leaveCluster() {
	if s.cluster == nil {
		return
	}
	// Requests other nodes sent to this node's actors just before they were handed over (their cached pids point
	// here) are answered with dead letters, on which the senders look the server up again and reach its successor.
	// Leaving the membership first would end them with "the node left while the request was in flight" instead:
	// linger while such answers go out.
	time.Sleep(leaveLinger)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.deps.Cluster.Provider.Shutdown(true)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.deps.Logger.Warn("cluster: leaving the membership took too long; stopping anyway")
	}
}

// leaveLinger is how long a leaving node keeps answering (with dead letters) before it leaves the membership.
const leaveLinger = 300 * time.Millisecond

// ClusterStatus reports this node's membership for the probes: its node id, the members it sees and whether it
// has joined (it sees itself). ok is false on a single node.
func (s *System) ClusterStatus() (node string, members int, joined, ok bool) {
	if s.members == nil {
		return "", 0, false, false
	}
	members, joined = s.members.Status()
	return s.deps.NodeID, members, joined, true
}

// OwnerURL is, in a cluster, the base URL of the MCP listener of the node whose actor serves the server now (as
// recorded with that node's heartbeat), when that node is another one: the per-server endpoint forwards a
// client's session there, since a session lives with the server's actor. ok is false on a single node and when
// the server is served here.
func (s *System) OwnerURL(ctx context.Context, serverID string) (url string, ok bool, err error) {
	if s.cluster == nil {
		return "", false, nil
	}
	pid, err := s.locate(ctx, serverID)
	if err != nil {
		return "", false, err
	}
	if pid.Address == s.sys.Address() {
		return "", false, nil
	}
	node := s.members.IDAt(pid.Address)
	nodes, err := s.deps.Store.ListNodes(ctx, 3*s.deps.owners.TTL())
	if err != nil {
		return "", false, err
	}
	for _, n := range nodes {
		if n.ID == node && n.Address != "" {
			return n.Address, true, nil
		}
	}
	return "", false, fmt.Errorf("cluster node %s that serves the server has no MCP address on record", node)
}
