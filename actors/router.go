package actors

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/hooks"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// routerActor is the one writer of the served catalogue: the routing table, and each server's served tools (its
// stored tools with its curation applied). It keeps every server's status from the event stream and, when a
// server's tools, registration or curation change, loads that server's rows and curation once, on a goroutine (the
// mailbox never waits for the store), builds the served tools and publishes both a new table (an immutable snapshot
// callers read without locks) and a versioned routing.ServedDelta of what changed, which the indexer and the
// classifier apply instead of reading the store themselves. The store stays the truth: the router reads it at
// start, after a resync and on every change notice (from this process or, through the feed, from another). The
// actor decides when and in which order changes apply; routing.Loader reads, routing.Builder applies.
type routerActor struct {
	deps   *Deps
	table  *atomic.Pointer[routing.RouteTable]
	hooks  *routeHooks
	served *routing.Versions
	// cat is the served catalogue the tables are built from (routing.Builder: what each change does to it).
	cat *routing.Builder

	// seq numbers the messages received; loads are the store reads running (or owed) per key (a server id,
	// featuresKey(id), profilesKey), at most routerLoads at once, that load reads with.
	seq   uint64
	loads *routing.Loads
	load  *routing.Loader
	// loading: the full load of Started or resync is running; every message but its result waits in stash.
	loading bool
	stash   []stashedMsg
	// waiting are status changes of CONNECTING servers that wait for the load of their tools; readers are the
	// readyMsg askers waiting for the loads owed before they asked.
	waiting map[string][]stashedMsg
	readers []readyWaiter
}

// stashedMsg is a message put aside with whom to answer.
type stashedMsg struct {
	msg    any
	sender *actor.PID
}

// readyWaiter is a readyMsg answered once every load owed before it (seq) has been applied; with keys, only the
// loads of those servers (storedReadyMsg).
type readyWaiter struct {
	seq    uint64
	sender *actor.PID
	keys   []string
}

// storedReadyMsg asks the router to answer once the loads of these servers owed before the ask have been applied:
// the table then holds every change of their tools announced before it (admin reads, System.StoredTools).
type storedReadyMsg struct{ ids []string }

// profilesKey is the loads key of the profiles.
const profilesKey = "\x00profiles"

// Results of the router's store reads, sent to itself.
type (
	// serverLoaded is one server's rows (rows.Found false: removed).
	serverLoaded struct {
		run  routing.Run
		rows routing.ServerRows
		err  error
	}
	featuresLoaded struct {
		run   routing.Run
		list  []persistence.Feature
		found bool
		err   error
	}
	profilesLoaded struct {
		token    uint64
		profiles []persistence.Profile
		err      error
	}
	// allLoaded is the whole catalogue (Started, resync); err panics the router (its supervisor restarts it).
	allLoaded struct {
		snap *routing.Catalogue
		err  error
	}
	// servedSnapshotAsk asks the router for a Full delta of every server in its table (the indexer's start).
	servedSnapshotAsk   struct{}
	servedSnapshotReply struct{ deltas []*routing.ServedDelta }
)

// routeHooks are the functions told about every new routing table (hooks.Set, under the names the access policy
// uses).
type routeHooks struct{ hooks.Set[*routing.RouteTable] }

func (h *routeHooks) add(fn func(*routing.RouteTable)) func() { return h.Add(fn) }
func (h *routeHooks) call(t *routing.RouteTable)              { h.Call(t) }

// Receive implements actor.Actor.
func (r *routerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.loadAll(ctx)
		return
	case *allLoaded:
		r.applyAll(ctx, m)
		return
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
		return
	}
	if r.loading {
		r.stash = append(r.stash, stashedMsg{msg: ctx.Message(), sender: ctx.Sender()})
		return
	}
	r.handle(ctx, ctx.Message(), ctx.Sender())
}

// handle is one message, received or taken from a stash (sender: whom to answer).
func (r *routerActor) handle(ctx actor.Context, in any, sender *actor.PID) {
	r.seq++
	switch m := in.(type) {
	case *readyMsg:
		r.readers = append(r.readers, readyWaiter{seq: r.seq, sender: sender})
		r.answerReaders(ctx)
	case *storedReadyMsg:
		r.readers = append(r.readers, readyWaiter{seq: r.seq, sender: sender, keys: m.ids})
		r.answerReaders(ctx)
	case *panicForTest:
		panic("router: crash injected by a test")
	case *resync:
		r.loadAll(ctx)
	case *servedSnapshotAsk:
		respond(ctx, sender, &servedSnapshotReply{deltas: r.cat.Snapshot()})
	case *msg.ApplyStatus:
		if r.mustWait(m.Evt) {
			r.waiting[m.Evt.ServerId] = append(r.waiting[m.Evt.ServerId], stashedMsg{msg: in, sender: sender})
			return
		}
		if r.applyStatus(m.Evt) {
			r.publish(ctx)
		}
		respond(ctx, sender, &askReply{})
	case *pb.ServerStatusChanged:
		if r.mustWait(m) {
			r.waiting[m.ServerId] = append(r.waiting[m.ServerId], stashedMsg{msg: in})
			return
		}
		if r.applyStatus(m) {
			r.publish(ctx)
		}
	case *pb.ServerUpdated:
		r.request(ctx, m.ServerId, m.ServerId, true)
	case *pb.ToolsChanged:
		r.request(ctx, m.ServerId, m.ServerId, false)
	case *pb.ClassificationDone:
		r.request(ctx, m.ServerId, m.ServerId, false)
	case *pb.FeaturesChanged:
		r.request(ctx, featuresKey(m.ServerId), m.ServerId, false)
	case *pb.ProfilesChanged:
		r.request(ctx, profilesKey, "", false)
	case *pb.ServerRemoved:
		r.remove(ctx, m.ServerId)
	case *serverLoaded:
		r.serverLoaded(ctx, m)
	case *featuresLoaded:
		r.featuresLoaded(ctx, m)
	case *profilesLoaded:
		r.profilesLoaded(ctx, m)
	}
}

// respond answers an ask (sender nil: nobody asked).
func respond(ctx actor.Context, sender *actor.PID, reply any) {
	if sender != nil {
		ctx.Send(sender, reply)
	}
}

// mustWait reports whether a status change of a server must wait for the load of its tools: the server is
// CONNECTING (or not known yet) and its tools are being loaded. A new session's tools, discovered while it is
// CONNECTING (awaitFirstDiscovery), thus enter the table with CONNECTED, in the same table: no reader sees the
// tools of a server that does not take calls yet, nor the server CONNECTED without them. This holds on every node,
// since the feed delivers the tools before the status that follows them.
func (r *routerActor) mustWait(m *pb.ServerStatusChanged) bool {
	if len(r.waiting[m.ServerId]) > 0 {
		return true // in order
	}
	if !r.loads.Pending(m.ServerId) || m.To == persistence.StatusConnecting {
		return false
	}
	s, known := r.cat.Server(m.ServerId)
	return !known || s.Status == persistence.StatusConnecting
}

// applyStatus puts a status change in the table (routing.Builder.ApplyStatus); false: it changes nothing.
func (r *routerActor) applyStatus(m *pb.ServerStatusChanged) bool {
	return r.cat.ApplyStatus(routing.StatusChange{ServerID: m.ServerId, ServerName: m.ServerName, To: m.To, Epoch: m.Epoch, Seq: m.Seq})
}

// remove forgets a removed server.
func (r *routerActor) remove(ctx actor.Context, id string) {
	for _, key := range []string{id, featuresKey(id)} {
		r.loads.Drop(key) // its result is dropped
	}
	for _, w := range r.waiting[id] {
		respond(ctx, w.sender, &askReply{})
	}
	delete(r.waiting, id)
	r.cat.Remove(id)
	r.publish(ctx)
	r.answerReaders(ctx)
}

// routerLoads bounds the router's store reads running at once (more wait their turn): a burst of registrations
// must not take every connection of the store from the writers.
const routerLoads = 4

// request owes key a store read (routing.Loads decides when it runs).
func (r *routerActor) request(ctx actor.Context, key, id string, registration bool) {
	r.startRuns(ctx, r.loads.Request(key, id, registration, r.seq))
}

// startRuns starts store reads on goroutines; each result comes back as a message.
func (r *routerActor) startRuns(ctx actor.Context, runs []routing.Run) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	for _, run := range runs {
		switch {
		case run.Key == profilesKey:
			go func() {
				sctx, cancel := storeCtx()
				defer cancel()
				ps, err := r.deps.Store.ListProfiles(sctx)
				root.Send(self, &profilesLoaded{token: run.Token, profiles: ps, err: err})
			}()
		case run.Key != run.ID:
			go func() {
				sctx, cancel := storeCtx()
				defer cancel()
				list, found, err := r.load.LoadFeatures(sctx, run.ID)
				root.Send(self, &featuresLoaded{run: run, list: list, found: found, err: err})
			}()
		default:
			// The rows this run builds on (the served tools it replaces: an unchanged definition keeps its routed
			// form) are never modified, so the goroutine may read them.
			prev, prevStored := r.cat.Tools(run.ID), r.cat.Stored(run.ID)
			go func() {
				sctx, cancel := storeCtx()
				defer cancel()
				rows, err := r.load.LoadServer(sctx, run.ID, prev, prevStored)
				root.Send(self, &serverLoaded{run: run, rows: rows, err: err})
			}()
		}
	}
}

// finish ends key's run (token) and starts the one owed after it, if any; false: the result is of a superseded
// run and must be dropped.
func (r *routerActor) finish(ctx actor.Context, key string, token uint64) bool {
	next, ok := r.loads.Finish(key, token)
	r.startRuns(ctx, next)
	return ok
}

// serverLoaded applies one server's loaded rows.
func (r *routerActor) serverLoaded(ctx actor.Context, m *serverLoaded) {
	r.startRuns(ctx, r.loads.Done())
	again, ok := r.loads.Current(m.run.Key, m.run.Token)
	if !ok {
		return
	}
	id := m.run.ID
	if m.err != nil {
		r.deps.Logger.Error("router: load server", "server_id", id, "error", m.err)
	} else {
		r.cat.ApplyServer(id, m.rows, m.run.Registration)
	}
	// A change came after this run started (again): the status changes waiting for the tools wait for the next
	// run. Otherwise they apply now, in the same table.
	r.finish(ctx, m.run.Key, m.run.Token)
	if !again {
		waiting := r.waiting[id]
		delete(r.waiting, id)
		for _, w := range waiting {
			r.handle(ctx, w.msg, w.sender)
		}
	}
	r.publish(ctx)
	r.answerReaders(ctx)
}

// featuresLoaded applies one server's loaded prompts and resources.
func (r *routerActor) featuresLoaded(ctx actor.Context, m *featuresLoaded) {
	r.startRuns(ctx, r.loads.Done())
	if !r.finish(ctx, m.run.Key, m.run.Token) {
		return
	}
	if m.err != nil {
		r.deps.Logger.Error("router: load prompts and resources", "server_id", m.run.ID, "error", m.err)
	} else {
		r.cat.SetFeatures(m.run.ID, m.list, m.found)
	}
	r.publish(ctx)
	r.answerReaders(ctx)
}

// profilesLoaded applies the loaded profiles.
func (r *routerActor) profilesLoaded(ctx actor.Context, m *profilesLoaded) {
	r.startRuns(ctx, r.loads.Done())
	if !r.finish(ctx, profilesKey, m.token) {
		return
	}
	if m.err != nil {
		r.deps.Logger.Error("router: load profiles", "error", m.err)
	} else {
		r.cat.SetProfiles(m.profiles)
	}
	r.publish(ctx)
	r.answerReaders(ctx)
}

// answerReaders answers the readyMsg askers whose owed loads have all been applied: a reader then finds in the
// table every change announced before it asked.
func (r *routerActor) answerReaders(ctx actor.Context) {
	if len(r.readers) == 0 {
		return
	}
	oldest := r.loads.Oldest(r.seq + 1)
	kept := r.readers[:0]
	for _, w := range r.readers {
		ready := w.seq < oldest
		if !ready && w.keys != nil {
			ready = true
			for _, key := range w.keys {
				ready = ready && w.seq < r.loads.OldestOf(key, r.seq+1)
			}
		}
		if ready {
			respond(ctx, w.sender, &askReply{})
		} else {
			kept = append(kept, w)
		}
	}
	r.readers = kept
}

// loadAll reads the whole catalogue on a goroutine; until it is applied every other message waits.
func (r *routerActor) loadAll(ctx actor.Context) {
	r.loading = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		sctx, cancel := storeCtx()
		defer cancel()
		snap, err := r.load.LoadAll(sctx)
		root.Send(self, &allLoaded{snap: snap, err: err})
	}()
}

// applyAll replaces the router's state with a full load, tells the readers every server's tools anew (a Full
// delta: the table may have moved while the notices were missed), and handles the messages that waited.
func (r *routerActor) applyAll(ctx actor.Context, m *allLoaded) {
	if m.err != nil {
		panic(m.err) // the supervisor retries; the router must not run on a partial table
	}
	r.cat.Reset(m.snap)
	r.loads.Reset()
	if r.waiting == nil {
		r.waiting = map[string][]stashedMsg{}
	}
	r.loading = false
	r.publish(ctx)
	// Status changes that waited for loads superseded by this one apply first, then what waited for it.
	var stash []stashedMsg
	for _, ws := range r.waiting {
		stash = append(stash, ws...)
	}
	r.waiting = map[string][]stashedMsg{}
	stash = append(stash, r.stash...)
	r.stash = nil
	for i, w := range stash {
		r.handle(ctx, w.msg, w.sender)
		if r.loading { // a resync among them: the rest waits for it
			r.stash = stash[i+1:]
			return
		}
	}
	r.answerReaders(ctx)
}

// publish stores the next table and then hands its deltas to the readers (on the event stream: the indexer and
// the classifier follow them), so that a reader that has a delta finds its tools in the table.
func (r *routerActor) publish(ctx actor.Context) {
	t, deltas := r.cat.Build(r.table.Load())
	r.table.Store(t)
	r.hooks.call(t)
	for _, d := range deltas {
		r.served.Publish(d)
		ctx.ActorSystem().EventStream.Publish(d)
	}
}

// Routes is the current routing table.
func (s *System) Routes() *routing.RouteTable { return s.routes.Load() }

// OnRoutesChanged calls fn with every new routing table until the returned function is called. fn runs on the
// router's goroutine: it must not block.
func (s *System) OnRoutesChanged(fn func(*routing.RouteTable)) (cancel func()) {
	return s.hooks.add(fn)
}

// StoredTools are these servers' tools as stored, as an admin reads them (routing.RouteTable.StoredTools: hidden
// and withheld tools too, listed definitions, no overrides), from the routing table once the router has applied
// every change of their tools announced before the call: a read after an acknowledged write (a curation change, a
// stored discovery, a classification) shows it, and a busy router's loads of other servers are not waited for. A
// server the router has not loaded (no longer registered) has no tools. The rows must not be modified.
func (s *System) StoredTools(ctx context.Context, ids ...string) (map[string][]persistence.Tool, error) {
	out := make(map[string][]persistence.Tool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if _, err := s.askActor(ctx, s.router, &storedReadyMsg{ids: ids}, 5*time.Second); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	t := s.routes.Load()
	for _, id := range ids {
		out[id], _ = t.StoredTools(id)
	}
	return out, nil
}
