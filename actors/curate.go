package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// loadCuration reads a server's curation (overrides always: an exposed name applies whatever the policy; pins only
// with pinning on).
func loadCuration(ctx context.Context, store persistence.Store, srv persistence.Server) (*routing.ServerCuration, error) {
	ovs, err := store.ListToolOverrides(ctx, srv.ID)
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		return nil, fmt.Errorf("list tool overrides: %w", err)
	}
	c := routing.NewServerCuration(srv.Policy, ovs)
	if srv.Policy.Pinning {
		set, err := store.ListToolPins(ctx, srv.ID)
		if err != nil && !errors.Is(err, persistence.ErrNotFound) {
			return nil, fmt.Errorf("list tool pins: %w", err)
		}
		c.SetPins(set)
	}
	return c, nil
}
