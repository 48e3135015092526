package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Leases compare with clock_timestamp(), the database's clock at the statement, so that nodes whose clocks
// disagree still agree on who owns a server; a ttl is bound in microseconds.

// AcquireLease implements persistence.Store.
func (s *Store) AcquireLease(ctx context.Context, serverID, owner string, ttl time.Duration) (persistence.Lease, error) {
	return s.TakeOverLease(ctx, serverID, owner, "", ttl)
}

// TakeOverLease implements persistence.Store with one INSERT ... ON CONFLICT DO UPDATE: the row lock it takes
// makes racing owners queue, and the WHERE of the update lets only a free (expired) lease, its own owner, or a
// lease of the departed owner from through.
func (s *Store) TakeOverLease(ctx context.Context, serverID, owner, from string, ttl time.Duration) (l persistence.Lease, err error) {
	defer wrap(&err, "acquire lease of %q for %q", serverID, owner)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Lease{}, err
	}
	l = persistence.Lease{ServerID: uid, Owner: owner}
	err = s.pool.QueryRow(ctx, `INSERT INTO mcp.server_leases AS l (server_id, owner, epoch, expires_at)
		VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (server_id) DO UPDATE SET owner = EXCLUDED.owner,
			epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.epoch ELSE l.epoch + 1 END,
			expires_at = EXCLUDED.expires_at
		WHERE l.owner = EXCLUDED.owner OR l.expires_at <= clock_timestamp() OR ($4 <> '' AND l.owner = $4)
		RETURNING epoch, expires_at`, uid, owner, ttl.Microseconds(), from).Scan(&l.Epoch, &l.ExpiresAt)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return l, nil
	case errors.As(err, &pgErr) && pgErr.Code == "23503": // foreign_key_violation: no such server
		return persistence.Lease{}, storeutil.NotFound("server", serverID)
	case !errors.Is(err, pgx.ErrNoRows):
		return persistence.Lease{}, err
	}
	// The update's WHERE refused: another owner's lease is live. Say whose.
	holder := persistence.Lease{ServerID: uid}
	if err := s.pool.QueryRow(ctx, `SELECT owner, epoch, expires_at FROM mcp.server_leases WHERE server_id = $1`, uid).
		Scan(&holder.Owner, &holder.Epoch, &holder.ExpiresAt); err != nil {
		return persistence.Lease{}, err
	}
	return holder, fmt.Errorf("held by %q until %s: %w", holder.Owner, holder.ExpiresAt.UTC().Format(time.RFC3339Nano), persistence.ErrLeaseHeld)
}

// GetLease implements persistence.Store.
func (s *Store) GetLease(ctx context.Context, serverID string) (l persistence.Lease, now time.Time, err error) {
	defer wrap(&err, "get lease of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Lease{}, time.Time{}, err
	}
	l.ServerID = uid
	err = s.pool.QueryRow(ctx, `SELECT owner, epoch, expires_at, clock_timestamp() FROM mcp.server_leases WHERE server_id = $1`, uid).
		Scan(&l.Owner, &l.Epoch, &l.ExpiresAt, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return persistence.Lease{}, time.Time{}, storeutil.NotFound("lease of server", serverID)
	}
	return l, now, err
}

// RenewLeases implements persistence.Store.
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) (out []persistence.Lease, err error) {
	defer wrap(&err, "renew leases of %q", owner)
	rows, err := s.pool.Query(ctx, `UPDATE mcp.server_leases SET expires_at = clock_timestamp() + $2 * interval '1 microsecond'
		WHERE owner = $1 RETURNING server_id::text, owner, epoch, expires_at`, owner, ttl.Microseconds())
	if err != nil {
		return nil, err
	}
	return collectLeases(rows)
}

func collectLeases(rows pgx.Rows) ([]persistence.Lease, error) {
	out := []persistence.Lease{}
	var l persistence.Lease
	_, err := pgx.ForEachRow(rows, []any{&l.ServerID, &l.Owner, &l.Epoch, &l.ExpiresAt}, func() error {
		out = append(out, l)
		return nil
	})
	return out, err
}

// ReleaseLease implements persistence.Store.
func (s *Store) ReleaseLease(ctx context.Context, l persistence.Lease) (err error) {
	defer wrap(&err, "release lease of %q", l.ServerID)
	uid, err := storeutil.ServerID(l.ServerID)
	if err != nil {
		return nil // no such server: nothing held
	}
	_, err = s.pool.Exec(ctx, `UPDATE mcp.server_leases SET owner = '', expires_at = LEAST(expires_at, clock_timestamp())
		WHERE server_id = $1 AND owner = $2 AND epoch = $3`, uid, l.Owner, l.Epoch)
	return err
}

// ReleaseOwnerLeases implements persistence.Store.
func (s *Store) ReleaseOwnerLeases(ctx context.Context, owner string) (n int, err error) {
	defer wrap(&err, "release leases of %q", owner)
	tag, err := s.pool.Exec(ctx, `UPDATE mcp.server_leases SET owner = '', expires_at = LEAST(expires_at, clock_timestamp())
		WHERE owner = $1 AND expires_at > clock_timestamp()`, owner)
	if err != nil {
		return 0, err
	}
	// Lapsed leases of owner are let go of too (not counted: they had ended already).
	_, err = s.pool.Exec(ctx, `UPDATE mcp.server_leases SET owner = '' WHERE owner = $1`, owner)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// ListLeases implements persistence.Store.
func (s *Store) ListLeases(ctx context.Context) (out []persistence.Lease, now time.Time, err error) {
	defer wrap(&err, "list leases")
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT server_id::text, owner, epoch, expires_at FROM mcp.server_leases ORDER BY server_id`)
		if err != nil {
			return err
		}
		out, err = collectLeases(rows)
		return err
	})
	return out, now, err
}

// checkFence refuses, inside tx, a write fenced by a lease that is no longer current: another owner or epoch holds
// the row (persistence.Lease says why its expiry is not looked at). FOR SHARE holds the lease row until tx ends,
// so the lease cannot change hands between the check and the write.
func checkFence(ctx context.Context, tx pgx.Tx, uid string, fence *persistence.Lease) error {
	if fence == nil {
		return nil
	}
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM mcp.server_leases WHERE server_id = $1 AND owner = $2
		AND epoch = $3 FOR SHARE)`, uid, fence.Owner, fence.Epoch).Scan(&ok)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("epoch %d of %q: %w", fence.Epoch, fence.Owner, persistence.ErrLeaseLost)
	}
	return nil
}

// Heartbeat implements persistence.Store.
func (s *Store) Heartbeat(ctx context.Context, n persistence.Node) (err error) {
	defer wrap(&err, "heartbeat of node %q", n.ID)
	_, err = s.pool.Exec(ctx, `INSERT INTO mcp.nodes (node_id, address, heartbeat_at) VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (node_id) DO UPDATE SET address = EXCLUDED.address, heartbeat_at = EXCLUDED.heartbeat_at`, n.ID, n.Address)
	return err
}

// ListNodes implements persistence.Store.
func (s *Store) ListNodes(ctx context.Context, alive time.Duration) (out []persistence.Node, err error) {
	defer wrap(&err, "list nodes")
	rows, err := s.pool.Query(ctx, `SELECT node_id, address, heartbeat_at FROM mcp.nodes
		WHERE heartbeat_at > clock_timestamp() - $1 * interval '1 microsecond' ORDER BY heartbeat_at DESC, node_id`, alive.Microseconds())
	if err != nil {
		return nil, err
	}
	out = []persistence.Node{}
	var n persistence.Node
	_, err = pgx.ForEachRow(rows, []any{&n.ID, &n.Address, &n.HeartbeatAt}, func() error {
		out = append(out, n)
		return nil
	})
	return out, err
}

// RemoveNode implements persistence.Store.
func (s *Store) RemoveNode(ctx context.Context, id string) (err error) {
	defer wrap(&err, "remove node %q", id)
	_, err = s.pool.Exec(ctx, `DELETE FROM mcp.nodes WHERE node_id = $1`, id)
	return err
}
