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
}

// Receive implements actor.Actor.
func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.index = a.newIndex()
		a.indexAll(ctx)
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *routing.ServedDelta:
		a.apply(ctx, m)
	case *servedSnapshotReply:
		for _, d := range m.deltas {
			a.apply(ctx, d)
		}
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
	for _, d := range snap.deltas {
		a.apply(ctx, d)
	}
	a.deps.Logger.Info("search index built", "tools", a.index.Len(), "servers", len(snap.deltas), "took", time.Since(start).String())
}

// apply hands a delta to the index and acknowledges the version applied (the tools are searchable); a gap (a
// delta missed) is filled by asking the router for every server's tools again.
func (a *indexerActor) apply(ctx actor.Context, d *routing.ServedDelta) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	have := a.index.Version(d.ServerID)
	start := time.Now()
	switch a.index.Apply(sctx, d) {
	case served.Applied:
		a.served.Ack(d.ServerID, d.Version)
		a.deps.Logger.Debug("search index updated", "server_id", d.ServerID, "version", d.Version,
			"added", len(d.Added), "changed", len(d.Changed), "removed", len(d.Removed), "took", time.Since(start).String())
	case served.Gap:
		a.deps.Logger.Warn("indexer: served tools missed; asking the router for all of them", "server_id", d.ServerID, "have", have, "got", d.Version)
		ctx.Request(a.router, &servedSnapshotAsk{})
	}
}
