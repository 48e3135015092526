package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Tool curation: the server's policy columns, tool overrides, definition pins and profiles (migration 0004).
// Every write runs in a write transaction, which holds SQLite's write lock from BEGIN: a check made in it (the
// server exists, pins_version is the expected one) still holds when the transaction writes.

// serverPins reads the columns the curation writes decide on; no server is ErrNotFound.
func serverPins(ctx context.Context, tx *sql.Tx, uid string) (pinning bool, version int64, err error) {
	err = tx.QueryRowContext(ctx, `SELECT tool_pinning, pins_version FROM external_servers WHERE id = ?`, uid).
		Scan(&pinning, &version)
	return pinning, version, err
}

// SetToolPolicy implements persistence.Store. A non-empty patch sets updated_at.
func (s *Store) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (out persistence.Server, err error) {
	defer wrap(&err, "set tool policy of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.Server{}, err
	}
	u, err := storeutil.PreparePolicyPatch(uid, p)
	if err != nil {
		return persistence.Server{}, err
	}
	if u.Empty() {
		return s.getServer(ctx, uid)
	}
	var pinNew, pinning any
	if u.SetPinNew {
		pinNew = u.PinNewTools
	}
	if u.SetPinning {
		pinning = u.Pinning
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		was, _, err := serverPins(ctx, tx, uid)
		if err != nil {
			return err
		}
		on := u.SetPinning && u.Pinning && !was
		off := u.SetPinning && !u.Pinning && was
		ts := fmtTime(storeutil.Now())
		if on {
			if _, err := tx.ExecContext(ctx, `DELETE FROM tool_pins WHERE server_id = ?`, uid); err != nil {
				return fmt.Errorf("clear pins: %w", err)
			}
			if err := upsertPins(ctx, tx, uid, u.Baseline); err != nil {
				return fmt.Errorf("write baseline: %w", err)
			}
		}
		if off {
			if _, err := tx.ExecContext(ctx, `UPDATE tool_pins SET pending_hash = '', pending_def = NULL,
				pending_since = NULL WHERE server_id = ? AND (pending_hash <> '' OR pending_def IS NOT NULL
				OR pending_since IS NOT NULL)`, uid); err != nil {
				return fmt.Errorf("clear pending changes: %w", err)
			}
		}
		out, err = scanServer(tx.QueryRowContext(ctx, `UPDATE external_servers SET
				tool_filter = CASE WHEN ?2 THEN ?3 ELSE tool_filter END,
				tool_pinning = COALESCE(?4, tool_pinning),
				pin_new_tools = COALESCE(?5, pin_new_tools),
				pins_baseline_at = CASE WHEN ?6 THEN ?8 ELSE pins_baseline_at END,
				pins_version = pins_version + CASE WHEN ?6 OR ?7 THEN 1 ELSE 0 END,
				updated_at = ?8
			WHERE id = ?1 RETURNING `+serverColumns,
			uid, u.SetFilter, jsonArg(u.Filter), pinning, pinNew, on, off, ts))
		return err
	})
	if err != nil {
		return persistence.Server{}, err
	}
	return out, nil
}

// ---- tool overrides ----

const overrideColumns = `server_id, original_name, exposed_name, description, annotations, updated_at`

func scanOverride(row storeutil.Scanner) (persistence.ToolOverride, error) {
	var o persistence.ToolOverride
	var exposed, desc, annotations sql.NullString
	var updatedAt string
	if err := row.Scan(&o.ServerID, &o.OriginalName, &exposed, &desc, &annotations, &updatedAt); err != nil {
		return persistence.ToolOverride{}, err
	}
	o.ExposedName, o.Description = nullString(exposed), nullString(desc)
	var err error
	if o.Annotations, err = storeutil.ParseAnnotations(nullJSON(annotations)); err != nil {
		return persistence.ToolOverride{}, err
	}
	if o.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return persistence.ToolOverride{}, err
	}
	return o, nil
}

// ListToolOverrides implements persistence.Store.
func (s *Store) ListToolOverrides(ctx context.Context, serverID string) (out []persistence.ToolOverride, err error) {
	defer wrap(&err, "list tool overrides")
	uid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if uid != "" {
			if err := serverExists(ctx, tx, uid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+overrideColumns+` FROM tool_overrides
			WHERE (?1 = '' OR server_id = ?1) ORDER BY server_id, original_name`, uid)
		if err != nil {
			return err
		}
		out, err = storeutil.Collect(rows, scanOverride)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PutToolOverride implements persistence.Store: the server's existence is checked under the write lock, the
// unique index on exposed_name decides a taken name.
func (s *Store) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (out persistence.ToolOverride, err error) {
	defer wrap(&err, "put override of %q on server %q", o.OriginalName, o.ServerID)
	r, err := storeutil.PrepareOverride(o)
	if err != nil {
		return persistence.ToolOverride{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := serverExists(ctx, tx, r.ServerID, o.ServerID); err != nil {
			return err
		}
		out, err = scanOverride(tx.QueryRowContext(ctx, `INSERT INTO tool_overrides (server_id, original_name,
				exposed_name, description, annotations, updated_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (server_id, original_name) DO UPDATE SET exposed_name = excluded.exposed_name,
				description = excluded.description, annotations = excluded.annotations,
				updated_at = excluded.updated_at
			RETURNING `+overrideColumns,
			r.ServerID, r.OriginalName, r.ExposedName, r.Description, jsonArg(r.Annotations),
			fmtTime(storeutil.Now())))
		return err
	})
	if err != nil {
		return persistence.ToolOverride{}, err
	}
	return out, nil
}

// DeleteToolOverride implements persistence.Store.
func (s *Store) DeleteToolOverride(ctx context.Context, serverID, originalName string) (err error) {
	defer wrap(&err, "delete override of %q on server %q", originalName, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	return execOne(ctx, s.w, "tool override", originalName,
		`DELETE FROM tool_overrides WHERE server_id = ? AND original_name = ?`, uid, originalName)
}

// ---- definition pins ----

const pinColumns = `server_id, original_name, approved_hash, approved_def, approved_at, pending_hash, pending_def,
	pending_since, rejected_hash`

func scanPin(row storeutil.Scanner) (persistence.ToolPin, error) {
	var p persistence.ToolPin
	var approved, approvedAt, pending, pendingSince sql.NullString
	if err := row.Scan(&p.ServerID, &p.OriginalName, &p.ApprovedHash, &approved, &approvedAt, &p.PendingHash,
		&pending, &pendingSince, &p.RejectedHash); err != nil {
		return persistence.ToolPin{}, err
	}
	p.ApprovedDef, p.PendingDef = nullJSON(approved), nullJSON(pending)
	var err error
	if p.ApprovedAt, err = parseNullTime(approvedAt); err != nil {
		return persistence.ToolPin{}, err
	}
	if p.PendingSince, err = parseNullTime(pendingSince); err != nil {
		return persistence.ToolPin{}, err
	}
	return p, nil
}

// ListToolPins implements persistence.Store: the version and the pins come from one snapshot.
func (s *Store) ListToolPins(ctx context.Context, serverID string) (out persistence.PinSet, err error) {
	defer wrap(&err, "list tool pins of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.PinSet{}, err
	}
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT pins_version FROM external_servers WHERE id = ?`, uid).
			Scan(&out.Version); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+pinColumns+` FROM tool_pins WHERE server_id = ?
			ORDER BY original_name`, uid)
		if err != nil {
			return err
		}
		out.Pins, err = storeutil.Collect(rows, scanPin)
		return err
	})
	if err != nil {
		return persistence.PinSet{}, err
	}
	return out, nil
}

// upsertPins writes pins (prepared for server uid) with one prepared statement.
func upsertPins(ctx context.Context, tx *sql.Tx, uid string, pins []persistence.ToolPin) error {
	return eachPrepared(ctx, tx, `INSERT INTO tool_pins (server_id, original_name, approved_hash, approved_def,
			approved_at, pending_hash, pending_def, pending_since, rejected_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (server_id, original_name) DO UPDATE SET approved_hash = excluded.approved_hash,
			approved_def = excluded.approved_def, approved_at = excluded.approved_at,
			pending_hash = excluded.pending_hash, pending_def = excluded.pending_def,
			pending_since = excluded.pending_since, rejected_hash = excluded.rejected_hash`,
		len(pins), func(i int) []any {
			p := pins[i]
			return []any{uid, p.OriginalName, p.ApprovedHash, jsonArg(p.ApprovedDef), fmtTimePtr(p.ApprovedAt),
				p.PendingHash, jsonArg(p.PendingDef), fmtTimePtr(p.PendingSince), p.RejectedHash}
		})
}

// SaveToolPins implements persistence.Store. The first save on a pinned server without a baseline time records
// it (that save is the baseline).
func (s *Store) SaveToolPins(ctx context.Context, serverID string, expect int64, pins []persistence.ToolPin, fence *persistence.Lease) (err error) {
	defer wrap(&err, "save tool pins of %q", serverID)
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
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		_, version, err := serverPins(ctx, tx, uid)
		if err != nil {
			return err
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if version != expect {
			return fmt.Errorf("pins at version %d, not %d: %w", version, expect, persistence.ErrChanged)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM tool_pins WHERE server_id = ?
			AND original_name NOT IN (SELECT value FROM json_each(?))`, uid, string(names)); err != nil {
			return fmt.Errorf("delete pins: %w", err)
		}
		if err := upsertPins(ctx, tx, uid, prepared); err != nil {
			return fmt.Errorf("write pins: %w", err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE external_servers SET pins_version = pins_version + 1,
			pins_baseline_at = CASE WHEN tool_pinning AND pins_baseline_at IS NULL THEN ?2 ELSE pins_baseline_at END
			WHERE id = ?1`, uid, fmtTime(now))
		return err
	})
}

// ResolveToolChange implements persistence.Store.
func (s *Store) ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, expectHash string) (out persistence.ToolPin, err error) {
	defer wrap(&err, "resolve change of %q on server %q", originalName, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.ToolPin{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := serverExists(ctx, tx, uid, serverID); err != nil {
			return err
		}
		pin, err := scanPin(tx.QueryRowContext(ctx, `SELECT `+pinColumns+` FROM tool_pins
			WHERE server_id = ? AND original_name = ?`, uid, originalName))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("pending change of tool", originalName)
		}
		if err != nil {
			return err
		}
		if pin, err = storeutil.ResolvePin(pin, approve, expectHash, storeutil.Now()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tool_pins SET approved_hash = ?3, approved_def = ?4,
				approved_at = ?5, pending_hash = '', pending_def = NULL, pending_since = NULL, rejected_hash = ?6
			WHERE server_id = ?1 AND original_name = ?2`, uid, originalName, pin.ApprovedHash,
			jsonArg(pin.ApprovedDef), fmtTimePtr(pin.ApprovedAt), pin.RejectedHash); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE external_servers SET pins_version = pins_version + 1 WHERE id = ?`,
			uid); err != nil {
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

const profileColumns = `name, description, selectors, clients, created_at, updated_at`

func scanProfile(row storeutil.Scanner) (persistence.Profile, error) {
	var p persistence.Profile
	var desc sql.NullString
	var selectors, clients, createdAt, updatedAt string
	if err := row.Scan(&p.Name, &desc, &selectors, &clients, &createdAt, &updatedAt); err != nil {
		return persistence.Profile{}, err
	}
	p.Description = nullString(desc)
	if err := storeutil.ParseProfileLists(&p, []byte(selectors), []byte(clients)); err != nil {
		return persistence.Profile{}, err
	}
	var err error
	if p.CreatedAt, err = parseTime(createdAt); err != nil {
		return persistence.Profile{}, err
	}
	if p.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return persistence.Profile{}, err
	}
	return p, nil
}

// ListProfiles implements persistence.Store.
func (s *Store) ListProfiles(ctx context.Context) (out []persistence.Profile, err error) {
	defer wrap(&err, "list profiles")
	rows, err := s.r.QueryContext(ctx, `SELECT `+profileColumns+` FROM profiles ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return storeutil.Collect(rows, scanProfile)
}

// GetProfile implements persistence.Store.
func (s *Store) GetProfile(ctx context.Context, name string) (_ persistence.Profile, err error) {
	defer wrap(&err, "get profile %q", name)
	return scanProfile(s.r.QueryRowContext(ctx, `SELECT `+profileColumns+` FROM profiles WHERE name = ?`, name))
}

// PutProfile implements persistence.Store.
func (s *Store) PutProfile(ctx context.Context, p persistence.Profile) (out persistence.Profile, created bool, err error) {
	defer wrap(&err, "put profile %q", p.Name)
	r, err := storeutil.PrepareProfile(p)
	if err != nil {
		return persistence.Profile{}, false, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		ts := fmtTime(storeutil.Now())
		v, err := scanProfile(tx.QueryRowContext(ctx, `INSERT INTO profiles (name, description, selectors, clients,
				created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
			ON CONFLICT (name) DO NOTHING RETURNING `+profileColumns,
			r.Name, r.Description, string(r.Selectors), string(r.Clients), ts))
		if err == nil {
			out, created = v, true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		out, err = scanProfile(tx.QueryRowContext(ctx, `UPDATE profiles SET description = ?2, selectors = ?3,
				clients = ?4, updated_at = ?5 WHERE name = ?1 RETURNING `+profileColumns,
			r.Name, r.Description, string(r.Selectors), string(r.Clients), ts))
		return err
	})
	if err != nil {
		return persistence.Profile{}, false, err
	}
	return out, created, nil
}

// DeleteProfile implements persistence.Store.
func (s *Store) DeleteProfile(ctx context.Context, name string) (err error) {
	defer wrap(&err, "delete profile %q", name)
	return execOne(ctx, s.w, "profile", name, `DELETE FROM profiles WHERE name = ?`, name)
}
