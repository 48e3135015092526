package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

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

// Outcomes of one classification.
const (
	outcomeClassified   = "classified"   // CLASSIFIED with 1-3 skills
	outcomeUnclassified = "unclassified" // the classifier answered, no skill reached the threshold
	outcomeFailed       = "failed"       // the classifier (or the store) failed: UNCLASSIFIED, retried later
	outcomeGone         = "gone"         // the tool was removed meanwhile
	outcomeInterrupted  = "interrupted"  // shutdown: the tool stays CLASSIFYING and is resumed at the next start
)

// classifyRef is a tool the classifier works on: its id and server, the text it is classified by, and the skills
// it keeps while it is being classified (the router's served row, or the stored row found at start).
type classifyRef struct {
	id      int64
	server  string
	name    string
	desc    string
	schema  []byte
	skills  []string
	primary *string
}

// refOf is the classifier's reference to a tool row.
func refOf(t *persistence.Tool) classifyRef {
	return classifyRef{id: t.ID, server: t.SourceServerID, name: t.Name, desc: t.Description, schema: t.InputSchema,
		skills: t.SkillIDs, primary: t.PrimarySkillID}
}

// Local messages of the classifier actor.
type (
	// classifyQueue asks for tools to be classified; force re-classifies a tool that is being classified right now
	// (its definition changed). seedFailed are UNCLASSIFIED tools found at start: they may have failed before the
	// restart, so they wait for the retry like failed ones.
	classifyQueue struct {
		items      []classifyItem
		seedFailed []classifyRef
	}
	classifyItem struct {
		ref   classifyRef
		force bool
	}
	classifyResult struct {
		owner   *classifierActor
		ref     classifyRef
		outcome string
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
// interval one failed tool is tried again, and when that works every failed tool is queued again (EC-009).
type classifierActor struct {
	deps    *Deps
	sys     *System
	c       classify.Classifier
	limit   int
	retry   time.Duration
	timeout time.Duration

	runCtx context.Context
	cancel context.CancelFunc
	sub    *eventstream.Subscription

	queue   []int64               // FIFO of tool ids; ids no longer in jobs are skipped
	jobs    map[int64]classifyRef // queued, not started
	running map[int64]classifyRef
	again   map[int64]bool // changed while being classified: classify once more
	failed  map[int64]classifyRef
	probe   int64 // the failed tool being retried (queued or running), 0 when none

	pending map[string]int     // per server: tools queued or running
	done    map[string][]int64 // per server: tools finished since the last ClassificationDone
	failing bool               // the last answer of the classifier was a failure (for logging transitions only)

	retryTimer *time.Timer
	flushTimer *time.Timer
}

func newClassifierActor(d *Deps, s *System) *classifierActor {
	a := &classifierActor{deps: d, sys: s, c: d.Classifier,
		limit: d.Config.ClassifyConcurrency, retry: d.Config.ClassifyRetryInterval, timeout: d.Config.ClassifyTimeout}
	if a.limit <= 0 {
		a.limit = defaultClassifyConcurrency
	}
	if a.retry <= 0 {
		a.retry = defaultClassifyRetryInterval
	}
	if a.timeout <= 0 {
		a.timeout = defaultClassifyTimeout
	}
	return a
}

// startClassifier spawns the classifier actor when Deps.Classifier is set. It runs after the registry has started
// and stops with it.
func (s *System) startClassifier() error {
	if s.deps.Classifier == nil {
		return nil
	}
	_, err := s.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newClassifierActor(s.deps, s) }, s.guardian), "classifier")
	if err != nil {
		return fmt.Errorf("spawn classifier: %w", err)
	}
	return nil
}

// classifierPID addresses the classifier actor by its fixed name.
func (s *System) classifierPID() *actor.PID { return actor.NewPID(s.sys.Address(), "classifier") }

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
		a.serverRemoved(m.ServerId)
		a.armRetry(ctx)
	case *scanServer:
		a.scan(ctx, m.id)
	case *classifyQueue:
		for _, r := range m.seedFailed {
			_, queued := a.jobs[r.id]
			if _, running := a.running[r.id]; !queued && !running {
				a.failed[r.id] = r
			}
		}
		for _, it := range m.items {
			a.enqueue(it.ref, it.force, false)
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
			a.startProbe(ctx)
			a.pump(ctx)
		}
	case *classifyFlushTick:
		if m.owner == a {
			a.flushTimer = nil
			for server := range a.done {
				a.flush(ctx, server)
			}
		}
	case *classifyBacklogAsk:
		ctx.Respond(ClassifierBacklog{Queued: len(a.jobs), InFlight: len(a.running), Failed: len(a.failed)})
	}
}

func (a *classifierActor) start(ctx actor.Context) {
	a.jobs, a.running, a.again = map[int64]classifyRef{}, map[int64]classifyRef{}, map[int64]bool{}
	a.failed, a.pending, a.done = map[int64]classifyRef{}, map[string]int{}, map[string][]int64{}
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
	// the same leftovers: each server's are taken up by its owner when it activates (scanServer) instead.
	if a.sys.members == nil {
		a.scan(ctx, "")
	}
}

// scanServer asks the classifier for the leftovers of one server (sent by the server's actor when it becomes the
// owner, in a cluster).
type scanServer struct{ id string }

// scan queues the stored tools of one server (all servers: "") that wait for classification.
func (a *classifierActor) scan(ctx actor.Context, serverID string) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		tools, _, err := a.deps.Store.ListTools(sctx, persistence.ListToolsFilter{ServerID: serverID})
		if err != nil && !errors.Is(err, persistence.ErrNotFound) {
			a.deps.Logger.Error("classifier: list stored tools", "server_id", serverID, "error", err)
			return
		}
		q := &classifyQueue{}
		for i := range tools {
			t := &tools[i]
			ref := refOf(t)
			switch t.ClassificationState {
			case persistence.ClassificationDiscovered, persistence.ClassificationClassifying:
				q.items = append(q.items, classifyItem{ref: ref})
			case persistence.ClassificationUnclassified:
				q.seedFailed = append(q.seedFailed, ref)
			}
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
	for _, id := range d.Removed {
		delete(a.failed, id)
		if r, ok := a.jobs[id]; ok {
			a.dropJob(id, r)
		}
	}
	if d.Full || (a.sys.feed != nil || a.sys.members != nil) && a.deps.owners.fence(d.ServerID) == nil {
		return
	}
	q := &classifyQueue{}
	for _, st := range d.Added {
		if st.Tool.ClassificationState == persistence.ClassificationDiscovered {
			q.items = append(q.items, classifyItem{ref: refOf(st.Tool)})
		}
	}
	for _, st := range d.Changed {
		if st.Redefined {
			q.items = append(q.items, classifyItem{ref: refOf(st.Tool), force: true})
		}
	}
	if len(q.items) > 0 {
		ctx.Send(ctx.Self(), q)
	}
}

func (a *classifierActor) serverRemoved(server string) {
	for id, r := range a.failed {
		if r.server == server {
			delete(a.failed, id)
		}
	}
	for id, r := range a.jobs {
		if r.server == server {
			a.dropJob(id, r)
		}
	}
	for id, r := range a.running {
		if r.server == server {
			delete(a.again, id)
		}
	}
	delete(a.pending, server)
	delete(a.done, server)
}

// dropJob takes a queued tool out of the queue (its id stays in the FIFO and is skipped).
func (a *classifierActor) dropJob(id int64, r classifyRef) {
	delete(a.jobs, id)
	a.release(r.server)
	if a.probe == id {
		a.probe = 0
	}
}

// release counts one tool of a server as no longer queued or running.
func (a *classifierActor) release(server string) (last bool) {
	n, ok := a.pending[server]
	if !ok {
		return false
	}
	if n <= 1 {
		delete(a.pending, server)
		return true
	}
	a.pending[server] = n - 1
	return false
}

// enqueue queues a tool once: a tool already queued is not queued again, and one being classified is classified
// again afterwards only when force says its definition changed.
func (a *classifierActor) enqueue(r classifyRef, force, probe bool) {
	delete(a.failed, r.id)
	if _, ok := a.running[r.id]; ok {
		if force {
			a.again[r.id] = true
		}
		return
	}
	if _, ok := a.jobs[r.id]; ok {
		return
	}
	a.jobs[r.id] = r
	a.pending[r.server]++
	if probe {
		a.queue = append([]int64{r.id}, a.queue...)
	} else {
		a.queue = append(a.queue, r.id)
	}
}

// pump starts queued classifications while fewer than limit run.
func (a *classifierActor) pump(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	for len(a.running) < a.limit && len(a.queue) > 0 {
		id := a.queue[0]
		a.queue = a.queue[1:]
		r, ok := a.jobs[id]
		if !ok {
			continue
		}
		delete(a.jobs, id)
		a.running[id] = r
		go func() {
			outcome, err := a.classifyOne(r)
			root.Send(self, &classifyResult{owner: a, ref: r, outcome: outcome, err: err})
		}()
	}
	if len(a.queue) == 0 {
		a.queue = nil // let the backing array go
	}
}

// classifyOne runs one tool through DISCOVERED -> CLASSIFYING -> CLASSIFIED | UNCLASSIFIED. It runs on its own
// goroutine.
func (a *classifierActor) classifyOne(r classifyRef) (outcome string, err error) {
	defer func() {
		if p := recover(); p != nil {
			outcome, err = outcomeFailed, fmt.Errorf("classifier panicked: %v", p)
			a.setState(r.id, persistence.ToolClassification{State: persistence.ClassificationUnclassified})
		}
	}()
	// While it is being classified the tool keeps the skills it had (a changed tool is reclassified).
	if err := a.setState(r.id, persistence.ToolClassification{State: persistence.ClassificationClassifying,
		SkillIDs: r.skills, PrimarySkillID: r.primary}); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return outcomeGone, nil
		}
		return outcomeFailed, fmt.Errorf("store CLASSIFYING: %w", err)
	}
	cctx, ccancel := context.WithTimeout(a.runCtx, a.timeout)
	res, cerr := a.c.Classify(cctx, classify.Tool{Name: r.name, Description: r.desc, InputSchema: r.schema})
	ccancel()
	if a.runCtx.Err() != nil {
		return outcomeInterrupted, nil
	}
	c := persistence.ToolClassification{State: persistence.ClassificationUnclassified}
	outcome = outcomeUnclassified
	switch {
	case cerr != nil:
		outcome = outcomeFailed
	case len(res.Assignments) > 0:
		outcome = outcomeClassified
		primary := res.Primary
		c = persistence.ToolClassification{State: persistence.ClassificationClassified, SkillIDs: res.SkillIDs(), PrimarySkillID: &primary}
	}
	if err := a.setState(r.id, c); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return outcomeGone, nil
		}
		return outcomeFailed, fmt.Errorf("store %s: %w", c.State, err)
	}
	return outcome, cerr
}

func (a *classifierActor) setState(id int64, c persistence.ToolClassification) error {
	sctx, cancel := storeCtx()
	defer cancel()
	return a.deps.Store.SetToolClassification(sctx, id, c)
}

// finished records the outcome of one classification.
func (a *classifierActor) finished(ctx actor.Context, m *classifyResult) {
	r := m.ref
	if _, ok := a.running[r.id]; !ok {
		return
	}
	delete(a.running, r.id)
	wasProbe := a.probe == r.id
	if wasProbe {
		a.probe = 0
	}
	switch m.outcome {
	case outcomeClassified, outcomeUnclassified:
		a.deps.Metrics.Classification(a.c.Name(), m.outcome)
		if a.failing {
			a.failing = false
			a.deps.Logger.Info("classifier answers again", "classifier", a.c.Name(), "failed_tools", len(a.failed))
		}
		if wasProbe && len(a.failed) > 0 {
			// The classifier recovered: every tool that failed is classified again (EC-009).
			a.deps.Logger.Info("classifier recovered: retrying failed tools", "classifier", a.c.Name(), "tools", len(a.failed))
			for _, f := range a.sortedFailed() {
				a.enqueue(f, false, false)
			}
		}
	case outcomeFailed:
		a.deps.Metrics.Classification(a.c.Name(), outcomeFailed)
		a.failed[r.id] = r
		if !a.failing {
			a.failing = true
			a.deps.Logger.Warn("tool classification failed; the tool stays unclassified and searchable and is retried when the classifier recovers",
				"classifier", a.c.Name(), "tool", r.name, "error", m.err, "retry_interval", a.retry.String())
		} else {
			a.deps.Logger.Debug("tool classification failed", "classifier", a.c.Name(), "tool", r.name, "error", m.err)
		}
	}
	if a.again[r.id] {
		delete(a.again, r.id)
		if m.outcome != outcomeGone && m.outcome != outcomeInterrupted {
			a.enqueue(r, false, false)
		}
	}
	if m.outcome == outcomeClassified || m.outcome == outcomeUnclassified || m.outcome == outcomeFailed {
		if _, live := a.pending[r.server]; live { // else the server was removed meanwhile
			a.done[r.server] = append(a.done[r.server], r.id)
		}
	}
	if a.release(r.server) {
		a.flush(ctx, r.server)
	} else if len(a.done[r.server]) > 0 && a.flushTimer == nil {
		self, root := ctx.Self(), ctx.ActorSystem().Root
		a.flushTimer = time.AfterFunc(classifyFlushEvery, func() { root.Send(self, &classifyFlushTick{owner: a}) })
	}
	if wasProbe && m.outcome == outcomeGone {
		a.startProbe(ctx) // not a signal either way: try another failed tool
	}
	a.armRetry(ctx)
}

// flush tells the event stream (and so the router) which tools of a server got their classification.
func (a *classifierActor) flush(ctx actor.Context, server string) {
	ids := a.done[server]
	delete(a.done, server)
	if len(ids) > 0 {
		ctx.ActorSystem().EventStream.Publish(&pb.ClassificationDone{ServerId: server, ToolIds: ids})
	}
}

// armRetry schedules the next retry of a failed tool, while there are failed tools and none is being retried.
func (a *classifierActor) armRetry(ctx actor.Context) {
	if a.retryTimer != nil || a.probe != 0 || len(a.failed) == 0 {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.retryTimer = time.AfterFunc(a.retry, func() { root.Send(self, &classifyRetryTick{owner: a}) })
}

// startProbe retries one failed tool (the oldest), ahead of the queue.
func (a *classifierActor) startProbe(ctx actor.Context) {
	if a.probe != 0 || len(a.failed) == 0 {
		return
	}
	r := a.sortedFailed()[0]
	a.probe = r.id
	a.enqueue(r, false, true)
}

func (a *classifierActor) sortedFailed() []classifyRef {
	out := make([]classifyRef, 0, len(a.failed))
	for _, r := range a.failed {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y classifyRef) int {
		switch {
		case x.id < y.id:
			return -1
		case x.id > y.id:
			return 1
		}
		return 0
	})
	return out
}
