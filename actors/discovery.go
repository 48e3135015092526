package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/discovery"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/retry"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Local messages of the discovery actor.
type (
	refreshMsg    struct{ id string }
	discoveryDone struct {
		id      string
		forced  bool
		changed bool // the run stored a listing other than the one before
		err     error
	}
	// discoveryRetry is the timer of a run that could not write the store (discovery.ErrStore) going off.
	discoveryRetry struct {
		id     string
		forced bool
	}
	discoveryDue struct {
		id  string
		seq uint64
	}
)

// discoveryActor keeps the stored tools of every server equal to what the server lists (BR-003): it runs on every
// successful connection, on notifications/tools/list_changed and on an admin refresh. Discoveries of different
// servers run in parallel; triggers for a server already being discovered coalesce into one more run, and a run
// caused by list_changed starts no sooner than Config.ListChangedInterval after the previous one of that server and
// kind when that one found nothing new (floodguard.Runs), so a backend flooding list_changed costs at most one
// listing per interval while a backend's real changes are picked up at once. Such a run stores and publishes
// nothing when the server lists what was stored last (floodguard.Listings): no store write, no routing-table
// reload, no list_changed to the clients.
type discoveryActor struct {
	log  *slog.Logger
	work *discovery.Worker
	runs *floodguard.Runs
	// waiting are the askers of firstDiscovery per server, answered by the next run that starts.
	waiting map[string][]*actor.PID
	// storeFailures counts, per key, the runs in a row that listed the server but could not write the store; each
	// is run again after storeRetry's delay, until one succeeds or the server is removed.
	storeFailures map[string]int
}

// storeRetryDelay is when to run again a discovery whose store write failed n times in a row: 1 s, doubling to at
// most 30 s.
func storeRetryDelay(n int) time.Duration {
	return retry.Backoff{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}.Delay(n, nil)
}

// Receive implements actor.Actor.
func (a *discoveryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.ServerStatusChanged:
		// A new session's tools were discovered before it entered CONNECTED (firstDiscovery); its prompts and
		// resources follow.
		if m.To == persistence.StatusConnected && m.From == persistence.StatusConnecting {
			a.trigger(ctx, featuresKey(m.ServerId), true)
		}
	case *firstDiscovery:
		if a.waiting == nil {
			a.waiting = map[string][]*actor.PID{}
		}
		a.waiting[m.ID] = append(a.waiting[m.ID], ctx.Sender())
		a.trigger(ctx, m.ID, true)
	case *pb.ToolsListChanged:
		a.trigger(ctx, m.ServerId, false)
	case *pb.FeaturesListChanged:
		a.trigger(ctx, featuresKey(m.ServerId), false)
	case *refreshMsg:
		a.trigger(ctx, m.id, true)
		a.trigger(ctx, featuresKey(m.id), true)
		ctx.Respond(&askReply{})
	case *pb.ServerRemoved:
		for _, key := range []string{m.ServerId, featuresKey(m.ServerId)} {
			a.runs.Forget(key)
			a.work.Forget(key)
		}
		for _, pid := range a.waiting[m.ServerId] {
			ctx.Send(pid, &askReply{Err: fmt.Errorf("server %s: %w", m.ServerId, persistence.ErrNotFound)})
		}
		delete(a.waiting, m.ServerId)
		delete(a.storeFailures, m.ServerId)
		delete(a.storeFailures, featuresKey(m.ServerId))
	case *discoveryDone:
		a.retryStoreFailure(ctx, m)
		a.act(ctx, m.id, a.runs.Done(m.id, m.changed, time.Now()))
	case *discoveryRetry:
		if a.storeFailures[m.id] > 0 { // not removed, not succeeded meanwhile
			a.trigger(ctx, m.id, m.forced)
		}
	case *discoveryDue:
		a.act(ctx, m.id, a.runs.Due(m.id, m.seq, time.Now()))
	}
}

// trigger owes key a discovery; forced: one that stores and publishes even when the listing did not change (a new
// session, an admin refresh).
func (a *discoveryActor) trigger(ctx actor.Context, key string, forced bool) {
	a.act(ctx, key, a.runs.Trigger(key, forced, time.Now()))
}

// act does what the scheduler says: start a discovery of key, or come back when it is due.
func (a *discoveryActor) act(ctx actor.Context, key string, next floodguard.Next) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if next.After > 0 {
		time.AfterFunc(next.After, func() { root.Send(self, &discoveryDue{id: key, seq: next.Seq}) })
		return
	}
	if !next.Run {
		return
	}
	waiting := a.waiting[key]
	delete(a.waiting, key)
	go func() {
		changed, err := a.work.Run(context.Background(), key, next.Forced)
		if err != nil {
			a.log.Warn("discovery failed", "key", key, "error", err)
		}
		// The router holds the tools of a CONNECTING server and puts them in its table with CONNECTED.
		for _, pid := range waiting {
			root.Send(pid, &askReply{Err: err})
		}
		root.Send(self, &discoveryDone{id: key, forced: next.Forced, changed: changed, err: err})
	}()
}

// retryStoreFailure arms a run again of a discovery that listed its server but could not store the listing: the
// backend is fine, and without it the server would serve without its tools until its next list_changed or
// reconnect (a first discovery that fails this way lets the server enter CONNECTED; see onFirstDiscovered). A
// success ends the series.
func (a *discoveryActor) retryStoreFailure(ctx actor.Context, m *discoveryDone) {
	if !errors.Is(m.err, discovery.ErrStore) {
		delete(a.storeFailures, m.id)
		return
	}
	if a.storeFailures == nil {
		a.storeFailures = map[string]int{}
	}
	a.storeFailures[m.id]++
	delay := storeRetryDelay(a.storeFailures[m.id])
	a.log.Warn("discovery will run again: its store write failed", "key", m.id, "attempt", a.storeFailures[m.id], "in", delay.Round(time.Millisecond).String())
	self, root, retry := ctx.Self(), ctx.ActorSystem().Root, &discoveryRetry{id: m.id, forced: m.forced}
	time.AfterFunc(delay, func() { root.Send(self, retry) })
}

// featuresKey is the discovery actor's key of a server's feature discovery (the router keys its loads alike).
func featuresKey(id string) string { return discovery.FeaturesKey(id) }

// newDiscoveryWorker is the discovery actor's worker: it lists through the server actors, writes the store under
// this process's leases and publishes on the event stream, and nothing else of the System.
func (s *System) newDiscoveryWorker() *discovery.Worker {
	d := s.deps
	list := func(ctx context.Context, id string, msg any) (any, error) {
		return s.askServer(ctx, id, msg, time.Now().Add(d.Config.RequestTimeout))
	}
	return discovery.NewWorker(discovery.Ports{
		ListTools: func(ctx context.Context, id string) ([][]byte, error) {
			res, err := list(ctx, id, &pb.ListTools{})
			if err != nil {
				return nil, err
			}
			reply, ok := res.(*pb.ListToolsReply)
			if !ok {
				return nil, fmt.Errorf("unexpected reply %T to list tools", res)
			}
			if reply.Error != nil {
				return nil, fmt.Errorf("tools/list: %s", reply.Error.Message)
			}
			return reply.ToolsJson, nil
		},
		ListFeatures: func(ctx context.Context, id string) (prompts, resources, templates [][]byte, err error) {
			res, err := list(ctx, id, &pb.ListFeatures{})
			if err != nil {
				return nil, nil, nil, err
			}
			reply, ok := res.(*pb.ListFeaturesReply)
			if !ok {
				return nil, nil, nil, fmt.Errorf("unexpected reply %T to list features", res)
			}
			if reply.Error != nil {
				return nil, nil, nil, fmt.Errorf("prompts/resources list: %s", reply.Error.Message)
			}
			return reply.PromptsJson, reply.ResourcesJson, reply.TemplatesJson, nil
		},
		Fence:             func(id string) *persistence.Lease { return d.owners.fence(id) },
		LeaseLost:         s.leaseLost,
		Store:             d.Store,
		Publish:           s.sys.EventStream.Publish,
		PinHash:           s.pinHashes.Def,
		Metrics:           d.Metrics,
		Logger:            d.Logger,
		InstanceID:        d.InstanceID,
		MaxToolsPerServer: d.Config.MaxToolsPerServer,
		StoreTimeout:      storeTimeout,
	})
}

// RefreshTools starts a discovery of one server (POST /servers/{id}/tools/refresh). The server must be connected.
func (s *System) RefreshTools(ctx context.Context, id string) error {
	srv, ok := s.Routes().Server(id)
	if !ok {
		return fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
	}
	if !callable(srv.Status) {
		return &routing.UnavailableError{Server: srv}
	}
	_, err := s.askActor(ctx, s.discovery, &refreshMsg{id: id}, 0)
	return err
}
