package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// ReplaceServerFeatures makes the server's prompts, resources and resource templates exactly defs, in one
// transaction that locks the server row (a concurrent delete or refresh of the same server waits).
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
	return s.writeTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM mcp.external_servers WHERE id = $1 FOR UPDATE`, uid).Scan(&one); err != nil {
			return err // no row: ErrNotFound
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM mcp.server_features WHERE server_id = $1`, uid); err != nil {
			return fmt.Errorf("delete features: %w", err)
		}
		if len(plan) == 0 {
			return nil
		}
		kinds, keys, defsJSON := make([]string, len(plan)), make([]string, len(plan)), make([]string, len(plan))
		positions := make([]int32, len(plan))
		for i, f := range plan {
			kinds[i], keys[i], defsJSON[i], positions[i] = f.Kind, f.Key, string(f.Definition), int32(f.Position)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO mcp.server_features (server_id, kind, key, position, definition, updated_at)
			SELECT $1, u.kind, u.key, u.position, u.definition::jsonb, $2
			FROM unnest($3::text[], $4::text[], $5::int[], $6::text[]) AS u(kind, key, position, definition)`,
			uid, storeutil.Now(), kinds, keys, positions, defsJSON); err != nil {
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
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if sid != "" {
			if err := serverExists(ctx, tx, sid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, `SELECT server_id::text, kind, key, position, definition::text, updated_at
			FROM mcp.server_features WHERE ($1::uuid IS NULL OR server_id = $1)
			ORDER BY server_id, kind, position`, nullIfEmpty(sid))
		if err != nil {
			return err
		}
		var f persistence.Feature
		var def string
		_, err = pgx.ForEachRow(rows, []any{&f.ServerID, &f.Kind, &f.Key, &f.Position, &def, &f.UpdatedAt}, func() error {
			g := f
			g.Definition = []byte(def)
			g.UpdatedAt = g.UpdatedAt.UTC()
			out = append(out, g)
			return nil
		})
		return err
	})
	return out, err
}
