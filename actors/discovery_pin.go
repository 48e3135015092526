package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// pinAttempts bounds the retries of a pin write that lost a race with an admin's approval (ErrChanged).
const pinAttempts = 3

// pin applies definition pinning to what a server listed, before the tools are stored: the pins record which
// definitions are approved, which changes are held and which new tools are withheld (curation.Decide); the router
// and the indexer serve from them. It logs a warning per change newly held and sets the pending-changes metric. A
// pin write that lost a race with an admin's approval is decided again from the new pins.
func (s *System) pin(ctx context.Context, srv persistence.Server, defs []persistence.ToolDef, fence *persistence.Lease) error {
	if !srv.Policy.Pinning {
		return nil
	}
	listed := make([]curation.Listed, 0, len(defs))
	for _, d := range defs {
		h, err := s.pinHashes.Def(srv.ID, d.OriginalName, d.Definition)
		if err != nil {
			continue // a definition that cannot be read is never approved: withheld like a new tool
		}
		listed = append(listed, curation.Listed{Name: d.OriginalName, Def: d.Definition, Hash: h})
	}
	for attempt := 1; ; attempt++ {
		set, err := s.deps.Store.ListToolPins(ctx, srv.ID)
		if err != nil {
			return fmt.Errorf("read tool pins: %w", err)
		}
		d := curation.Decide(time.Now().UTC(), srv.ID, srv.Policy, set, listed)
		if d.Changed || set.Version == 0 {
			err = s.deps.Store.SaveToolPins(ctx, srv.ID, set.Version, d.Pins, fence)
			if errors.Is(err, persistence.ErrChanged) && attempt < pinAttempts {
				continue
			}
			if err != nil {
				return fmt.Errorf("save tool pins: %w", err)
			}
		}
		held := map[string]int{}
		for _, h := range d.Held {
			held[h.Kind]++
			s.deps.Logger.Warn("tool definition change held for approval (definition pinning)", "server_id", srv.ID,
				"server", srv.Name, "tool", h.Name, "kind", h.Kind, "hash", h.Hash,
				"approve", "POST /api/v1/aggregator/servers/"+srv.ID+"/tools/changes/"+h.Name+"/approve")
		}
		pending := 0
		for _, p := range d.Pins {
			if p.PendingHash != "" {
				pending++
			}
		}
		s.deps.Metrics.ToolChanges(srv.Name, pending, held)
		return nil
	}
}
