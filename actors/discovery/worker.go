package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// pinAttempts bounds the retries of a pin write that lost a race with an admin's approval (ErrChanged).
const pinAttempts = 3

// ErrStore marks a discovery that listed the server but could not write what it listed: the store failed or was
// too slow (a big catalogue on a loaded machine). The backend is fine, so the discovery actor runs it again.
var ErrStore = errors.New("discovery could not write the store")

// storeError is a store failure of a run: its message is the failure's, and it is ErrStore.
type storeError struct{ err error }

func (e storeError) Error() string        { return e.err.Error() }
func (e storeError) Unwrap() error        { return e.err }
func (e storeError) Is(target error) bool { return target == ErrStore }

// Store is what discovery reads and writes of the store.
type Store interface {
	GetServer(ctx context.Context, id string) (persistence.Server, error)
	ReplaceServerTools(ctx context.Context, serverID string, defs []persistence.ToolDef, fence *persistence.Lease) (persistence.ToolDiff, error)
	ReplaceServerFeatures(ctx context.Context, serverID string, defs []persistence.FeatureDef, fence *persistence.Lease) error
	ListToolPins(ctx context.Context, serverID string) (persistence.PinSet, error)
	SaveToolPins(ctx context.Context, serverID string, expect int64, pins []persistence.ToolPin, fence *persistence.Lease) error
}

// Metrics records what discovery drops and holds (metrics.Metrics; nil records nothing).
type Metrics interface {
	ToolChanges(server string, pending int, held map[string]int)
	ReservedURIs(server, kind string, n int)
}

// Ports are the few things a Worker does outside itself, given at construction.
type Ports struct {
	// ListTools asks the server's actor for every tool its session lists (tools/list paged), each a JSON
	// definition; ListFeatures likewise for its prompts, resources and resource templates.
	ListTools    func(ctx context.Context, id string) ([][]byte, error)
	ListFeatures func(ctx context.Context, id string) (prompts, resources, templates [][]byte, err error)
	// Fence is the lease that fences writes about a server, nil when this process does not own it: only the
	// owner writes a server's tools, since they were listed on its session.
	Fence func(id string) *persistence.Lease
	Store Store
	// Publish puts an event on the event stream (ToolsChanged, FeaturesChanged).
	Publish func(evt any)
	// LeaseLost tells the server's actor that a fenced write found its lease of that epoch gone (lapsed or taken):
	// the listing was not stored, and only a new session under a new lease lists the tools again.
	LeaseLost func(id string, epoch int64, why string)
	// PinHash is a tool definition's pin hash (routing.PinHashes.Def, shared with the router).
	PinHash func(server, name string, def []byte) (string, error)
	Metrics Metrics
	Logger  *slog.Logger
	// InstanceID is this daemon's id on tools' provenance paths; MaxToolsPerServer caps a server's tools (0: no
	// cap); StoreTimeout bounds a run's store work.
	InstanceID        string
	MaxToolsPerServer int
	StoreTimeout      time.Duration
}

// Worker runs discoveries: list, store and publish. Runs of different keys may run at once; the actor makes sure
// one key has at most one run at a time.
type Worker struct {
	p Ports
	// listings remembers what was stored last per key (floodguard.Listings).
	listings floodguard.Listings
}

// NewWorker returns a Worker doing its work through p.
func NewWorker(p Ports) *Worker {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{p: p}
}

// Run runs the discovery key names (a server id: its tools; FeaturesKey: its prompts and resources) and tells
// whether it stored a listing other than the one stored before. Unless forced, a listing equal to the one this
// process stored last under the same lease is neither stored nor published.
func (w *Worker) Run(ctx context.Context, key string, forced bool) (changed bool, err error) {
	e0, s0 := w.listings.Last(key)
	if id, features := SplitKey(key); features {
		err = w.features(ctx, id, key, forced)
	} else {
		err = w.tools(ctx, id, forced)
	}
	e1, s1 := w.listings.Last(key)
	return e0 != e1 || s0 != s1, err
}

// Forget drops what is remembered of key (the server was removed).
func (w *Worker) Forget(key string) { w.listings.Forget(key) }

// tools lists every tool of a server, stores them and publishes ToolsChanged.
func (w *Worker) tools(ctx context.Context, id string, forced bool) error {
	start := time.Now()
	log := w.p.Logger
	listed, err := w.p.ListTools(ctx, id)
	if err != nil {
		return err
	}
	l := Tools(listed, w.p.InstanceID, w.p.MaxToolsPerServer)
	if l.Unnamed > 0 {
		log.Warn("skipping tools the server listed without a usable name", "server_id", id, "skipped", l.Unnamed)
	}
	if len(l.Looped) > 0 {
		log.Warn("aggregator loop: the server re-exposes tools of this aggregator; dropping them",
			"code", errcode.LoopDetected, "server_id", id, "instance_id", w.p.InstanceID, "via", strings.Join(l.LoopPath, " -> "),
			"dropped", len(l.Looped), "example", l.Looped[0])
	}
	if l.Truncated > 0 {
		log.Warn("server lists more tools than the cap (MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER); keeping the first ones in listing order",
			"server_id", id, "listed", len(l.Defs)+l.Truncated, "kept", len(l.Defs), "dropped", l.Truncated)
	}
	fence := w.p.Fence(id)
	if fence == nil {
		log.Info("tools not stored: this process no longer owns the server", "server_id", id)
		return nil
	}
	sum := floodguard.Sum(listed)
	if !forced && w.listings.Same(id, fence.Epoch, sum) {
		log.Debug("tools unchanged after list_changed: nothing stored", "server_id", id)
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.storeTimeout(len(l.Defs)))
	defer cancel()
	// Pins first: the tools are stored only once the pins say what of them may be served.
	if before, err := w.p.Store.GetServer(sctx, id); err == nil {
		if err := w.pin(sctx, before, l.Defs, fence); err != nil {
			if errors.Is(err, persistence.ErrLeaseLost) {
				w.leaseLost(id, fence, "tools not stored", err)
				return nil
			}
			return storeError{fmt.Errorf("definition pinning: %w", err)}
		}
	} else if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	} else {
		return storeError{fmt.Errorf("read the server before pinning: %w", err)} // never store tools unpinned
	}
	diff, err := w.p.Store.ReplaceServerTools(sctx, id, l.Defs, fence)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		w.leaseLost(id, fence, "tools not stored", err)
		return nil
	}
	if err != nil {
		return storeError{fmt.Errorf("store tools: %w", err)}
	}
	srv, _ := w.p.Store.GetServer(sctx, id)
	if len(l.Defs) == 0 {
		log.Warn("server lists no tools", "server_id", id, "server", srv.Name)
	}
	if len(diff.Changed) > 0 {
		log.Warn("server changed the definition of tools", "server_id", id, "server", srv.Name, "changed", diff.Changed)
	}
	log.Info("tools discovered", "server_id", id, "server", srv.Name, "total", diff.Total,
		"added", len(diff.Added), "removed", len(diff.Removed), "changed", len(diff.Changed), "truncated", l.Truncated, "took", time.Since(start).String())
	w.listings.Remember(id, fence.Epoch, sum)
	w.p.Publish(&pb.ToolsChanged{
		ServerId: id, ServerName: srv.Name, Added: diff.Added, Removed: diff.Removed, Changed: diff.Changed, Total: int32(diff.Total),
	})
	return nil
}

// leaseLost reports a listing that was not stored because the server's lease is gone, and tells the server's actor:
// a session left running without its lease would stay connected without the tools it listed.
func (w *Worker) leaseLost(id string, fence *persistence.Lease, what string, err error) {
	w.p.Logger.Info(what+": the server's lease moved on", "server_id", id)
	if w.p.LeaseLost != nil {
		w.p.LeaseLost(id, fence.Epoch, what+": "+err.Error())
	}
}

// pin applies definition pinning to what a server listed, before the tools are stored: the pins record which
// definitions are approved, which changes are held and which new tools are withheld (curation.Decide); the router
// and the indexer serve from them. It logs a warning per change newly held and sets the pending-changes metric. A
// pin write that lost a race with an admin's approval is decided again from the new pins.
func (w *Worker) pin(ctx context.Context, srv persistence.Server, defs []persistence.ToolDef, fence *persistence.Lease) error {
	if !srv.Policy.Pinning {
		return nil
	}
	listed := Listed(srv.ID, defs, w.p.PinHash)
	for attempt := 1; ; attempt++ {
		set, err := w.p.Store.ListToolPins(ctx, srv.ID)
		if err != nil {
			return fmt.Errorf("read tool pins: %w", err)
		}
		d := curation.Decide(time.Now().UTC(), srv.ID, srv.Policy, set, listed)
		if d.Changed || set.Version == 0 {
			err = w.p.Store.SaveToolPins(ctx, srv.ID, set.Version, d.Pins, fence)
			if errors.Is(err, persistence.ErrChanged) && attempt < pinAttempts {
				continue
			}
			if err != nil {
				return fmt.Errorf("save tool pins: %w", err)
			}
		}
		for _, h := range d.Held {
			w.p.Logger.Warn("tool definition change held for approval (definition pinning)", "server_id", srv.ID,
				"server", srv.Name, "tool", h.Name, "kind", h.Kind, "hash", h.Hash,
				"approve", "POST /api/v1/aggregator/servers/"+srv.ID+"/tools/changes/"+h.Name+"/approve")
		}
		pending, held := PinCounts(d)
		w.metrics().ToolChanges(srv.Name, pending, held)
		return nil
	}
}

// features lists a server's prompts, resources and resource templates, stores them and publishes FeaturesChanged.
func (w *Worker) features(ctx context.Context, id, key string, forced bool) error {
	start := time.Now()
	log := w.p.Logger
	prompts, resources, templates, err := w.p.ListFeatures(ctx, id)
	if err != nil {
		return err
	}
	l := Features(prompts, resources, templates)
	if l.Unusable > 0 {
		log.Warn("skipping prompts or resources the server listed without a usable name or URI", "server_id", id, "skipped", l.Unusable)
	}
	fence := w.p.Fence(id)
	if fence == nil {
		log.Info("prompts and resources not stored: this process no longer owns the server", "server_id", id)
		return nil
	}
	sum := floodguard.Sum(prompts, resources, templates)
	if !forced && w.listings.Same(key, fence.Epoch, sum) {
		log.Debug("prompts and resources unchanged after list_changed: nothing stored", "server_id", id)
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.storeTimeout(len(l.Defs)))
	defer cancel()
	err = w.p.Store.ReplaceServerFeatures(sctx, id, l.Defs, fence)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil // removed meanwhile
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		w.leaseLost(id, fence, "prompts and resources not stored", err)
		return nil
	}
	if err != nil {
		return storeError{fmt.Errorf("store prompts and resources: %w", err)}
	}
	srv, _ := w.p.Store.GetServer(sctx, id)
	res, tpl := l.Reserved[persistence.FeatureResource], l.Reserved[persistence.FeatureResourceTemplate]
	if res+tpl > 0 {
		log.Warn("dropping resources and templates the server listed under the aggregator's reserved "+routing.RewrittenURIScheme+":// scheme",
			"server_id", id, "server", srv.Name, "resources", res, "templates", tpl)
		for kind, n := range l.Reserved {
			w.metrics().ReservedURIs(srv.Name, kind, n)
		}
	}
	evt := &pb.FeaturesChanged{ServerId: id, ServerName: srv.Name, Prompts: int32(len(prompts)),
		Resources: int32(len(resources)), Templates: int32(len(templates))}
	log.Info("prompts and resources discovered", "server_id", id, "server", srv.Name, "prompts", evt.Prompts,
		"resources", evt.Resources, "templates", evt.Templates, "took", time.Since(start).String())
	w.p.Publish(evt)
	w.listings.Remember(key, fence.Epoch, sum)
	return nil
}

// perItemStoreTime is the store time a run is granted for each item it writes, beyond Ports.StoreTimeout: a
// catalogue of thousands of tools is one transaction of thousands of rows, and the bound is there to catch a store
// that hangs, not one that is working through a big write.
const perItemStoreTime = 5 * time.Millisecond

// storeTimeout bounds the store work of a run that writes n items.
func (w *Worker) storeTimeout(n int) time.Duration {
	return w.p.StoreTimeout + time.Duration(n)*perItemStoreTime
}

// metrics is Ports.Metrics, or one that records nothing.
func (w *Worker) metrics() Metrics {
	if w.p.Metrics == nil {
		return noMetrics{}
	}
	return w.p.Metrics
}

type noMetrics struct{}

func (noMetrics) ToolChanges(string, int, map[string]int) {}
func (noMetrics) ReservedURIs(string, string, int)        {}
