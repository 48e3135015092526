package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search/classify"
)

// Defaults of the classifier pool (BR-004, EC-009), used when the Config fields are zero.
const (
	defaultClassifyConcurrency   = 5
	defaultClassifyRetryInterval = 30 * time.Second
	defaultClassifyTimeout       = 2 * time.Minute
	// classifyFlushEvery bounds how long finished classifications of a server wait before the routing table is
	// told, while the rest of its batch is still running (a large server's tools show their skills as they come).
	classifyFlushEvery = time.Second
)

// Local messages of the classifier actor.
type (
	// classifyQueue asks for tools to be classified; force re-classifies a tool that is being classified right now
	// (its definition changed). seedFailed are UNCLASSIFIED tools found at start: they may have failed before the
	// restart, so they wait for the retry like failed ones.
	classifyQueue struct {
		items      []classifyItem
		seedFailed []classify.Ref
	}
	classifyItem struct {
		ref   classify.Ref
		force bool
	}
	classifyResult struct {
		owner   *classifierActor
		ref     classify.Ref
		outcome classify.Outcome
		err     error
	}
	classifyRetryTick  struct{ owner *classifierActor }
	classifyFlushTick  struct{ owner *classifierActor }
	classifyBacklogAsk struct{}
)

// ClassifierBacklog is the classifier's work: tools waiting, being classified, and failed (waiting for the
// classifier to recover).
type ClassifierBacklog struct {
	Queued, InFlight, Failed int
}

// Total is every tool not settled yet.
func (b ClassifierBacklog) Total() int { return b.Queued + b.InFlight + b.Failed }

// classifierActor classifies tools into skills (BR-004) in the background: at most limit classifications run at
// once, each in its own goroutine that reports back by message, so neither discovery nor this actor's mailbox ever
// waits for a classifier. A tool moves DISCOVERED -> CLASSIFYING -> CLASSIFIED | UNCLASSIFIED. When the classifier
// fails, the tool is UNCLASSIFIED (is_classified false, still routable and searchable) and remembered; every retry
// interval one failed tool is tried again, and when that works every failed tool is queued again (EC-009). The
// decisions (what waits, runs, failed, is retried, is announced) are classify.Queue's, the work on one tool (store,
// classify, store) classify.Runner's and the operator's log classify.Report's; the actor schedules them.
type classifierActor struct {
	deps  *Deps
	sys   *System
	run   *classify.Runner
	limit int
	retry time.Duration

	runCtx context.Context
	cancel context.CancelFunc
	sub    *eventstream.Subscription

	q      *classify.Queue
	report *classify.Report

	retryTimer *time.Timer
	flushTimer *time.Timer
}

func newClassifierActor(d *Deps, s *System) *classifierActor {
	a := &classifierActor{deps: d, sys: s, limit: d.Config.ClassifyConcurrency, retry: d.Config.ClassifyRetryInterval,
		run: &classify.Runner{Classifier: d.Classifier, Store: d.Store, Timeout: d.Config.ClassifyTimeout, StoreTimeout: storeTimeout}}
	if a.limit <= 0 {
		a.limit = defaultClassifyConcurrency
	}
	if a.retry <= 0 {
		a.retry = defaultClassifyRetryInterval
	}
	if a.run.Timeout <= 0 {
		a.run.Timeout = defaultClassifyTimeout
	}
	a.report = &classify.Report{Logger: d.Logger, Name: d.Classifier.Name(), Retry: a.retry, Count: d.Metrics.Classification}
	return a
}

// startClassifier spawns the classifier actor when Deps.Classifier is set. It runs after the registry has started
// and stops with it.
func (s *System) startClassifier() error {
	if s.deps.Classifier == nil {
		return nil
	}
	_, err := s.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newClassifierActor(s.deps, s) }, s.guardian), msg.ClassifierName)
	if err != nil {
		return fmt.Errorf("spawn classifier: %w", err)
	}
	return nil
}

// classifierPID addresses the classifier actor by its fixed name.
func (s *System) classifierPID() *actor.PID { return actor.NewPID(s.sys.Address(), msg.ClassifierName) }

// ClassificationBacklog reports the classifier's queued, running and failed tools (all zero without a classifier).
func (s *System) ClassificationBacklog(ctx context.Context) (ClassifierBacklog, error) {
	if s.deps.Classifier == nil {
		return ClassifierBacklog{}, nil
	}
	res, err := s.askActor(ctx, s.classifierPID(), &classifyBacklogAsk{}, 0)
	if err != nil {
		return ClassifierBacklog{}, err
	}
	b, ok := res.(ClassifierBacklog)
	if !ok {
		return ClassifierBacklog{}, fmt.Errorf("unexpected reply %T to classification backlog", res)
	}
	return b, nil
}

// Receive implements actor.Actor.
func (a *classifierActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping, *actor.Restarting:
		a.cleanup()
	case *actor.Terminated:
		// The registry stopped: the system is shutting down. Classifications in flight are cancelled and their
		// tools stay CLASSIFYING, to be resumed at the next start.
		a.cleanup()
		ctx.Stop(ctx.Self())
	case *routing.ServedDelta:
		a.toolsChanged(ctx, m)
		a.armRetry(ctx) // a dropped tool may have been the one being retried
	case *pb.ServerRemoved:
		a.q.RemoveServer(m.ServerId)
		a.armRetry(ctx)
	case *msg.ScanServer:
		a.scan(ctx, m.ID)
	case *classifyQueue:
		a.q.SeedFailed(m.seedFailed)
		for _, it := range m.items {
			a.q.Enqueue(it.ref, it.force)
		}
		a.armRetry(ctx)
		a.pump(ctx)
	case *classifyResult:
		if m.owner == a {
			a.finished(ctx, m)
			a.pump(ctx)
		}
	case *classifyRetryTick:
		if m.owner == a {
			a.retryTimer = nil
			a.q.StartProbe()
			a.pump(ctx)
		}
	case *classifyFlushTick:
		if m.owner == a {
			a.flushTimer = nil
			for _, server := range a.q.DoneServers() {
				a.flush(ctx, server)
			}
		}
	case *classifyBacklogAsk:
		queued, running, failed := a.q.Backlog()
		ctx.Respond(ClassifierBacklog{Queued: queued, InFlight: running, Failed: failed})
	}
}

func (a *classifierActor) start(ctx actor.Context) {
	a.q = classify.NewQueue(a.limit)
	a.runCtx, a.cancel = context.WithCancel(context.Background())
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.sub = ctx.ActorSystem().EventStream.Subscribe(func(evt any) {
		switch evt.(type) {
		case *routing.ServedDelta, *pb.ServerRemoved:
			root.Send(self, evt)
		}
	})
	if a.sys.registry != nil {
		ctx.Watch(a.sys.registry)
	}
	// Tools stored before the subscription: new ones (DISCOVERED) and those whose classification was interrupted
	// (CLASSIFYING). A tool also announced by an event meanwhile is queued once. In a cluster every node would find
	// the same leftovers: each server's are taken up by its owner when it activates (msg.ScanServer) instead.
	if a.sys.members == nil {
		a.scan(ctx, "")
	}
}

// scan queues the stored tools of one server (all servers: "") that wait for classification.
func (a *classifierActor) scan(ctx actor.Context, serverID string) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		items, failed, err := a.run.Pending(context.Background(), serverID)
		if err != nil {
			a.deps.Logger.Error("classifier: list stored tools", "server_id", serverID, "error", err)
			return
		}
		q := &classifyQueue{seedFailed: failed}
		for _, ref := range items {
			q.items = append(q.items, classifyItem{ref: ref})
		}
		root.Send(self, q)
	}()
}

func (a *classifierActor) cleanup() {
	if a.sub != nil {
		a.sys.sys.EventStream.Unsubscribe(a.sub)
		a.sub = nil
	}
	if a.cancel != nil {
		a.cancel()
	}
	if a.retryTimer != nil {
		a.retryTimer.Stop()
		a.retryTimer = nil
	}
	if a.flushTimer != nil {
		a.flushTimer.Stop()
		a.flushTimer = nil
	}
}

// toolsChanged applies the router's delta of a server's served tools: new tools still DISCOVERED are queued, tools
// whose served text changed are classified again, removed ones are forgotten. Where other processes share the
// store (a feed or a cluster) only the server's owner classifies (its discovery stored the tools); a Full delta (the router reloaded everything) queues nothing: what waits for
// classification at start is found by scan.
func (a *classifierActor) toolsChanged(ctx actor.Context, d *routing.ServedDelta) {
	a.q.Remove(d.Removed)
	if d.Full || (a.sys.feed != nil || a.sys.members != nil) && a.deps.owners.fence(d.ServerID) == nil {
		return
	}
	q := &classifyQueue{}
	for _, st := range d.Added {
		if st.Tool.ClassificationState == persistence.ClassificationDiscovered {
			q.items = append(q.items, classifyItem{ref: classify.RefOf(st.Tool)})
		}
	}
	for _, st := range d.Changed {
		if st.Redefined {
			q.items = append(q.items, classifyItem{ref: classify.RefOf(st.Tool), force: true})
		}
	}
	if len(q.items) > 0 {
		ctx.Send(ctx.Self(), q)
	}
}

// pump starts queued classifications while fewer than limit run.
func (a *classifierActor) pump(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	for {
		r, ok := a.q.Next()
		if !ok {
			return
		}
		go func() {
			outcome, err := a.run.Run(a.runCtx, r)
			root.Send(self, &classifyResult{owner: a, ref: r, outcome: outcome, err: err})
		}()
	}
}

// finished records the outcome of one classification: the queue decides, the actor counts, logs, announces and
// arms the timers.
func (a *classifierActor) finished(ctx actor.Context, m *classifyResult) {
	r := m.ref
	res := a.q.Finish(r.ID, m.outcome)
	if !res.Known {
		return
	}
	_, _, failed := a.q.Backlog()
	a.report.Outcome(m.outcome, r.Name, m.err, res, failed)
	if res.Last {
		a.flush(ctx, r.Server)
	} else if res.Waiting && a.flushTimer == nil {
		self, root := ctx.Self(), ctx.ActorSystem().Root
		a.flushTimer = time.AfterFunc(classifyFlushEvery, func() { root.Send(self, &classifyFlushTick{owner: a}) })
	}
	a.armRetry(ctx)
}

// flush tells the event stream (and so the router) which tools of a server got their classification.
func (a *classifierActor) flush(ctx actor.Context, server string) {
	if ids := a.q.TakeDone(server); len(ids) > 0 {
		ctx.ActorSystem().EventStream.Publish(&pb.ClassificationDone{ServerId: server, ToolIds: ids})
	}
}

// armRetry schedules the next retry of a failed tool, while there are failed tools and none is being retried.
func (a *classifierActor) armRetry(ctx actor.Context) {
	if a.retryTimer != nil || !a.q.NeedsRetry() {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.retryTimer = time.AfterFunc(a.retry, func() { root.Send(self, &classifyRetryTick{owner: a}) })
}
