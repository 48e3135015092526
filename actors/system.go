package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/internal/procstate"
	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/actors/server"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/gopool"
	"github.com/mcpgw/aggregator/internal/hooks"
	"github.com/mcpgw/aggregator/internal/quietlog"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search/served"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/supervision"
)

// System is the running actor tree of one node and the Control the front ends use to ask it.
type System struct {
	deps      *Deps
	sys       *actor.ActorSystem
	registry  *actor.PID
	router    *actor.PID
	discovery *actor.PID
	routes    *atomic.Pointer[routing.RouteTable]
	hooks     *routeHooks
	sub       *eventstream.Subscription
	searcher  *toolsearch.Searcher
	indexer   *actor.PID
	// policyActor loads the access policy into policySet (accesspolicy.go).
	policyActor *actor.PID
	policySet   *atomic.Pointer[policy.Set]
	// guardian supervises the node's singleton actors with our strategy (see Start).
	guardian actor.PropsOption
	callSeq  atomic.Uint64 // request ids of calls, so a caller that leaves can cancel its call
	// relayEnds ends relayed calls' relays after their grace, on one timer for the node (server.AttachRelay).
	relayEnds *gopool.Later
	// calls counts the tool calls between a front end's ask and its answer, and refuses new ones once draining.
	calls callGate
	// feed sends this process's events to the other processes on the store and delivers theirs (nil: the store
	// has no feed); stopFeed ends it.
	feed     *placement.Feed
	stopFeed context.CancelFunc
	// placement hosts this node's server actors (placement.go); hosted maps their server ids to them.
	placement *actor.PID
	hosted    sync.Map
	// cluster is protoactor's cluster this node is a member of, and members its picture of the membership (both
	// nil on a single node; cluster.go).
	cluster *cluster.Cluster
	members *placement.Members
	// links follows the remoting connections with the other nodes, and lookup finds where server actors live
	// (both nil on a single node).
	links  *placement.Links
	lookup *placement.Lookup
	// pinHashes are the pin hashes of the tools' definitions, shared by the discovery and the router.
	pinHashes *routing.PinHashes
	// served holds the versions of each server's served tools: published by the router, acknowledged by the
	// indexer (routing.Versions).
	served *routing.Versions
	// reconciler activates the servers this node should serve (reconcile.go, placement.Reconciler).
	reconciler *placement.Reconciler
	// stopKeeper ends the goroutine that renews this process's leases (ownership.keep); keeperDone is closed when
	// it has.
	stopKeeper context.CancelFunc
	keeperDone chan struct{}
	// resourceHooks are told about every backend's notifications/resources/updated (features.go).
	resourceHooks hooks.Set[*pb.ResourceUpdated]
	// taskHooks are told of the task status changes other processes announce, and taskInputs takes the answers
	// other nodes send to this node's tasks (tasks.go).
	taskHooks  hooks.Set[*pb.TaskStatusChanged]
	taskInputs atomic.Pointer[func(*pb.TaskInput) bool]
	// taskGaps are told when the feed reconnected: the task status changes announced meanwhile were missed.
	taskGaps hooks.Set[struct{}]
	restarts *restartCounter // restarts by actor, for the actor view (inspect.go)
}

// DrainCalls is the first step of a shutdown: tool calls are no longer accepted (new ones answer SERVER_UNAVAILABLE
// saying the daemon is shutting down) and the calls in flight may finish until ctx ends. Those still running then
// are cancelled at their backends and answered SERVER_UNAVAILABLE "shutting down"; DrainCalls waits up to grace for
// those answers. It returns how many calls were cancelled.
func (s *System) DrainCalls(ctx context.Context, grace time.Duration) int {
	idle, n := s.calls.close()
	if n > 0 {
		s.deps.Logger.Info("shutdown: waiting for tool calls in flight", "calls", n)
	}
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
	}
	_, left := s.calls.close()
	s.deps.Logger.Warn("shutdown: cancelling tool calls still in flight after the drain time", "calls", left)
	s.sys.Root.Send(s.placement, &cancelCallsForShutdown{})
	select {
	case <-idle:
	case <-time.After(grace):
	}
	return left
}

// shutdownReply answers a call refused because the daemon is shutting down.
func (s *System) shutdownReply(id, tool string) *pb.CallToolReply {
	srv, _ := s.Routes().Server(id)
	return &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerUnavailable, ServerName: srv.Name, ServerStatus: srv.Status,
		Message: fmt.Sprintf("The aggregator is shutting down and takes no new calls (%s on %s)", tool, srv.Name)}}
}

var _ Control = (*System)(nil)

// Start builds the actor system and its singleton actors, joins the cluster when one is configured, and activates
// the servers this node should serve (the reconciler; server actors connect in the background).
func Start(ctx context.Context, deps Deps) (*System, error) {
	d := deps.withDefaults()
	if d.Store == nil {
		return nil, errors.New("actors: Deps.Store is required")
	}
	// protoactor logs through our logger (only its warnings and errors: its info lines are noise to operators).
	actorLog := QuietLogger(d.Logger, slog.LevelWarn).With("lib", "protoactor")
	opts := []actor.ConfigOption{actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLog })}
	if d.MeterProvider != nil {
		opts = append(opts, actor.WithMetricProviders(d.MeterProvider))
	}
	sys := actor.NewActorSystemWithConfig(actor.Configure(opts...))
	// The node id names this process everywhere: as the owner of leases and, in a cluster, as the member.
	sys.ID = d.NodeID
	s := &System{deps: d, sys: sys, relayEnds: server.NewRelayLater(), pinHashes: routing.NewPinHashes(), served: routing.NewVersions(), routes: &atomic.Pointer[routing.RouteTable]{}, hooks: &routeHooks{},
		reconciler: &placement.Reconciler{}, restarts: newRestartCounter(sys)}
	s.routes.Store(routing.BuildRouteTable(nil, nil, d.Config.AliasSeparator, 0, nil, nil, nil))
	fail := func(err error) (*System, error) {
		if s.stopFeed != nil {
			s.stopFeed()
		}
		sys.Shutdown()
		return nil, err
	}
	// A cluster node starts remoting (which sets the actor system's address) before any actor runs, and joins the
	// membership; other nodes' requests for its placement wait (they retry) until it is spawned below.
	if d.Cluster != nil {
		if err := s.prepareCluster(); err != nil {
			return fail(err)
		}
		if err := s.joinCluster(); err != nil {
			return fail(err)
		}
	}
	// The node's singleton actors (router, discovery, indexer, classifier) are spawned from the root. In protoactor
	// WithSupervisor would only apply to their children; WithGuardian makes a guardian with our strategy their
	// parent, so a crash is restarted after our backoff, without limit, and counted by kind.
	strategy := supervision.NewStrategy(d.Config.Restart, d.Logger, restartHook(d))
	s.guardian = actor.WithGuardian(strategy)
	var err error
	// The router and discovery start before the placement, so that they see every event its servers publish.
	s.router, err = sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return &routerActor{deps: d, table: s.routes, hooks: s.hooks, served: s.served, cat: routing.NewBuilder(d.Config.AliasSeparator, s.served, s.pinHashes),
			loads: routing.NewLoads(routerLoads), load: &routing.Loader{Store: d.Store, Pins: s.pinHashes, Logger: d.Logger}}
	}, s.guardian), "router")
	if err != nil {
		return fail(fmt.Errorf("spawn router: %w", err))
	}
	work := s.newDiscoveryWorker()
	s.discovery, err = sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return &discoveryActor{log: d.Logger, work: work, runs: floodguard.NewRuns(d.Config.ListChangedInterval)}
	}, s.guardian), msg.DiscoveryName)
	if err != nil {
		return fail(fmt.Errorf("spawn discovery: %w", err))
	}
	if _, err := s.askActor(ctx, s.router, &readyMsg{}, 30*time.Second); err != nil {
		return fail(fmt.Errorf("router did not start: %w", err))
	}
	if s.searcher, err = newSearcher(ctx, d.Search, d.Logger); err != nil {
		return fail(err)
	}
	s.indexer, err = sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return &indexerActor{deps: d, router: s.router, served: s.served,
			newIndex: func() *served.Index { return served.NewIndex(s.searcher, d.Search.classifierSkills(), d.Logger) }}
	}, s.guardian), "indexer")
	if err != nil {
		return fail(fmt.Errorf("spawn indexer: %w", err))
	}
	if err := s.startAccessPolicy(ctx); err != nil {
		return fail(err)
	}
	s.sub = sys.EventStream.Subscribe(func(evt any) { s.deliver(evt, true) })
	fctx, stopFeed := context.WithCancel(context.Background())
	s.stopFeed = stopFeed
	s.startFeed(fctx)
	d.server = d.serverDeps()
	s.placement, err = sys.Root.SpawnNamed(newPlacementProps(d, &s.hosted, s.guardian), placement.PlacementName)
	if err != nil {
		return fail(fmt.Errorf("spawn placement: %w", err))
	}
	s.registry, err = sys.Root.SpawnNamed(newRegistryProps(d, s), "registry")
	if err != nil {
		return fail(fmt.Errorf("spawn registry: %w", err))
	}
	if err := s.startClassifier(); err != nil { // after the registry: it stops when the registry does
		return fail(err)
	}
	kctx, stop := context.WithCancel(context.Background())
	s.stopKeeper, s.keeperDone = stop, make(chan struct{})
	go func() {
		defer close(s.keeperDone)
		d.owners.Keep(kctx, d.NodeAddress, s.leaseLost, d.Logger)
	}()
	if err := s.startReconciler(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// leaseLost tells the actor of server id, if this process hosts it, that its lease of that epoch is gone (the keeper
// could not renew it, or a fenced write found it lapsed or taken): the actor closes its session and asks again.
func (s *System) leaseLost(id string, epoch int64, why string) {
	if pid, ok := s.hostedPID(id); ok {
		s.sys.Root.Send(pid, &server.LeaseLost{Epoch: epoch, Why: why})
	}
}

// deliver hands an event to the actors that follow it. local: published on this process's event stream by its own
// actors (then also sent to the other processes, and seen by discovery); otherwise it came from another process
// through the feed, and only the router and the metrics follow it (discovery and classification run on the
// server's owner). The router's deltas of the served tools (local only: every node's router derives its own from
// the notices) go to the indexer; the classifier follows them on the event stream.
func (s *System) deliver(evt any, local bool) {
	root := s.sys.Root
	switch evt.(type) {
	case *routing.ServedDelta, *pb.ServerRemoved:
		root.Send(s.indexer, evt)
	}
	switch e := evt.(type) {
	case *pb.ServerRemoved:
		s.deps.Metrics.ForgetServer(e.ServerName)
		s.forget(e.ServerId) // a cluster node's cached actor of it
	case *pb.ServerUpdated:
		if e.OldName != e.NewName {
			s.deps.Metrics.ForgetServer(e.OldName)
		}
	}
	if _, ok := evt.(*pb.ProfilesChanged); ok && s.policyActor != nil {
		root.Send(s.policyActor, evt)
	}
	switch evt.(type) {
	case *pb.ServerStatusChanged, *pb.ServerRemoved, *pb.ServerUpdated, *pb.ToolsChanged, *pb.ClassificationDone, *pb.ProfilesChanged, *pb.FeaturesChanged:
		root.Send(s.router, evt)
		if local && s.feed != nil {
			s.feed.Publish(evt)
		}
	case *pb.ResourceUpdated:
		s.deliverResourceUpdated(evt.(*pb.ResourceUpdated), local)
	case *pb.TaskStatusChanged:
		if !local { // this node's own changes reach its endpoints from its task manager
			s.taskHooks.Call(evt.(*pb.TaskStatusChanged))
		}
	}
	if !local {
		return
	}
	switch evt.(type) {
	case *pb.ServerStatusChanged, *pb.ServerRemoved, *pb.ToolsListChanged, *pb.FeaturesListChanged:
		root.Send(s.discovery, evt)
	}
}

// ActorSystem exposes the underlying system, for subscribing to the event stream.
func (s *System) ActorSystem() *actor.ActorSystem { return s.sys }

// Shutdown stops every server actor (closing sessions and child processes and persisting DISCONNECTED while keeping
// each server's auto_connect intent, releasing their leases), leaves the cluster, and stops the actor system,
// within ctx's deadline.
func (s *System) Shutdown(ctx context.Context) error {
	s.reconciler.Stop()
	done := make(chan error, 1)
	go func() {
		err := s.stopAndWait(ctx, s.placement)
		done <- errors.Join(err, s.stopAndWait(ctx, s.registry))
	}()
	defer s.sys.EventStream.Unsubscribe(s.sub)
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.leaveCluster()
	s.sys.Shutdown()
	if err != nil {
		return fmt.Errorf("stop server actors: %w", err)
	}
	s.stopFeed()
	// Every session is closed: give the servers up at once, for another process to take over.
	s.stopKeeper()
	<-s.keeperDone
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.deps.owners.Shutdown(rctx); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	return nil
}

// stopWaitBound bounds how long Shutdown waits for an actor to stop when its context has no deadline (and how long
// the waiting goroutine outlives a cancelled context).
const stopWaitBound = 2 * time.Minute

// stopAndWait stops pid and waits until it has stopped (its children, every server actor, stopped first), until
// ctx's deadline or, without one, stopWaitBound. It is protoactor's StopFuture without its fixed 10 s timeout,
// which a busy machine exceeds while sessions close.
func (s *System) stopAndWait(ctx context.Context, pid *actor.PID) error {
	timeout := stopWaitBound
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return ctx.Err()
	}
	f := actor.NewFuture(s.sys, timeout)
	proc, _ := s.sys.ProcessRegistry.Get(pid) // a stopped actor: the dead letter process, which answers Terminated
	proc.SendSystemMessage(pid, &actor.Watch{Watcher: f.PID()})
	s.sys.Root.Stop(pid)
	return f.Wait()
}

// ask sends msg to the registry and waits for the answer within the ask timeout (or ctx's earlier deadline).
func (s *System) ask(ctx context.Context, msg any, timeout time.Duration) (any, error) {
	return s.askActor(ctx, s.registry, msg, timeout)
}

// askActor asks one actor; a timeout is ErrAskTimeout, a stopped actor ErrShuttingDown, and a askReply's error is
// returned as the error.
func (s *System) askActor(ctx context.Context, pid *actor.PID, msg any, timeout time.Duration) (any, error) {
	if timeout <= 0 {
		timeout = s.deps.Config.AskTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			timeout = left
		}
	}
	if timeout <= 0 {
		return nil, ErrAskTimeout
	}
	res, err := s.sys.Root.RequestFuture(pid, msg, timeout).Result()
	switch {
	case errors.Is(err, actor.ErrTimeout):
		return nil, ErrAskTimeout
	case errors.Is(err, actor.ErrDeadLetter):
		return nil, ErrShuttingDown
	case err != nil:
		return nil, fmt.Errorf("ask %s: %w", pid.Id, err)
	}
	if r, ok := res.(*askReply); ok && r.Err != nil {
		return nil, r.Err
	}
	return res, nil
}

// Register implements Control.
func (s *System) Register(ctx context.Context, r RegisterRequest) (persistence.Server, error) {
	res, err := s.ask(ctx, &registerMsg{req: r}, 0)
	if err != nil {
		return persistence.Server{}, err
	}
	return res.(*askReply).Server, nil
}

// RegisterKeyed implements Control.
func (s *System) RegisterKeyed(ctx context.Context, r RegisterRequest, k persistence.IdempotencyKey) (persistence.Server, bool, error) {
	res, err := s.ask(ctx, &registerMsg{req: r, key: &k}, 0)
	if err != nil {
		return persistence.Server{}, false, err
	}
	reply := res.(*askReply)
	return reply.Server, reply.Replayed, nil
}

// Update implements Control.
func (s *System) Update(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error) {
	res, err := s.ask(ctx, &updateMsg{id: id, patch: p}, 0)
	if err != nil {
		return persistence.Server{}, err
	}
	return res.(*askReply).Server, nil
}

// Connect implements Control.
func (s *System) Connect(ctx context.Context, id string) (ConnectResult, error) {
	r, err := askServerFor[*pb.ConnectReply](ctx, s, id, &pb.Connect{}, "connect")
	if err != nil {
		return ConnectResult{}, err
	}
	return ConnectResult{ServerID: r.ServerId, Status: r.Status, Message: r.Message}, nil
}

// Disconnect implements Control.
func (s *System) Disconnect(ctx context.Context, id string, force bool) (DisconnectResult, error) {
	r, err := askServerFor[*pb.DisconnectReply](ctx, s, id, &pb.Disconnect{Force: force}, "disconnect")
	if err != nil {
		return DisconnectResult{}, err
	}
	return DisconnectResult{ServerID: r.ServerId, Status: r.Status, PendingRequests: int(r.PendingRequests), Message: r.Message}, nil
}

// askServerFor asks a server actor within the ask timeout for a reply of type R; a reply that carries an
// ErrorInfo is returned as the error Control returns (infoError).
func askServerFor[R interface{ GetError() *pb.ErrorInfo }](ctx context.Context, s *System, id string, msg any, what string) (R, error) {
	var zero R
	res, err := s.askServer(ctx, id, msg, time.Now().Add(s.deps.Config.AskTimeout))
	if err != nil {
		return zero, err
	}
	r, ok := res.(R)
	switch {
	case !ok:
		return zero, fmt.Errorf("unexpected reply %T to %s", res, what)
	case r.GetError() != nil:
		return zero, server.InfoError(id, r.GetError())
	}
	return r, nil
}

// Remove implements Control. Stopping a stdio server can take its TerminateDuration, so Remove waits longer than
// other asks.
func (s *System) Remove(ctx context.Context, id string) error {
	_, err := s.ask(ctx, &removeMsg{id: id}, s.deps.Config.AskTimeout+3*s.deps.Config.TerminateDuration)
	return err
}

// Status asks a server actor for its live state.
func (s *System) Status(ctx context.Context, id string) (*pb.StatusReply, error) {
	return askServerFor[*pb.StatusReply](ctx, s, id, &pb.GetStatus{}, "status")
}

// CallTool runs a tool on one server by id and original tool name, bounded by the request timeout.
func (s *System) CallTool(ctx context.Context, id, tool string, argsJSON []byte) (*pb.CallToolReply, error) {
	deadline := s.callDeadline(ctx)
	msg := &pb.CallTool{Tool: tool, ArgumentsJson: argsJSON, DeadlineUnixMs: deadline.UnixMilli()}
	res, err := s.askServer(ctx, id, msg, deadline)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*pb.CallToolReply)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T to call", res)
	}
	return r, nil
}

// QuietLogger is logger without its records below min (quietlog.New): libraries (protoactor, the go-sdk) log
// their routine at info level, which is noise to operators.
func QuietLogger(logger *slog.Logger, min slog.Level) *slog.Logger { return quietlog.New(logger, min) }

// AwaitStartup waits until every server the admin wants connected that this process serves has either been
// connected (which it is once its tools are discovered and routed), or failed, or until ctx ends. A stdio client
// lists tools once, right after it starts the daemon: it should see the backends' tools, not only the meta-tools.
func (s *System) AwaitStartup(ctx context.Context) error {
	servers, _, err := s.deps.Store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return fmt.Errorf("list servers: %w", err)
	}
	var ids []string
	for _, srv := range servers {
		// Only the servers this process serves: those another process or cluster node owns connect there (Start
		// has waited for the activations, so ownership is known).
		if srv.AutoConnect && s.deps.owners.Fence(srv.ID) != nil {
			ids = append(ids, srv.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	wait := lifecycle.NewStartup(ids)
	sub := s.sys.EventStream.Subscribe(func(evt any) { wait.Follow(evt, server.ReasonNoSessionAfterStart) })
	defer s.sys.EventStream.Unsubscribe(sub)
	// What happened before the subscription, from the live state (the routing table starts from the stored rows,
	// which an unclean stop leaves CONNECTED with the last run's tools): servers that failed already, and servers
	// connected (their tools discovered).
	pending := wait.Pending()
	if len(pending) == 0 {
		return nil
	}
	for _, id := range pending {
		st, err := s.Status(ctx, id)
		switch {
		case errors.Is(err, persistence.ErrNotFound):
			wait.Settle(id)
		case err != nil:
			// Not answering yet (a busy or restarting actor): its events will tell.
		case st.Status == persistence.StatusError:
			wait.Settle(id)
		case callable(st.Status):
			wait.Settle(id) // connected with its tools
		}
	}
	select {
	case <-wait.Done():
		// The router was sent every event before this wait saw it: once it answers, the table holds the tools;
		// once the indexer has acknowledged the versions the router published, they are searchable.
		if _, err := s.askActor(ctx, s.router, &readyMsg{}, 0); err != nil {
			return fmt.Errorf("router: %w", err)
		}
		if err := s.served.AwaitIndexed(ctx, nil); err != nil {
			return fmt.Errorf("search index: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restartHook counts supervisor restarts by actor kind (server, router, ...), never by actor id.
func restartHook(d *Deps) supervision.RestartHook {
	return func(child *actor.PID, _ int, _ time.Duration, _ any) {
		kind := child.Id
		if i := strings.LastIndexByte(kind, '/'); i >= 0 {
			kind = kind[i+1:]
		}
		if i := strings.IndexByte(kind, '-'); i >= 0 {
			kind = kind[:i]
		}
		d.Metrics.ActorRestart(kind)
	}
}

// Snapshot is what the scrape-time gauges report: servers by status and tool counts, from the routing table; in a
// cluster, this node's share of them (placement.Reconciler.Share).
func (s *System) Snapshot() metrics.Snapshot {
	rt := s.Routes()
	snap := metrics.Snapshot{ServersByStatus: map[string]int{}}
	var keep func(string) bool
	if s.members != nil {
		snap.ClusterMembers = s.members.Count()
		keep = s.reconciler.Share(s.deps.NodeID, func(id string) bool { return s.deps.owners.Fence(id) != nil })
	}
	for _, srv := range rt.Servers() {
		if keep == nil || keep(srv.ID) {
			snap.ServersByStatus[srv.Status]++
		}
	}
	snap.Tools, snap.Classified = rt.ToolCountsWhere(keep)
	// Each server actor's mailbox depth, by server name: read from its process (procstate), no message sent.
	snap.Mailboxes = map[string]int{}
	s.hosted.Range(func(id, pid any) bool {
		p, isPID := pid.(*actor.PID)
		if srv, ok := rt.Server(id.(string)); ok && isPID {
			if depth, ok := procstate.PIDDepth(s.sys.ProcessRegistry, p); ok {
				snap.Mailboxes[srv.Name] = depth
			}
		}
		return true
	})
	return snap
}

// InstanceID is this daemon process's id (Deps.InstanceID): the MCP endpoint reports it in initialize and in
// its tools' provenance path, and refuses requests whose hop header already carries it.
func (s *System) InstanceID() string { return s.deps.InstanceID }

// Outbound is the daemon's outbound policy, for the front ends' registration checks.
func (s *System) Outbound() *backend.Outbound { return s.deps.outbound }
