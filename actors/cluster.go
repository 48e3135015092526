package actors

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"

	"github.com/mcpgw/aggregator/actors/placement"
)

// ClusterConfig makes the daemon one node of a cluster (Deps.Cluster; nil: a single node, no extra port); it is
// placement's (placement.ClusterConfig).
type ClusterConfig = placement.ClusterConfig

// prepareCluster settles this node's cluster address and its view of the membership, before any server actor
// exists (they read the view).
func (s *System) prepareCluster() error {
	cc := s.deps.Cluster
	if err := cc.Settle(); err != nil {
		return err
	}
	s.members = placement.NewMembers(s.deps.NodeID, cc.Address())
	s.links = placement.NewLinks()
	if ev, ok := cc.Provider.(placement.Evictor); ok {
		// A member whose connection with this node breaks is probed, and evicted from the membership when it is
		// dead, rather than waiting for the provider to notice (placement.Suspicion: failover within a second).
		sus := &placement.Suspicion{Members: s.members, Evictor: ev, Logger: s.deps.Logger}
		// The other members' connections with a dead member need not have broken, and an automanaged eviction is
		// only this node's: the node that finds a member dead tells the others, which probe it themselves.
		sus.Tell = placement.TellOthers(s.sys.Root, s.members, cc.Address())
		if _, err := s.sys.Root.SpawnNamed(sus.Props(), placement.SuspicionActor); err != nil {
			return fmt.Errorf("cluster: spawn the suspicion actor: %w", err)
		}
		s.links.OnDown(sus.Suspect)
	}
	if _, err := s.sys.Root.SpawnNamed(s.taskInputsProps(), TaskInputsActor); err != nil {
		return fmt.Errorf("cluster: spawn the task-inputs actor: %w", err)
	}
	s.links.Follow(s.sys.EventStream)
	s.deps.members = s.members
	// While the store is unreachable, this node gives its sessions up only once the others may take them over
	// (placement.Leases, ClusterConfig.TakeoverRisk).
	s.deps.owners.SetTakeoverRisk(cc.TakeoverRisk(s.members))
	return nil
}

// joinCluster starts remoting and joins the membership. The node's member id is its node id (the lease owner name),
// so that a lease names the member that holds it.
func (s *System) joinCluster() error {
	cc := s.deps.Cluster
	s.lookup = &placement.Lookup{Leases: s.deps.Store, Members: s.members, Activate: s.askPlacement, Unplaceable: s.unplaceable,
		OnTopology: s.onTopology, GetTimeout: 2 * s.deps.Config.AskTimeout}
	s.cluster = cluster.New(s.sys, cc.Configure(s.lookup, s.links, s.deps.Config.AskTimeout))
	if err := placement.StartMember(s.cluster); err != nil {
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
	members := placement.TopologyMembers(t)
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
	} else if member && !wasMember && s.reconciler.Started() {
		s.deps.Logger.Info("this node has rejoined the cluster", "members", len(members))
	}
	if s.deps.MembersChanged != nil {
		s.deps.MembersChanged(len(members))
	}
	s.reconciler.Soon() // (before the reconciler runs, its first pass happens anyway)
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
	// The others' connections with this node break as it goes: that is no reason to probe them any more.
	s.links.OnDown(nil)
	if !s.deps.Cluster.Leave(5 * time.Second) {
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

// NodeAddress is, in a cluster, the base URL of this node's MCP listener as recorded with its heartbeat (the one
// OwnerURL gives the other nodes for this node); "" on a single node.
func (s *System) NodeAddress() string {
	if s.cluster == nil {
		return ""
	}
	return s.deps.NodeAddress
}

// OwnerHeader names, in a cluster, the node that serves the server a request named: on every answer of
// /mcp/servers/{name} (http/mcpproxy) and on a REST tool call's answer (http/api). Its value is the host:port of that
// node's MCP listener as the node advertises it to the others (MCP_AGGREGATOR_CLUSTER_ADVERTISE, or its listen host,
// and the port of MCP_AGGREGATOR_MCP_LISTEN), which is what a balancer's server line for that node says: a balancer
// that sends the next requests of the same path (or tool) there saves the hop through the node that received them
// (deploy/haproxy.cfg). Nothing else is named, and only what the operator configured.
const OwnerHeader = "Mcp-Aggregator-Owner"

// OwnerAddress is, in a cluster, the host:port of the MCP listener of the node whose actor serves the server, as far
// as this node knows without asking anyone: the actor it last located (its cache, filled by the call just made)
// and that node's address as its heartbeat recorded it (read with this node's lease renewals). It is what a REST
// call's answer names for a balancer (Mcp-Aggregator-Owner). "" on a single node, and when not known.
func (s *System) OwnerAddress(serverID string) string {
	if s.cluster == nil || s.lookup == nil {
		return ""
	}
	pid, ok := s.lookup.Cached(serverID)
	if !ok {
		return ""
	}
	base := s.deps.NodeAddress
	if pid.Address != s.sys.Address() {
		if base, ok = s.deps.owners.NodeAddress(s.members.IDAt(pid.Address)); !ok {
			return ""
		}
	}
	return urlHost(base)
}

// urlHost is the host:port of a base URL as nodeURL writes them (scheme://host:port[/path]), without the allocation
// of url.Parse: OwnerAddress runs on every REST call of a cluster node.
func urlHost(base string) string {
	_, rest, ok := strings.Cut(base, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
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
	if addr, ok := placement.MCPAddress(nodes, node); ok {
		return addr, true, nil
	}
	return "", false, fmt.Errorf("cluster node %s that serves the server has no MCP address on record", node)
}
