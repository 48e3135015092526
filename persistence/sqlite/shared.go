package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
)

// The features written once in persistence/internal/sqlstore (tool curation, prompts and resources, the audit log
// and the connection history), given
// SQLite's SQL. Every write runs in a write transaction, which holds SQLite's write lock from BEGIN, so a check
// made in it still holds when it writes; a bulk write is one prepared statement executed once per row.

// dialect returns the sqlstore.Dialect of the store's connections.
func (s *Store) dialect() *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Name:   "sqlite",
		MapErr: mapErr,
		ReadTx: func(ctx context.Context, fn func(sqlstore.Tx) error) error {
			return s.readTx(ctx, func(tx *sql.Tx) error { return fn(sqlTx{tx}) })
		},
		WriteTx: func(ctx context.Context, fn func(sqlstore.Tx) error) error {
			return s.writeTx(ctx, func(tx *sql.Tx) error { return fn(sqlTx{tx}) })
		},
		Writer:  sqlTx{s.w},
		NoLimit: -1, // SQLite's LIMIT -1
		Time:    func(t time.Time) any { return fmtTime(t) },
		JSON:    func(raw []byte) any { return jsonArg(raw) },
		Bulk: func(ctx context.Context, tx sqlstore.Tx, query string, n int, row func(i int) []any) error {
			return bulkExec(ctx, tx.(sqlTx).q.(*sql.Tx), query, n, row)
		},
		CheckFence: func(ctx context.Context, tx sqlstore.Tx, uid string, fence *persistence.Lease) error {
			return checkFence(ctx, tx.(sqlTx).q.(*sql.Tx), uid, fence)
		},
		ScanServer: func(row sqlstore.Row) (persistence.Server, error) { return scanServer(row) },
		Q:          queries(),
	}
}

// sqlTx is a database/sql transaction, or the write connection, as sqlstore uses it.
type sqlTx struct{ q querier }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := t.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return t.q.QueryRowContext(ctx, query, args...)
}

// sqlRows is *sql.Rows with the Close sqlstore.Rows has (its error is the one Err reports).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

const overrideColumns = `server_id, original_name, exposed_name, description, annotations, updated_at`

const pinColumns = `server_id, original_name, approved_hash, approved_def, approved_at, pending_hash, pending_def,
	pending_since, rejected_hash`

const profileColumns = `name, description, selectors, clients, bindings, token_budget, created_at, updated_at`

// queries is SQLite's SQL of the shared features.
func queries() sqlstore.Queries {
	return sqlstore.Queries{
		ServerColumns: serverColumns,
		GetServer:     `SELECT ` + serverColumns + ` FROM external_servers WHERE id = ?`,
		ServerExists:  `SELECT EXISTS (SELECT 1 FROM external_servers WHERE id = ?)`,
		LockServer:    `SELECT tool_pinning, pins_version FROM external_servers WHERE id = ?`,

		UpdatePolicy: `UPDATE external_servers SET
				tool_filter = CASE WHEN ?2 THEN ?3 ELSE tool_filter END,
				tool_pinning = COALESCE(?4, tool_pinning),
				pin_new_tools = COALESCE(?5, pin_new_tools),
				pins_baseline_at = CASE WHEN ?6 THEN ?8 ELSE pins_baseline_at END,
				pins_version = pins_version + CASE WHEN ?6 OR ?7 THEN 1 ELSE 0 END,
				updated_at = ?8
			WHERE id = ?1 RETURNING ` + serverColumns,
		DeletePins: `DELETE FROM tool_pins WHERE server_id = ?`,
		ClearPending: `UPDATE tool_pins SET pending_hash = '', pending_def = NULL, pending_since = NULL
			WHERE server_id = ? AND (pending_hash <> '' OR pending_def IS NOT NULL OR pending_since IS NOT NULL)`,
		PinsVersion: `SELECT pins_version FROM external_servers WHERE id = ?`,
		ListPins:    `SELECT ` + pinColumns + ` FROM tool_pins WHERE server_id = ? ORDER BY original_name`,
		GetPin:      `SELECT ` + pinColumns + ` FROM tool_pins WHERE server_id = ? AND original_name = ?`,
		UpsertPin: `INSERT INTO tool_pins (server_id, original_name, approved_hash, approved_def, approved_at,
				pending_hash, pending_def, pending_since, rejected_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (server_id, original_name) DO UPDATE SET approved_hash = excluded.approved_hash,
				approved_def = excluded.approved_def, approved_at = excluded.approved_at,
				pending_hash = excluded.pending_hash, pending_def = excluded.pending_def,
				pending_since = excluded.pending_since, rejected_hash = excluded.rejected_hash`,
		DeletePinsExcept: `DELETE FROM tool_pins WHERE server_id = ?
			AND original_name NOT IN (SELECT value FROM json_each(?))`,
		SavedPins: `UPDATE external_servers SET pins_version = pins_version + 1,
			pins_baseline_at = CASE WHEN tool_pinning AND pins_baseline_at IS NULL THEN ?2 ELSE pins_baseline_at END
			WHERE id = ?1`,
		ResolvePin: `UPDATE tool_pins SET approved_hash = ?3, approved_def = ?4, approved_at = ?5, pending_hash = '',
				pending_def = NULL, pending_since = NULL, rejected_hash = ?6
			WHERE server_id = ?1 AND original_name = ?2`,
		BumpPins: `UPDATE external_servers SET pins_version = pins_version + 1 WHERE id = ?`,

		ListOverrides: `SELECT ` + overrideColumns + ` FROM tool_overrides
			WHERE (?1 IS NULL OR server_id = ?1) ORDER BY server_id, original_name`,
		UpsertOverride: `INSERT INTO tool_overrides (server_id, original_name, exposed_name, description,
				annotations, updated_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (server_id, original_name) DO UPDATE SET exposed_name = excluded.exposed_name,
				description = excluded.description, annotations = excluded.annotations,
				updated_at = excluded.updated_at
			RETURNING ` + overrideColumns,
		DeleteOverride: `DELETE FROM tool_overrides WHERE server_id = ? AND original_name = ?`,

		ListProfiles: `SELECT ` + profileColumns + ` FROM profiles ORDER BY name`,
		GetProfile:   `SELECT ` + profileColumns + ` FROM profiles WHERE name = ?`,
		InsertProfile: `INSERT INTO profiles (name, description, selectors, clients, bindings, token_budget, created_at, updated_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?6, ?6) ON CONFLICT (name) DO NOTHING RETURNING ` + profileColumns,
		UpdateProfile: `UPDATE profiles SET description = ?2, selectors = ?3, clients = ?4, bindings = ?5, token_budget = ?7, updated_at = ?6
			WHERE name = ?1 RETURNING ` + profileColumns,
		DeleteProfile: `DELETE FROM profiles WHERE name = ?`,

		DeleteFeatures: `DELETE FROM server_features WHERE server_id = ?`,
		InsertFeature: `INSERT INTO server_features (server_id, kind, key, position, definition, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)`,
		ListFeatures: `SELECT server_id, kind, key, position, definition, updated_at
			FROM server_features WHERE (?1 IS NULL OR server_id = ?1) ORDER BY server_id, kind, position`,

		InsertAudit: `INSERT INTO audit_log (event, server_id, server_name, actor, ip_address, details, timestamp)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
		CountAudit: `SELECT count(*) FROM audit_log`,
		ListAudit: `SELECT id, event, server_id, server_name, actor, ip_address, details, timestamp
			FROM audit_log ORDER BY timestamp DESC, id DESC LIMIT ? OFFSET ?`,
		ListHistory: `SELECT id, server_id, event_type, details, timestamp
			FROM server_connection_history WHERE server_id = ? ORDER BY id DESC LIMIT ?`,

		SecretExists: `SELECT EXISTS (SELECT 1 FROM user_credentials WHERE server_id = ? AND subject = ?)`,
		UpsertSecret: `INSERT INTO user_credentials (server_id, subject, secret, created_at, updated_at)
			VALUES (?1, ?2, ?3, ?4, ?4)
			ON CONFLICT (server_id, subject) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at`,
		GetSecret: `SELECT server_id, subject, secret, created_at, updated_at FROM user_credentials
			WHERE server_id = ? AND subject = ?`,
		ListSecrets: `SELECT server_id, subject, created_at, updated_at FROM user_credentials
			WHERE (?1 IS NULL OR server_id = ?1) ORDER BY server_id, subject`,
		DeleteSecret: `DELETE FROM user_credentials WHERE server_id = ? AND subject = ?`,
	}
}
