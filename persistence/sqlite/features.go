package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// ReplaceServerFeatures makes the server's prompts, resources and resource templates exactly defs, in one write
// transaction.
func (s *Store) ReplaceServerFeatures(ctx context.Context, serverID string, defs []persistence.FeatureDef, fence *persistence.Lease) (err error) {
	defer wrap(&err, "replace features of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	plan, err := storeutil.PlanFeatures(defs)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM external_servers WHERE id = ?`, uid).Scan(&one); err != nil {
			return err // no row: ErrNotFound
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM server_features WHERE server_id = ?`, uid); err != nil {
			return fmt.Errorf("delete features: %w", err)
		}
		ts := fmtTime(storeutil.Now())
		if err := eachPrepared(ctx, tx, `INSERT INTO server_features (server_id, kind, key, position, definition, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)`, len(plan), func(i int) []any {
			f := plan[i]
			return []any{uid, f.Kind, f.Key, f.Position, string(f.Definition), ts}
		}); err != nil {
			return fmt.Errorf("insert features: %w", err)
		}
		return nil
	})
}

// ListFeatures returns the stored features of one server, or of all, ordered by server, kind and position.
func (s *Store) ListFeatures(ctx context.Context, serverID string) (out []persistence.Feature, err error) {
	defer wrap(&err, "list features")
	sid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if sid != "" {
			if err := serverExists(ctx, tx, sid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT server_id, kind, key, position, definition, updated_at
			FROM server_features WHERE (?1 = '' OR server_id = ?1) ORDER BY server_id, kind, position`, sid)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var f persistence.Feature
			var def, at string
			if err := rows.Scan(&f.ServerID, &f.Kind, &f.Key, &f.Position, &def, &at); err != nil {
				return err
			}
			f.Definition = []byte(def)
			if f.UpdatedAt, err = parseTime(at); err != nil {
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	return out, err
}
