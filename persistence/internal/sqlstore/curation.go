package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Curation implements the tool curation methods of persistence.Store (the server's policy columns, tool
// overrides, definition pins and profiles; migration 0004) over a Dialect. Every write runs in one write
// transaction that first reads the server row through Q.LockServer: where the dialect locks rows (PostgreSQL) the
// row stays locked, where it locks the database (SQLite's write transaction) the whole file is, so a check made
// in it (the server exists, pins_version is the expected one) still holds when the transaction writes.
type Curation struct {
	d *Dialect
}

// NewCuration returns the curation methods over d.
func NewCuration(d *Dialect) Curation { return Curation{d: d} }

// SetToolPolicy implements persistence.Store. The decision "pinning turns on" and the baseline it writes cannot
// race another policy change or a SaveToolPins. A non-empty patch sets updated_at.
func (c Curation) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (out persistence.Server, err error) {
	d := c.d
	defer d.wrap(&err, "set tool policy of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Server{}, err
	}
	u, err := storeutil.PreparePolicyPatch(uid, p)
	if err != nil {
		return persistence.Server{}, err
	}
	if u.Empty() {
		err = d.ReadTx(ctx, func(tx Tx) error {
			out, err = d.ScanServer(tx.QueryRow(ctx, d.Q.GetServer, uid))
			return err
		})
		return out, err
	}
	var pinNew, pinning any
	if u.SetPinNew {
		pinNew = u.PinNewTools
	}
	if u.SetPinning {
		pinning = u.Pinning
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		was, _, err := d.lockServer(ctx, tx, uid, serverID)
		if err != nil {
			return err
		}
		on := u.SetPinning && u.Pinning && !was
		off := u.SetPinning && !u.Pinning && was
		if on {
			if _, err := tx.Exec(ctx, d.Q.DeletePins, uid); err != nil {
				return fmt.Errorf("clear pins: %w", err)
			}
			if err := c.upsertPins(ctx, tx, uid, u.Baseline); err != nil {
				return fmt.Errorf("write baseline: %w", err)
			}
		}
		if off {
			if _, err := tx.Exec(ctx, d.Q.ClearPending, uid); err != nil {
				return fmt.Errorf("clear pending changes: %w", err)
			}
		}
		out, err = d.ScanServer(tx.QueryRow(ctx, d.Q.UpdatePolicy, uid, u.SetFilter, d.JSON(u.Filter), pinning, pinNew,
			on, off, d.Time(storeutil.Now())))
		return err
	})
	if err != nil {
		return persistence.Server{}, err
	}
	return out, nil
}

// ---- tool overrides ----

func scanOverride(row Row) (persistence.ToolOverride, error) {
	var o persistence.ToolOverride
	var annotations []byte
	if err := row.Scan(&o.ServerID, &o.OriginalName, &o.ExposedName, &o.Description, &annotations,
		Time(&o.UpdatedAt)); err != nil {
		return persistence.ToolOverride{}, err
	}
	var err error
	if o.Annotations, err = storeutil.ParseAnnotations(annotations); err != nil {
		return persistence.ToolOverride{}, err
	}
	return o, nil
}

// ListToolOverrides implements persistence.Store.
func (c Curation) ListToolOverrides(ctx context.Context, serverID string) (out []persistence.ToolOverride, err error) {
	d := c.d
	defer d.wrap(&err, "list tool overrides")
	uid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		if uid != "" {
			if err := d.serverExists(ctx, tx, uid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, d.Q.ListOverrides, nullIfEmpty(uid))
		if err != nil {
			return err
		}
		out, err = collect(rows, scanOverride)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PutToolOverride implements persistence.Store: the server's existence is checked under the write lock, the
// unique index on exposed_name decides a taken name.
func (c Curation) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (out persistence.ToolOverride, err error) {
	d := c.d
	defer d.wrap(&err, "put override of %q on server %q", o.OriginalName, o.ServerID)
	r, err := storeutil.PrepareOverride(o)
	if err != nil {
		return persistence.ToolOverride{}, err
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		if _, _, err := d.lockServer(ctx, tx, r.ServerID, o.ServerID); err != nil {
			return err
		}
		out, err = scanOverride(tx.QueryRow(ctx, d.Q.UpsertOverride, r.ServerID, r.OriginalName, r.ExposedName,
			r.Description, d.JSON(r.Annotations), d.Time(storeutil.Now())))
		return err
	})
	if err != nil {
		return persistence.ToolOverride{}, err
	}
	return out, nil
}

// DeleteToolOverride implements persistence.Store.
func (c Curation) DeleteToolOverride(ctx context.Context, serverID, originalName string) (err error) {
	d := c.d
	defer d.wrap(&err, "delete override of %q on server %q", originalName, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	return execOne(ctx, d.Writer, "tool override", originalName, d.Q.DeleteOverride, uid, originalName)
}

// ---- definition pins ----

func scanPin(row Row) (persistence.ToolPin, error) {
	var p persistence.ToolPin
	var approved, pending []byte // database/sql scans text into a []byte, not into a json.RawMessage
	if err := row.Scan(&p.ServerID, &p.OriginalName, &p.ApprovedHash, &approved, NullTime(&p.ApprovedAt),
		&p.PendingHash, &pending, NullTime(&p.PendingSince), &p.RejectedHash); err != nil {
		return persistence.ToolPin{}, err
	}
	p.ApprovedDef, p.PendingDef = approved, pending
	return p, nil
}

// ListToolPins implements persistence.Store: the version and the pins come from one snapshot.
func (c Curation) ListToolPins(ctx context.Context, serverID string) (out persistence.PinSet, err error) {
	d := c.d
	defer d.wrap(&err, "list tool pins of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.PinSet{}, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		if err := tx.QueryRow(ctx, d.Q.PinsVersion, uid).Scan(&out.Version); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, d.Q.ListPins, uid)
		if err != nil {
			return err
		}
		out.Pins, err = collect(rows, scanPin)
		return err
	})
	if err != nil {
		return persistence.PinSet{}, err
	}
	return out, nil
}

// upsertPins writes pins (prepared for server uid) in one bulk write.
func (c Curation) upsertPins(ctx context.Context, tx Tx, uid string, pins []persistence.ToolPin) error {
	d := c.d
	return d.Bulk(ctx, tx, d.Q.UpsertPin, len(pins), func(i int) []any {
		p := pins[i]
		return []any{uid, p.OriginalName, p.ApprovedHash, d.JSON(p.ApprovedDef), d.timePtr(p.ApprovedAt),
			p.PendingHash, d.JSON(p.PendingDef), d.timePtr(p.PendingSince), p.RejectedHash}
	})
}

// SaveToolPins implements persistence.Store. The server row is read under the write lock before pins_version is
// compared, so two writers from the same read cannot both succeed. The first save on a pinned server without a
// baseline time records it (that save is the baseline).
func (c Curation) SaveToolPins(ctx context.Context, serverID string, expect int64, pins []persistence.ToolPin, fence *persistence.Lease) (err error) {
	d := c.d
	defer d.wrap(&err, "save tool pins of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	now := storeutil.Now()
	prepared, err := storeutil.PreparePins(uid, pins, now)
	if err != nil {
		return err
	}
	names, err := json.Marshal(storeutil.PinNames(prepared))
	if err != nil {
		return err
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		_, version, err := d.lockServer(ctx, tx, uid, serverID)
		if err != nil {
			return err
		}
		if err := d.CheckFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if version != expect {
			return fmt.Errorf("pins at version %d, not %d: %w", version, expect, persistence.ErrChanged)
		}
		if _, err := tx.Exec(ctx, d.Q.DeletePinsExcept, uid, d.JSON(names)); err != nil {
			return fmt.Errorf("delete pins: %w", err)
		}
		if err := c.upsertPins(ctx, tx, uid, prepared); err != nil {
			return fmt.Errorf("write pins: %w", err)
		}
		_, err = tx.Exec(ctx, d.Q.SavedPins, uid, d.Time(now))
		return err
	})
}

// ResolveToolChange implements persistence.Store, under the server row's lock like SaveToolPins.
func (c Curation) ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, expectHash string) (out persistence.ToolPin, err error) {
	d := c.d
	defer d.wrap(&err, "resolve change of %q on server %q", originalName, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.ToolPin{}, err
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		if _, _, err := d.lockServer(ctx, tx, uid, serverID); err != nil {
			return err
		}
		pin, err := scanPin(tx.QueryRow(ctx, d.Q.GetPin, uid, originalName))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("pending change of tool", originalName)
		}
		if err != nil {
			return err
		}
		if pin, err = storeutil.ResolvePin(pin, approve, expectHash, storeutil.Now()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, d.Q.ResolvePin, uid, originalName, pin.ApprovedHash, d.JSON(pin.ApprovedDef),
			d.timePtr(pin.ApprovedAt), pin.RejectedHash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, d.Q.BumpPins, uid); err != nil {
			return err
		}
		out = pin
		return nil
	})
	if err != nil {
		return persistence.ToolPin{}, err
	}
	return out, nil
}

// ---- profiles ----

func scanProfile(row Row) (persistence.Profile, error) {
	var p persistence.Profile
	var selectors, clients, bindings []byte
	var budget sql.NullInt64
	if err := row.Scan(&p.Name, &p.Description, &selectors, &clients, &bindings, &budget, Time(&p.CreatedAt),
		Time(&p.UpdatedAt)); err != nil {
		return persistence.Profile{}, err
	}
	if budget.Valid {
		n := int(budget.Int64)
		p.TokenBudget = &n
	}
	if err := storeutil.ParseProfileLists(&p, selectors, clients, bindings); err != nil {
		return persistence.Profile{}, err
	}
	return p, nil
}

// ListProfiles implements persistence.Store.
func (c Curation) ListProfiles(ctx context.Context) (out []persistence.Profile, err error) {
	d := c.d
	defer d.wrap(&err, "list profiles")
	err = d.ReadTx(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, d.Q.ListProfiles)
		if err != nil {
			return err
		}
		out, err = collect(rows, scanProfile)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetProfile implements persistence.Store.
func (c Curation) GetProfile(ctx context.Context, name string) (out persistence.Profile, err error) {
	d := c.d
	defer d.wrap(&err, "get profile %q", name)
	err = d.ReadTx(ctx, func(tx Tx) error {
		out, err = scanProfile(tx.QueryRow(ctx, d.Q.GetProfile, name))
		return err
	})
	if err != nil {
		return persistence.Profile{}, err
	}
	return out, nil
}

// PutProfile implements persistence.Store: an insert that does nothing on a taken name (waiting for a concurrent
// creator to commit where the dialect locks rows), then the update of the row that is there.
func (c Curation) PutProfile(ctx context.Context, p persistence.Profile) (out persistence.Profile, created bool, err error) {
	d := c.d
	defer d.wrap(&err, "put profile %q", p.Name)
	r, err := storeutil.PrepareProfile(p)
	if err != nil {
		return persistence.Profile{}, false, err
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		ts := d.Time(storeutil.Now())
		v, err := scanProfile(tx.QueryRow(ctx, d.Q.InsertProfile, r.Name, r.Description, d.JSON(r.Selectors),
			d.JSON(r.Clients), d.JSON(r.Bindings), ts, r.TokenBudget))
		if err == nil {
			out, created = v, true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		out, err = scanProfile(tx.QueryRow(ctx, d.Q.UpdateProfile, r.Name, r.Description, d.JSON(r.Selectors),
			d.JSON(r.Clients), d.JSON(r.Bindings), ts, r.TokenBudget))
		return err
	})
	if err != nil {
		return persistence.Profile{}, false, err
	}
	return out, created, nil
}

// DeleteProfile implements persistence.Store.
func (c Curation) DeleteProfile(ctx context.Context, name string) (err error) {
	d := c.d
	defer d.wrap(&err, "delete profile %q", name)
	return execOne(ctx, d.Writer, "profile", name, d.Q.DeleteProfile, name)
}
