// Package msg holds the few local messages that the actors of package actors and of its sub-packages (the server
// actor in package server) send each other. They never cross the network (the protocol between nodes is
// proto/aggregatorpb); the package is internal so that only the actor tree sends them.
package msg

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

type (
	// Reply answers every ask made of the node's own actors (registry, router, discovery, indexer, proxy
	// actors): an acknowledgement, the server a registration or update produced, a spawned actor, or the error
	// (System.askActor returns it as the error).
	Reply struct {
		Server   persistence.Server
		Replayed bool // a keyed registration answered from the store
		PID      *actor.PID
		Err      error
	}
	// FirstDiscovery asks the discovery actor for a discovery of a server's tools that starts after the ask (a new
	// session's first); the answer, a Reply, comes once it is stored (or failed).
	FirstDiscovery struct{ ID string }
	// PanicForTest makes the router, the placement or a server actor crash the way a bug would; only the actor
	// tree's own tests send it (they check that those actors are supervised).
	PanicForTest struct{}
	// CancelCallsForShutdown is what the placement passes to every server actor when the drain time is over: the
	// calls still in flight end with SERVER_UNAVAILABLE "shutting down", and the actor takes no new calls.
	CancelCallsForShutdown struct{}
	// ServerRetired: a server actor retired; the placement, its parent, forgets it (it stops by itself later).
	ServerRetired struct {
		ID  string
		PID *actor.PID
	}
	// ScanServer asks the classifier for the leftovers of one server (sent by the server's actor when it becomes
	// the owner, in a cluster).
	ScanServer struct{ ID string }
	// ApplyStatus is a server actor's status change, sent to the router before the change is stored or published
	// (the server actor's setStatus): a reader who sees the new status finds it in the routing table too.
	ApplyStatus struct{ Evt *pb.ServerStatusChanged }
)

// StoreTimeout bounds one store operation of an actor.
const StoreTimeout = 10 * time.Second

// Names the node's singleton actors are spawned under on every node.
const (
	DiscoveryName  = "discovery"
	ClassifierName = "classifier"
	RouterName     = "router"
)
