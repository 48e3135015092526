package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Local messages of the discovery actor.
type (
	refreshMsg    struct{ id string }
	discoveryDone struct {
		id      string
		changed bool // the run stored a listing other than the one before
		err     error
	}
	discoveryDue struct {
		id  string
		seq uint64
	}
	// firstDiscovery asks for a discovery of a server's tools that starts after the ask (a new session's first);
	// the answer, an askReply, comes once it is stored (or failed).
	firstDiscovery struct{ id string }
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
	deps *Deps
	sys  *System
	runs *floodguard.Runs
	// waiting are the askers of firstDiscovery per server, answered by the next run that starts.
	waiting map[string][]*actor.PID
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
		a.waiting[m.id] = append(a.waiting[m.id], ctx.Sender())
		a.trigger(ctx, m.id, true)
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
			a.sys.listings.Forget(key)
		}
		for _, pid := range a.waiting[m.ServerId] {
			ctx.Send(pid, &askReply{err: fmt.Errorf("server %s: %w", m.ServerId, persistence.ErrNotFound)})
		}
		delete(a.waiting, m.ServerId)
	case *discoveryDone:
		a.act(ctx, m.id, a.runs.Done(m.id, m.changed, time.Now()))
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
		e0, s0 := a.sys.listings.Last(key)
		err := a.sys.discoverKey(context.Background(), key, next.Forced)
		if err != nil {
			a.deps.Logger.Warn("discovery failed", "key", key, "error", err)
		}
		// The router holds the tools of a CONNECTING server and puts them in its table with CONNECTED.
		for _, pid := range waiting {
			root.Send(pid, &askReply{err: err})
		}
		e1, s1 := a.sys.listings.Last(key)
		root.Send(self, &discoveryDone{id: key, changed: e0 != e1 || s0 != s1, err: err})
	}()
}

// discover lists every tool of a server through its actor, stores them namespaced and publishes what changed. Unless
// forced, a listing equal to the one this process stored last (under the same lease) is neither stored nor
// published.
func (s *System) discover(ctx context.Context, id string, forced bool) error {
	start := time.Now()
	deadline := time.Now().Add(s.deps.Config.RequestTimeout)
	res, err := s.askServer(ctx, id, &pb.ListTools{}, deadline)
	if err != nil {
		return err
	}
	reply, ok := res.(*pb.ListToolsReply)
	if !ok {
		return fmt.Errorf("unexpected reply %T to list tools", res)
	}
	if reply.Error != nil {
		return fmt.Errorf("tools/list: %s", reply.Error.Message)
	}
	defs := make([]persistence.ToolDef, 0, len(reply.ToolsJson))
	var looped []string // tools that passed through this daemon already
	var loopPath []string
	for _, raw := range reply.ToolsJson {
		var t struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"inputSchema"`
			Meta        map[string]any  `json:"_meta"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || t.Name == "" {
			s.deps.Logger.Warn("skipping a tool the server listed without a usable name", "server_id", id)
			continue
		}
		if path := backend.ViaPath(t.Meta); slices.Contains(path, s.deps.InstanceID) {
			// The tool is one of ours coming back through another aggregator (A->B->...->A): keeping it would
			// make each aggregator re-expose the other's copies without end.
			looped = append(looped, t.Name)
			loopPath = path
			continue
		}
		if len(t.InputSchema) == 0 || string(t.InputSchema) == "null" {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		defs = append(defs, persistence.ToolDef{OriginalName: t.Name, Description: t.Description, InputSchema: t.InputSchema, Definition: raw})
	}
	if len(looped) > 0 {
		s.deps.Logger.Warn("aggregator loop: the server re-exposes tools of this aggregator; dropping them",
			"code", errcode.LoopDetected, "server_id", id, "instance_id", s.deps.InstanceID, "via", strings.Join(loopPath, " -> "),
			"dropped", len(looped), "example", looped[0])
	}
	truncated := 0
	if limit := s.deps.Config.MaxToolsPerServer; limit > 0 && len(defs) > limit {
		truncated = len(defs) - limit
		s.deps.Logger.Warn("server lists more tools than the cap (MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER); keeping the first ones in listing order",
			"server_id", id, "listed", len(defs), "kept", limit, "dropped", truncated)
		defs = defs[:limit]
	}
	// Only the server's owner writes its tools; they were listed on its session, which this process holds only
	// while it holds the lease.
	fence := s.deps.owners.fence(id)
	if fence == nil {
		s.deps.Logger.Info("tools not stored: this process no longer owns the server", "server_id", id)
		return nil
	}
	sum := floodguard.Sum(reply.ToolsJson)
	if !forced && s.listings.Same(id, fence.Epoch, sum) {
		s.deps.Logger.Debug("tools unchanged after list_changed: nothing stored", "server_id", id)
		return nil
	}
	sctx, cancel := storeCtx()
	defer cancel()
	// Pins first: the tools are stored only once the pins say what of them may be served.
	if before, err := s.deps.Store.GetServer(sctx, id); err == nil {
		if err := s.pin(sctx, before, defs, fence); err != nil {
			if errors.Is(err, persistence.ErrLeaseLost) {
				s.deps.Logger.Info("tools not stored: the server's lease moved on", "server_id", id)
				return nil
			}
			return fmt.Errorf("definition pinning: %w", err)
		}
	} else if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	}
	diff, err := s.deps.Store.ReplaceServerTools(sctx, id, defs, fence)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		s.deps.Logger.Info("tools not stored: the server's lease moved on", "server_id", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("store tools: %w", err)
	}
	srv, _ := s.deps.Store.GetServer(sctx, id)
	if len(defs) == 0 {
		s.deps.Logger.Warn("server lists no tools", "server_id", id, "server", srv.Name)
	}
	if len(diff.Changed) > 0 {
		s.deps.Logger.Warn("server changed the definition of tools", "server_id", id, "server", srv.Name, "changed", diff.Changed)
	}
	s.deps.Logger.Info("tools discovered", "server_id", id, "server", srv.Name, "total", diff.Total,
		"added", len(diff.Added), "removed", len(diff.Removed), "changed", len(diff.Changed), "truncated", truncated, "took", time.Since(start).String())
	s.listings.Remember(id, fence.Epoch, sum)
	s.sys.EventStream.Publish(&pb.ToolsChanged{
		ServerId: id, ServerName: srv.Name, Added: diff.Added, Removed: diff.Removed, Changed: diff.Changed, Total: int32(diff.Total),
	})
	return nil
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
