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

// Tool curation: the server's policy columns, tool overrides, definition pins and profiles (migration 0004).
// Lists are ordered with COLLATE "C" so that both stores order names byte by byte, whatever the database's locale.

// fkNotFound turns a foreign key violation (the row referred to is gone) into ErrNotFound for what.
func fkNotFound(err error, what, id string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation
		return fmt.Errorf("%w: %w", storeutil.NotFound(what, id), err)
	}
	return err
}

// lockServer locks the server row for the rest of tx and returns the columns the curation writes decide on; no
// row is ErrNotFound.
func lockServer(ctx context.Context, tx pgx.Tx, uid string) (pinning bool, version int64, err error) {
	err = tx.QueryRow(ctx, `SELECT tool_pinning, pins_version FROM mcp.external_servers WHERE id = $1 FOR UPDATE`,
		uid).Scan(&pinning, &version)
	return pinning, version, err
}

// SetToolPolicy implements persistence.Store. The server row is locked, so the decision "pinning turns on" and
// the baseline it writes cannot race another policy change or a SaveToolPins. A non-empty patch sets updated_at.
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
	var pinNew any
	if u.SetPinNew {
		pinNew = u.PinNewTools
	}
	var pinning any
	if u.SetPinning {
		pinning = u.Pinning
	}
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		was, _, err := lockServer(ctx, tx, uid)
		if err != nil {
			return err
		}
		on := u.SetPinning && u.Pinning && !was
		off := u.SetPinning && !u.Pinning && was
		ts := storeutil.Now()
		if on {
			if _, err := tx.Exec(ctx, `DELETE FROM mcp.tool_pins WHERE server_id = $1`, uid); err != nil {
				return fmt.Errorf("clear pins: %w", err)
			}
			if err := upsertPins(ctx, tx, uid, u.Baseline); err != nil {
				return fmt.Errorf("write baseline: %w", err)
			}
		}
		if off {
			if _, err := tx.Exec(ctx, `UPDATE mcp.tool_pins SET pending_hash = '', pending_def = NULL,
				pending_since = NULL WHERE server_id = $1 AND (pending_hash <> '' OR pending_def IS NOT NULL
				OR pending_since IS NOT NULL)`, uid); err != nil {
				return fmt.Errorf("clear pending changes: %w", err)
			}
		}
		out, err = scanServer(tx.QueryRow(ctx, `UPDATE mcp.external_servers SET
				tool_filter = CASE WHEN $2::boolean THEN $3::jsonb ELSE tool_filter END,
				tool_pinning = COALESCE($4::boolean, tool_pinning),
				pin_new_tools = COALESCE($5::text, pin_new_tools),
				pins_baseline_at = CASE WHEN $6::boolean THEN $8 ELSE pins_baseline_at END,
				pins_version = pins_version + CASE WHEN $6::boolean OR $7::boolean THEN 1 ELSE 0 END,
				updated_at = $8
			WHERE id = $1 RETURNING `+serverColumns,
			uid, u.SetFilter, u.Filter, pinning, pinNew, on, off, ts))
		return err
	})
	if err != nil {
		return persistence.Server{}, err
	}
	return out, nil
}

// ---- tool overrides ----

const overrideColumns = `server_id::text, original_name, exposed_name, description, annotations, updated_at`

func scanOverride(row storeutil.Scanner) (persistence.ToolOverride, error) {
	var o persistence.ToolOverride
	var annotations []byte
	if err := row.Scan(&o.ServerID, &o.OriginalName, &o.ExposedName, &o.Description, &annotations,
		&o.UpdatedAt); err != nil {
		return persistence.ToolOverride{}, err
	}
	var err error
	if o.Annotations, err = storeutil.ParseAnnotations(annotations); err != nil {
		return persistence.ToolOverride{}, err
	}
	o.UpdatedAt = o.UpdatedAt.UTC()
	return o, nil
}

// ListToolOverrides implements persistence.Store.
func (s *Store) ListToolOverrides(ctx context.Context, serverID string) (out []persistence.ToolOverride, err error) {
	defer wrap(&err, "list tool overrides")
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
		rows, err := tx.Query(ctx, `SELECT `+overrideColumns+` FROM mcp.tool_overrides
			WHERE ($1::uuid IS NULL OR server_id = $1) ORDER BY server_id, original_name COLLATE "C"`, nullIfEmpty(sid))
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

// PutToolOverride implements persistence.Store: one upsert; the foreign key decides an unknown server, the
// unique index on exposed_name a taken name.
func (s *Store) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (_ persistence.ToolOverride, err error) {
	defer wrap(&err, "put override of %q on server %q", o.OriginalName, o.ServerID)
	r, err := storeutil.PrepareOverride(o)
	if err != nil {
		return persistence.ToolOverride{}, err
	}
	out, err := scanOverride(s.pool.QueryRow(ctx, `INSERT INTO mcp.tool_overrides (server_id, original_name,
			exposed_name, description, annotations, updated_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)
		ON CONFLICT (server_id, original_name) DO UPDATE SET exposed_name = EXCLUDED.exposed_name,
			description = EXCLUDED.description, annotations = EXCLUDED.annotations, updated_at = EXCLUDED.updated_at
		RETURNING `+overrideColumns,
		r.ServerID, r.OriginalName, r.ExposedName, r.Description, r.Annotations, storeutil.Now()))
	if err != nil {
		return persistence.ToolOverride{}, fkNotFound(err, "server", o.ServerID)
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
	return execOne(ctx, s.pool, "tool override", originalName,
		`DELETE FROM mcp.tool_overrides WHERE server_id = $1 AND original_name = $2`, uid, originalName)
}

// ---- definition pins ----

const pinColumns = `server_id::text, original_name, approved_hash, approved_def, approved_at, pending_hash,
	pending_def, pending_since, rejected_hash`

func scanPin(row storeutil.Scanner) (persistence.ToolPin, error) {
	var p persistence.ToolPin
	var approved, pending []byte
	if err := row.Scan(&p.ServerID, &p.OriginalName, &p.ApprovedHash, &approved, &p.ApprovedAt, &p.PendingHash,
		&pending, &p.PendingSince, &p.RejectedHash); err != nil {
		return persistence.ToolPin{}, err
	}
	p.ApprovedDef, p.PendingDef = approved, pending
	p.ApprovedAt, p.PendingSince = storeutil.NormTimePtr(p.ApprovedAt), storeutil.NormTimePtr(p.PendingSince)
	return p, nil
}

// ListToolPins implements persistence.Store: the version and the pins come from one snapshot.
func (s *Store) ListToolPins(ctx context.Context, serverID string) (out persistence.PinSet, err error) {
	defer wrap(&err, "list tool pins of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.PinSet{}, err
	}
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pins_version FROM mcp.external_servers WHERE id = $1`, uid).
			Scan(&out.Version); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+pinColumns+` FROM mcp.tool_pins WHERE server_id = $1
			ORDER BY original_name COLLATE "C"`, uid)
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

// upsertPins writes pins (prepared for server uid) in one statement, whatever their number.
func upsertPins(ctx context.Context, tx pgx.Tx, uid string, pins []persistence.ToolPin) error {
	if len(pins) == 0 {
		return nil
	}
	n := len(pins)
	names, approvedHash, pendingHash, rejectedHash := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n)
	approvedDef, pendingDef := make([]*string, n), make([]*string, n)
	approvedAt, pendingSince := make([]*time.Time, n), make([]*time.Time, n)
	for i, p := range pins {
		names[i], approvedHash[i], pendingHash[i], rejectedHash[i] = p.OriginalName, p.ApprovedHash, p.PendingHash,
			p.RejectedHash
		approvedDef[i], pendingDef[i] = textOrNil(p.ApprovedDef), textOrNil(p.PendingDef)
		approvedAt[i], pendingSince[i] = p.ApprovedAt, p.PendingSince
	}
	_, err := tx.Exec(ctx, `INSERT INTO mcp.tool_pins (server_id, original_name, approved_hash, approved_def,
			approved_at, pending_hash, pending_def, pending_since, rejected_hash)
		SELECT $1, u.original_name, u.approved_hash, u.approved_def::jsonb, u.approved_at, u.pending_hash,
			u.pending_def::jsonb, u.pending_since, u.rejected_hash
		FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[],
			$8::timestamptz[], $9::text[])
			AS u(original_name, approved_hash, approved_def, approved_at, pending_hash, pending_def, pending_since,
				rejected_hash)
		ON CONFLICT (server_id, original_name) DO UPDATE SET approved_hash = EXCLUDED.approved_hash,
			approved_def = EXCLUDED.approved_def, approved_at = EXCLUDED.approved_at,
			pending_hash = EXCLUDED.pending_hash, pending_def = EXCLUDED.pending_def,
			pending_since = EXCLUDED.pending_since, rejected_hash = EXCLUDED.rejected_hash`,
		uid, names, approvedHash, approvedDef, approvedAt, pendingHash, pendingDef, pendingSince, rejectedHash)
	return err
}

// textOrNil binds JSON as text, nil as NULL.
func textOrNil(raw []byte) *string {
	if raw == nil {
		return nil
	}
	s := string(raw)
	return &s
}

// SaveToolPins implements persistence.Store. The server row is locked before pins_version is compared, so two
// writers from the same read cannot both succeed. The first save on a pinned server without a baseline time
// records it (that save is the baseline).
func (s *Store) SaveToolPins(ctx context.Context, serverID string, expect int64, pins []persistence.ToolPin, fence *persistence.Lease) (err error) {
	defer wrap(&err, "save tool pins of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	ts := storeutil.Now()
	prepared, err := storeutil.PreparePins(uid, pins, ts)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx pgx.Tx) error {
		_, version, err := lockServer(ctx, tx, uid)
		if err != nil {
			return err
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		if version != expect {
			return fmt.Errorf("pins at version %d, not %d: %w", version, expect, persistence.ErrChanged)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM mcp.tool_pins WHERE server_id = $1
			AND NOT (original_name = ANY($2::text[]))`, uid, storeutil.PinNames(prepared)); err != nil {
			return fmt.Errorf("delete pins: %w", err)
		}
		if err := upsertPins(ctx, tx, uid, prepared); err != nil {
			return fmt.Errorf("write pins: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE mcp.external_servers SET pins_version = pins_version + 1,
			pins_baseline_at = CASE WHEN tool_pinning AND pins_baseline_at IS NULL THEN $2 ELSE pins_baseline_at END
			WHERE id = $1`, uid, ts)
		return err
	})
}

// ResolveToolChange implements persistence.Store, under the server row's lock like SaveToolPins.
func (s *Store) ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, expectHash string) (out persistence.ToolPin, err error) {
	defer wrap(&err, "resolve change of %q on server %q", originalName, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.ToolPin{}, err
	}
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		if _, _, err := lockServer(ctx, tx, uid); err != nil {
			return err
		}
		pin, err := scanPin(tx.QueryRow(ctx, `SELECT `+pinColumns+` FROM mcp.tool_pins
			WHERE server_id = $1 AND original_name = $2`, uid, originalName))
		if errors.Is(err, pgx.ErrNoRows) {
			return storeutil.NotFound("pending change of tool", originalName)
		}
		if err != nil {
			return err
		}
		if pin, err = storeutil.ResolvePin(pin, approve, expectHash, storeutil.Now()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE mcp.tool_pins SET approved_hash = $3, approved_def = $4::jsonb,
				approved_at = $5, pending_hash = '', pending_def = NULL, pending_since = NULL, rejected_hash = $6
			WHERE server_id = $1 AND original_name = $2`, uid, originalName, pin.ApprovedHash,
			textOrNil(pin.ApprovedDef), pin.ApprovedAt, pin.RejectedHash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE mcp.external_servers SET pins_version = pins_version + 1 WHERE id = $1`,
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
	var selectors, clients []byte
	if err := row.Scan(&p.Name, &p.Description, &selectors, &clients, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return persistence.Profile{}, err
	}
	if err := storeutil.ParseProfileLists(&p, selectors, clients); err != nil {
		return persistence.Profile{}, err
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p, nil
}

// ListProfiles implements persistence.Store.
func (s *Store) ListProfiles(ctx context.Context) (out []persistence.Profile, err error) {
	defer wrap(&err, "list profiles")
	rows, err := s.pool.Query(ctx, `SELECT `+profileColumns+` FROM mcp.profiles ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	return storeutil.Collect(rows, scanProfile)
}

// GetProfile implements persistence.Store.
func (s *Store) GetProfile(ctx context.Context, name string) (_ persistence.Profile, err error) {
	defer wrap(&err, "get profile %q", name)
	return scanProfile(s.pool.QueryRow(ctx, `SELECT `+profileColumns+` FROM mcp.profiles WHERE name = $1`, name))
}

// PutProfile implements persistence.Store: an insert that does nothing on a taken name (waiting for a concurrent
// creator to commit), then the update of the row that is there.
func (s *Store) PutProfile(ctx context.Context, p persistence.Profile) (out persistence.Profile, created bool, err error) {
	defer wrap(&err, "put profile %q", p.Name)
	r, err := storeutil.PrepareProfile(p)
	if err != nil {
		return persistence.Profile{}, false, err
	}
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		ts := storeutil.Now()
		v, err := scanProfile(tx.QueryRow(ctx, `INSERT INTO mcp.profiles (name, description, selectors, clients,
				created_at, updated_at) VALUES ($1, $2, $3::jsonb, $4::jsonb, $5, $5)
			ON CONFLICT (name) DO NOTHING RETURNING `+profileColumns, r.Name, r.Description, r.Selectors, r.Clients, ts))
		if err == nil {
			out, created = v, true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		out, err = scanProfile(tx.QueryRow(ctx, `UPDATE mcp.profiles SET description = $2, selectors = $3::jsonb,
				clients = $4::jsonb, updated_at = $5 WHERE name = $1 RETURNING `+profileColumns,
			r.Name, r.Description, r.Selectors, r.Clients, ts))
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
	return execOne(ctx, s.pool, "profile", name, `DELETE FROM mcp.profiles WHERE name = $1`, name)
}
