package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Every process that shares an embedded store runs on the same host, so leases compare with the host's clock
// (storeutil.Now), taken inside the write transaction; SQLite's write lock (taken at BEGIN, _txlock=immediate)
// serialises racing owners, in this process and in others.

// AcquireLease implements persistence.Store.
func (s *Store) AcquireLease(ctx context.Context, serverID, owner string, ttl time.Duration) (persistence.Lease, error) {
	return s.TakeOverLease(ctx, serverID, owner, "", ttl)
}

// TakeOverLease implements persistence.Store.
func (s *Store) TakeOverLease(ctx context.Context, serverID, owner, from string, ttl time.Duration) (l persistence.Lease, err error) {
	defer wrap(&err, "acquire lease of %q for %q", serverID, owner)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Lease{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := serverExistsTx(ctx, tx, uid, serverID); err != nil {
			return err
		}
		now := storeutil.Now()
		cur, found, err := leaseRow(ctx, tx, uid)
		if err != nil {
			return err
		}
		live := found && cur.ExpiresAt.After(now)
		if live && cur.Owner != owner && (from == "" || cur.Owner != from) {
			l = cur
			return fmt.Errorf("held by %q until %s: %w", cur.Owner, cur.ExpiresAt.Format(time.RFC3339Nano), persistence.ErrLeaseHeld)
		}
		l = persistence.Lease{ServerID: uid, Owner: owner, Epoch: 1, ExpiresAt: now.Add(ttl)}
		switch {
		case live && cur.Owner == owner: // the owner's own live lease: extend it
			l.Epoch = cur.Epoch
		case found:
			l.Epoch = cur.Epoch + 1
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO server_leases (server_id, owner, epoch, expires_at) VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (server_id) DO UPDATE SET owner = ?2, epoch = ?3, expires_at = ?4`, uid, owner, l.Epoch, fmtTime(l.ExpiresAt))
		return err
	})
	if err != nil && !errors.Is(err, persistence.ErrLeaseHeld) {
		return persistence.Lease{}, err
	}
	return l, err
}

// GetLease implements persistence.Store.
func (s *Store) GetLease(ctx context.Context, serverID string) (l persistence.Lease, now time.Time, err error) {
	defer wrap(&err, "get lease of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Lease{}, time.Time{}, err
	}
	l, found, err := leaseRow(ctx, s.r, uid)
	if err != nil {
		return persistence.Lease{}, time.Time{}, err
	}
	if !found {
		return persistence.Lease{}, time.Time{}, storeutil.NotFound("lease of server", serverID)
	}
	return l, storeutil.Now(), nil
}

// serverExistsTx returns ErrNotFound when no server has that (canonical) id.
func serverExistsTx(ctx context.Context, tx *sql.Tx, uid, shown string) error {
	var found bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM external_servers WHERE id = ?)`, uid).Scan(&found); err != nil {
		return err
	}
	if !found {
		return storeutil.NotFound("server", shown)
	}
	return nil
}

// leaseRow reads the server's lease row, if any.
func leaseRow(ctx context.Context, q querier, uid string) (persistence.Lease, bool, error) {
	l := persistence.Lease{ServerID: uid}
	var expires string
	err := q.QueryRowContext(ctx, `SELECT owner, epoch, expires_at FROM server_leases WHERE server_id = ?`, uid).
		Scan(&l.Owner, &l.Epoch, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Lease{}, false, nil
	}
	if err != nil {
		return persistence.Lease{}, false, err
	}
	if l.ExpiresAt, err = parseTime(expires); err != nil {
		return persistence.Lease{}, false, err
	}
	return l, true, nil
}

// RenewLeases implements persistence.Store.
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) (out []persistence.Lease, err error) {
	defer wrap(&err, "renew leases of %q", owner)
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		now := storeutil.Now()
		rows, err := tx.QueryContext(ctx, `UPDATE server_leases SET expires_at = ? WHERE owner = ?
			RETURNING server_id, owner, epoch, expires_at`, fmtTime(now.Add(ttl)), owner)
		if err != nil {
			return err
		}
		out, err = scanLeases(rows)
		return err
	})
	return out, err
}

func scanLeases(rows *sql.Rows) ([]persistence.Lease, error) {
	defer rows.Close()
	out := []persistence.Lease{}
	for rows.Next() {
		var l persistence.Lease
		var expires string
		if err := rows.Scan(&l.ServerID, &l.Owner, &l.Epoch, &expires); err != nil {
			return nil, err
		}
		var err error
		if l.ExpiresAt, err = parseTime(expires); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// ReleaseLease implements persistence.Store.
func (s *Store) ReleaseLease(ctx context.Context, l persistence.Lease) (err error) {
	defer wrap(&err, "release lease of %q", l.ServerID)
	uid, err := storeutil.ServerID(l.ServerID)
	if err != nil {
		return nil // no such server: nothing held
	}
	now := fmtTime(storeutil.Now())
	_, err = s.w.ExecContext(ctx, `UPDATE server_leases SET owner = '', expires_at = MIN(expires_at, ?1)
		WHERE server_id = ?2 AND owner = ?3 AND epoch = ?4`, now, uid, l.Owner, l.Epoch)
	return err
}

// ReleaseOwnerLeases implements persistence.Store.
func (s *Store) ReleaseOwnerLeases(ctx context.Context, owner string) (n int, err error) {
	defer wrap(&err, "release leases of %q", owner)
	now := fmtTime(storeutil.Now())
	res, err := s.w.ExecContext(ctx, `UPDATE server_leases SET owner = '', expires_at = ?1 WHERE owner = ?2 AND expires_at > ?1`, now, owner)
	if err != nil {
		return 0, err
	}
	// Lapsed leases of owner are let go of too (not counted: they had ended already).
	if _, err := s.w.ExecContext(ctx, `UPDATE server_leases SET owner = '' WHERE owner = ?1`, owner); err != nil {
		return 0, err
	}
	affected, err := res.RowsAffected()
	return int(affected), err
}

// ListLeases implements persistence.Store.
func (s *Store) ListLeases(ctx context.Context) (out []persistence.Lease, now time.Time, err error) {
	defer wrap(&err, "list leases")
	now = storeutil.Now()
	rows, err := s.r.QueryContext(ctx, `SELECT server_id, owner, epoch, expires_at FROM server_leases ORDER BY server_id`)
	if err != nil {
		return nil, now, err
	}
	out, err = scanLeases(rows)
	return out, now, err
}

// checkFence refuses, inside the write transaction (which holds SQLite's write lock, so the lease cannot change
// hands before it commits), a write fenced by a lease that is no longer current.
func checkFence(ctx context.Context, tx *sql.Tx, uid string, fence *persistence.Lease) error {
	if fence == nil {
		return nil
	}
	cur, found, err := leaseRow(ctx, tx, uid)
	if err != nil {
		return err
	}
	if !found || cur.Owner != fence.Owner || cur.Epoch != fence.Epoch { // (its expiry: see persistence.Lease)
		return fmt.Errorf("epoch %d of %q: %w", fence.Epoch, fence.Owner, persistence.ErrLeaseLost)
	}
	return nil
}

// Heartbeat implements persistence.Store.
func (s *Store) Heartbeat(ctx context.Context, n persistence.Node) (err error) {
	defer wrap(&err, "heartbeat of node %q", n.ID)
	_, err = s.w.ExecContext(ctx, `INSERT INTO nodes (node_id, address, heartbeat_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (node_id) DO UPDATE SET address = ?2, heartbeat_at = ?3`, n.ID, n.Address, fmtTime(storeutil.Now()))
	return err
}

// ListNodes implements persistence.Store.
func (s *Store) ListNodes(ctx context.Context, alive time.Duration) (out []persistence.Node, err error) {
	defer wrap(&err, "list nodes")
	rows, err := s.r.QueryContext(ctx, `SELECT node_id, address, heartbeat_at FROM nodes WHERE heartbeat_at > ?
		ORDER BY heartbeat_at DESC, node_id`, fmtTime(storeutil.Now().Add(-alive)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out = []persistence.Node{}
	for rows.Next() {
		var n persistence.Node
		var at string
		if err := rows.Scan(&n.ID, &n.Address, &at); err != nil {
			return nil, err
		}
		if n.HeartbeatAt, err = parseTime(at); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// RemoveNode implements persistence.Store.
func (s *Store) RemoveNode(ctx context.Context, id string) (err error) {
	defer wrap(&err, "remove node %q", id)
	_, err = s.w.ExecContext(ctx, `DELETE FROM nodes WHERE node_id = ?`, id)
	return err
}
