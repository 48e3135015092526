package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mcpgw/aggregator/internal/retry"
	"github.com/mcpgw/aggregator/persistence"
)

// feedChannel is the NOTIFY channel of the daemon's events; one database serves one aggregator deployment.
const feedChannel = "mcp_aggregator_events"

var _ persistence.Feed = (*Store)(nil)

// Notify implements persistence.Feed with pg_notify.
func (s *Store) Notify(ctx context.Context, payload string) (err error) {
	defer wrap(&err, "notify")
	if len(payload) > persistence.MaxNoticeBytes {
		return fmt.Errorf("notice of %d bytes exceeds %d", len(payload), persistence.MaxNoticeBytes)
	}
	_, err = s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, feedChannel, payload)
	return err
}

// Listen implements persistence.Feed on a connection of its own, taken out of the pool for as long as it listens.
// After a failure it reconnects after a backoff (100 ms doubling to 5 s, reset by a connection that listened).
func (s *Store) Listen(ctx context.Context, fn func(payload string), connected func()) error {
	reconnect := retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}
	_, err := retry.Do(ctx, reconnect.Schedule(), retry.Options{}, func() (struct{}, error) {
		listened := s.listenOnce(ctx, fn, connected)
		if ctx.Err() != nil {
			return struct{}{}, backoff.Permanent(ctx.Err())
		}
		if listened {
			return struct{}{}, retry.Reset(errListenEnded)
		}
		return struct{}{}, errListenEnded
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// errListenEnded is why Listen reconnects: its connection failed or could not be had.
var errListenEnded = errors.New("feed connection ended")

// listenOnce listens on one connection until it fails or ctx ends; it reports whether it got to listen.
func (s *Store) listenOnce(ctx context.Context, fn func(string), connected func()) bool {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false
	}
	conn := pc.Hijack() // the connection stays in LISTEN mode: it must never serve another query of the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+feedChannel); err != nil {
		return false
	}
	connected()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		fn(n.Payload)
	}
}
