package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search/served"
)

// indexerActor keeps the search engine equal to the served tools (BR-003, BR-008) through a served.Index, which
// holds the logic. It never reads the store: it indexes the router's served tools at start and then applies the
// router's deltas (routing.ServedDelta). Each delta applied is acknowledged (routing.Versions): a server's tools are
// searchable at the version acknowledged. Searches never wait for it: they read the engine directly.
type indexerActor struct {
	deps *Deps
	// newIndex builds the index at every start (the state is new: so are its hashes).
	newIndex func() *served.Index
	index    *served.Index
	// router answers the served tools at start; served is told each version applied (searchable).
	router *actor.PID
	served *routing.Versions
	// queued are the deltas received since the last flush (indexFlush, sent to itself when the first arrives):
	// deltas that pile up while the index is busy are applied together (served.Index.ApplyAll).
	queued []*routing.ServedDelta
}

// indexFlush tells the indexer to apply the deltas it has queued.
type indexFlush struct{}

// Receive implements actor.Actor.
func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *routing.ServedDelta:
		if len(a.queued) == 0 {
			ctx.Send(ctx.Self(), &indexFlush{})
		}
		a.queued = append(a.queued, m)
		return
	case *indexFlush:
		a.flush(ctx)
		return
	}
	// Anything else sees the deltas received before it applied (a readiness answer, a removal).
	a.flush(ctx)
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.index = a.newIndex()
		a.indexAll(ctx)
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *servedSnapshotReply:
		a.apply(ctx, m.deltas)
	case *pb.ServerRemoved:
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		a.index.RemoveServer(sctx, m.ServerId)
		cancel()
	}
}

// indexAll indexes the router's served tools of every server: at start, the router's table is the store's truth.
func (a *indexerActor) indexAll(ctx actor.Context) {
	res, err := ctx.RequestFuture(a.router, &servedSnapshotAsk{}, 5*time.Minute).Result()
	if err != nil {
		panic(fmt.Errorf("indexer: served tools from the router: %w", err)) // the supervisor retries
	}
	snap, ok := res.(*servedSnapshotReply)
	if !ok {
		panic(fmt.Errorf("indexer: unexpected reply %T from the router", res))
	}
	start := time.Now()
	a.apply(ctx, snap.deltas)
	a.deps.Logger.Info("search index built", "tools", a.index.Len(), "servers", len(snap.deltas), "took", time.Since(start).String())
}

// flush applies the queued deltas.
func (a *indexerActor) flush(ctx actor.Context) {
	if len(a.queued) == 0 {
		return
	}
	q := a.queued
	a.queued = nil
	a.apply(ctx, q)
}

// apply hands deltas to the index and acknowledges each version applied (the tools are searchable); a gap (a
// delta missed) is filled by asking the router for every server's tools again.
func (a *indexerActor) apply(ctx actor.Context, deltas []*routing.ServedDelta) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	have := make([]uint64, len(deltas))
	for i, d := range deltas {
		have[i] = a.index.Version(d.ServerID)
	}
	start := time.Now()
	outcomes := a.index.ApplyAll(sctx, deltas)
	took := time.Since(start).String()
	gap := false
	for i, d := range deltas {
		switch outcomes[i] {
		case served.Applied:
			a.served.Ack(d.ServerID, d.Version)
			a.deps.Logger.Debug("search index updated", "server_id", d.ServerID, "version", d.Version, "added", len(d.Added),
				"changed", len(d.Changed), "removed", len(d.Removed), "batch", len(deltas), "took", took)
		case served.Gap:
			a.deps.Logger.Warn("indexer: served tools missed; asking the router for all of them", "server_id", d.ServerID, "have", have[i], "got", d.Version)
			gap = true
		}
	}
	if gap {
		ctx.Request(a.router, &servedSnapshotAsk{})
	}
}
