// Package placement decides where each server's actor lives when several processes share one store: the leases
// that make a server's session exist once (Leases, with the keeper that renews them), this node's view of the
// cluster's membership (Members: who is a member, who left, who hands its servers over, the rendezvous choice),
// the remoting connections a request to another node depends on (Links), the fast failover that probes a member
// whose connection broke, evicts it when it is dead and tells the others (Suspicion), the cluster's identity lookup (Lookup, in
// the shape of protoactor's cluster.IdentityLookup), which follows the lease to the member that holds it and
// otherwise asks the chosen member's placement actor to host the server, what a reconciliation pass activates
// (PlanPass, Plan), and the cross-process feed that carries each process's events to the others through the store
// (Feed). It also holds the verdicts the actors carry out: on a server actor's activation (Decide) and on a lost
// lease (AfterLoss), when to ask for a lease again (Leases.AskAgain), whether a node may host a server and its
// answer on the wire (MayHost, HostReply, HostedPID), the hand-over's drain and successor (HandOverDrain,
// Members.Successor), and the cluster node's configuration (ClusterConfig).
//
// It exists so that the rules of placement (one session per server; a member out of the membership places
// nothing; a lapsed lease stays with a member that is still one; a request to another node ends when that node or
// a connection with it goes) read in one place, apart from the actors that follow them. It imports nothing of
// package actors: the actors (the placement actor that hosts the server actors, the server actor that takes its
// lease, the reconciler that carries a Plan out, the hand-over on SIGTERM, the router and indexer the feed delivers
// to) wire it, and give the lookup the one thing it cannot do itself, asking a node's placement actor to host a
// server (Lookup.Activate).
package placement
