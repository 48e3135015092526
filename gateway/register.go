package gateway

import (
	"context"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
)

// Register registers a validated server (and starts connecting it when r.AutoConnect is set); it answers at once,
// whatever the backend does. With a key (an Idempotency-Key) the registration is retryable: a retry of one the
// store already holds under the key answers that server as stored now, with replayed true, and changes nothing.
// A name already taken is persistence.ErrAlreadyExists, a full registry ErrMaxServers (wrapped).
func (g *Gateway) Register(ctx context.Context, r RegisterRequest, key *persistence.IdempotencyKey) (srv persistence.Server, replayed bool, err error) {
	if key != nil {
		srv, replayed, err = g.actors.RegisterKeyed(ctx, r, *key)
	} else {
		srv, err = g.actors.Register(ctx, r)
	}
	if err != nil {
		return srv, false, fmt.Errorf("register server %q: %w", r.Name, err)
	}
	return srv, replayed, nil
}
