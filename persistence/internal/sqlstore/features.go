package sqlstore

import (
	"context"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Features implements the prompts, resources and resource templates part of persistence.Store over a Dialect.
type Features struct {
	d *Dialect
}

// NewFeatures returns the feature methods over d.
func NewFeatures(d *Dialect) Features { return Features{d: d} }

// ReplaceServerFeatures makes the server's prompts, resources and resource templates exactly defs, in one write
// transaction that reads the server row through Q.LockServer (a concurrent delete or refresh of the same server
// waits).
func (f Features) ReplaceServerFeatures(ctx context.Context, serverID string, defs []persistence.FeatureDef, fence *persistence.Lease) (err error) {
	d := f.d
	defer d.wrap(&err, "replace features of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	plan, err := storeutil.PlanFeatures(defs)
	if err != nil {
		return err
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		if _, _, err := d.lockServer(ctx, tx, uid, serverID); err != nil {
			return err
		}
		if err := d.CheckFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, d.Q.DeleteFeatures, uid); err != nil {
			return fmt.Errorf("delete features: %w", err)
		}
		ts := d.Time(storeutil.Now())
		if err := d.Bulk(ctx, tx, d.Q.InsertFeature, len(plan), func(i int) []any {
			p := plan[i]
			return []any{uid, p.Kind, p.Key, p.Position, string(p.Definition), ts}
		}); err != nil {
			return fmt.Errorf("insert features: %w", err)
		}
		return nil
	})
}

// ListFeatures returns the stored features of one server, or of all, ordered by server, kind and position.
func (f Features) ListFeatures(ctx context.Context, serverID string) (out []persistence.Feature, err error) {
	d := f.d
	defer d.wrap(&err, "list features")
	sid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		if sid != "" {
			if err := d.serverExists(ctx, tx, sid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, d.Q.ListFeatures, nullIfEmpty(sid))
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.Feature, error) {
			var f persistence.Feature
			var def []byte
			err := row.Scan(&f.ServerID, &f.Kind, &f.Key, &f.Position, &def, Time(&f.UpdatedAt))
			f.Definition = def
			return f, err
		})
		if len(out) == 0 {
			out = nil // as before: no features is a nil slice
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
