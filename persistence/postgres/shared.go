package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
)

// The features written once in persistence/internal/sqlstore (tool curation, prompts and resources, the audit log
// and the connection history), given
// PostgreSQL's SQL. Their writes lock the server row (LockServer's FOR UPDATE); lists order names with
// COLLATE "C" so that both stores order them byte by byte, whatever the database's locale. A bulk write is one
// statement over arrays (unnest), whatever the number of rows.

// dialect returns the sqlstore.Dialect of the store's pool.
func (s *Store) dialect() *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Name:   "postgres",
		MapErr: mapErr,
		ReadTx: func(ctx context.Context, fn func(sqlstore.Tx) error) error {
			return s.readTx(ctx, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
		},
		WriteTx: func(ctx context.Context, fn func(sqlstore.Tx) error) error {
			return s.writeTx(ctx, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
		},
		Writer:  pgTx{s.pool},
		NoLimit: nil, // LIMIT NULL
		Time:    func(t time.Time) any { return t },
		JSON:    textOrNil,
		Bulk:    bulk,
		CheckFence: func(ctx context.Context, tx sqlstore.Tx, uid string, fence *persistence.Lease) error {
			return checkFence(ctx, tx.(pgTx).q.(pgx.Tx), uid, fence)
		},
		ScanServer: func(row sqlstore.Row) (persistence.Server, error) { return scanServer(row) },
		Q:          queries(),
	}
}

// pgTx is a pgx transaction, or the pool, as sqlstore uses it.
type pgTx struct{ q querier }

func (t pgTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgTx) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return t.q.Query(ctx, query, args...)
}

func (t pgTx) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return t.q.QueryRow(ctx, query, args...)
}

// bulk runs query once with each parameter bound to the array of that column's values over the n rows: the
// query reads its rows from unnest($1::type[], $2::type[], ...).
func bulk(ctx context.Context, tx sqlstore.Tx, query string, n int, row func(i int) []any) error {
	if n == 0 {
		return nil
	}
	var cols [][]any
	for i := range n {
		r := row(i)
		if cols == nil {
			cols = make([][]any, len(r))
			for j := range cols {
				cols[j] = make([]any, n)
			}
		}
		for j, v := range r {
			cols[j][i] = v
		}
	}
	args := make([]any, len(cols))
	for j, c := range cols {
		args[j] = c
	}
	_, err := tx.Exec(ctx, query, args...)
	return err
}

// textOrNil binds JSON as text (the queries cast it to jsonb), nil as NULL.
func textOrNil(raw []byte) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

const overrideColumns = `server_id::text, original_name, exposed_name, description, annotations, updated_at`

const pinColumns = `server_id::text, original_name, approved_hash, approved_def, approved_at, pending_hash,
	pending_def, pending_since, rejected_hash`

const profileColumns = `name, description, selectors, clients, bindings, token_budget, created_at, updated_at`

// queries is PostgreSQL's SQL of the shared features.
func queries() sqlstore.Queries {
	return sqlstore.Queries{
		ServerColumns: serverColumns,
		GetServer:     `SELECT ` + serverColumns + ` FROM mcp.external_servers WHERE id = $1`,
		ServerExists:  `SELECT EXISTS (SELECT 1 FROM mcp.external_servers WHERE id = $1)`,
		LockServer:    `SELECT tool_pinning, pins_version FROM mcp.external_servers WHERE id = $1 FOR UPDATE`,

		UpdatePolicy: `UPDATE mcp.external_servers SET
			tool_filter = CASE WHEN $2::boolean THEN $3::jsonb ELSE tool_filter END,
			tool_pinning = COALESCE($4::boolean, tool_pinning),
			pin_new_tools = COALESCE($5::text, pin_new_tools),
			pins_baseline_at = CASE WHEN $6::boolean THEN $8 ELSE pins_baseline_at END,
			pins_version = pins_version + CASE WHEN $6::boolean OR $7::boolean THEN 1 ELSE 0 END,
			updated_at = $8
		WHERE id = $1 RETURNING ` + serverColumns,
		DeletePins: `DELETE FROM mcp.tool_pins WHERE server_id = $1`,
		ClearPending: `UPDATE mcp.tool_pins SET pending_hash = '', pending_def = NULL, pending_since = NULL
		WHERE server_id = $1 AND (pending_hash <> '' OR pending_def IS NOT NULL OR pending_since IS NOT NULL)`,
		PinsVersion: `SELECT pins_version FROM mcp.external_servers WHERE id = $1`,
		ListPins: `SELECT ` + pinColumns + ` FROM mcp.tool_pins WHERE server_id = $1
		ORDER BY original_name COLLATE "C"`,
		GetPin: `SELECT ` + pinColumns + ` FROM mcp.tool_pins WHERE server_id = $1 AND original_name = $2`,
		UpsertPin: `INSERT INTO mcp.tool_pins (server_id, original_name, approved_hash, approved_def, approved_at,
			pending_hash, pending_def, pending_since, rejected_hash)
		SELECT u.server_id, u.original_name, u.approved_hash, u.approved_def::jsonb, u.approved_at, u.pending_hash,
			u.pending_def::jsonb, u.pending_since, u.rejected_hash
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[],
			$8::timestamptz[], $9::text[])
			AS u(server_id, original_name, approved_hash, approved_def, approved_at, pending_hash, pending_def,
				pending_since, rejected_hash)
		ON CONFLICT (server_id, original_name) DO UPDATE SET approved_hash = EXCLUDED.approved_hash,
			approved_def = EXCLUDED.approved_def, approved_at = EXCLUDED.approved_at,
			pending_hash = EXCLUDED.pending_hash, pending_def = EXCLUDED.pending_def,
			pending_since = EXCLUDED.pending_since, rejected_hash = EXCLUDED.rejected_hash`,
		DeletePinsExcept: `DELETE FROM mcp.tool_pins WHERE server_id = $1
		AND original_name NOT IN (SELECT jsonb_array_elements_text($2::jsonb))`,
		SavedPins: `UPDATE mcp.external_servers SET pins_version = pins_version + 1,
		pins_baseline_at = CASE WHEN tool_pinning AND pins_baseline_at IS NULL THEN $2 ELSE pins_baseline_at END
		WHERE id = $1`,
		ResolvePin: `UPDATE mcp.tool_pins SET approved_hash = $3, approved_def = $4::jsonb, approved_at = $5,
			pending_hash = '', pending_def = NULL, pending_since = NULL, rejected_hash = $6
		WHERE server_id = $1 AND original_name = $2`,
		BumpPins: `UPDATE mcp.external_servers SET pins_version = pins_version + 1 WHERE id = $1`,

		ListOverrides: `SELECT ` + overrideColumns + ` FROM mcp.tool_overrides
		WHERE ($1::uuid IS NULL OR server_id = $1) ORDER BY server_id, original_name COLLATE "C"`,
		UpsertOverride: `INSERT INTO mcp.tool_overrides (server_id, original_name, exposed_name, description,
			annotations, updated_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)
		ON CONFLICT (server_id, original_name) DO UPDATE SET exposed_name = EXCLUDED.exposed_name,
			description = EXCLUDED.description, annotations = EXCLUDED.annotations, updated_at = EXCLUDED.updated_at
		RETURNING ` + overrideColumns,
		DeleteOverride: `DELETE FROM mcp.tool_overrides WHERE server_id = $1 AND original_name = $2`,

		ListProfiles: `SELECT ` + profileColumns + ` FROM mcp.profiles ORDER BY name COLLATE "C"`,
		GetProfile:   `SELECT ` + profileColumns + ` FROM mcp.profiles WHERE name = $1`,
		InsertProfile: `INSERT INTO mcp.profiles (name, description, selectors, clients, bindings, token_budget, created_at, updated_at)
		VALUES ($1, $2, $3::jsonb, $4::jsonb, $5::jsonb, $7, $6, $6) ON CONFLICT (name) DO NOTHING RETURNING ` + profileColumns,
		UpdateProfile: `UPDATE mcp.profiles SET description = $2, selectors = $3::jsonb, clients = $4::jsonb,
		bindings = $5::jsonb, token_budget = $7, updated_at = $6 WHERE name = $1 RETURNING ` + profileColumns,
		DeleteProfile: `DELETE FROM mcp.profiles WHERE name = $1`,

		DeleteFeatures: `DELETE FROM mcp.server_features WHERE server_id = $1`,
		InsertFeature: `INSERT INTO mcp.server_features (server_id, kind, key, position, definition, updated_at)
		SELECT u.server_id, u.kind, u.key, u.position, u.definition::jsonb, u.updated_at
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::timestamptz[])
			AS u(server_id, kind, key, position, definition, updated_at)`,
		ListFeatures: `SELECT server_id::text, kind, key, position, definition::text, updated_at
		FROM mcp.server_features WHERE ($1::uuid IS NULL OR server_id = $1) ORDER BY server_id, kind, position`,

		InsertAudit: `INSERT INTO mcp.audit_log (event, server_id, server_name, actor, ip_address, details, timestamp)
			VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)`,
		CountAudit: `SELECT count(*) FROM mcp.audit_log`,
		ListAudit: `SELECT id, event, server_id::text, server_name, actor, ip_address, details, timestamp
			FROM mcp.audit_log ORDER BY timestamp DESC, id DESC LIMIT $1 OFFSET $2`,
		ListHistory: `SELECT id, server_id::text, event_type, details, timestamp
			FROM mcp.server_connection_history WHERE server_id = $1 ORDER BY id DESC LIMIT $2`,

		SecretExists: `SELECT EXISTS (SELECT 1 FROM mcp.user_credentials WHERE server_id = $1 AND subject = $2)`,
		UpsertSecret: `INSERT INTO mcp.user_credentials (server_id, subject, secret, created_at, updated_at)
			VALUES ($1, $2, $3::jsonb, $4, $4)
			ON CONFLICT (server_id, subject) DO UPDATE SET secret = EXCLUDED.secret, updated_at = EXCLUDED.updated_at`,
		GetSecret: `SELECT server_id::text, subject, secret::text, created_at, updated_at FROM mcp.user_credentials
			WHERE server_id = $1 AND subject = $2`,
		ListSecrets: `SELECT server_id::text, subject, created_at, updated_at FROM mcp.user_credentials
			WHERE ($1::uuid IS NULL OR server_id = $1) ORDER BY server_id, subject COLLATE "C"`,
		DeleteSecret: `DELETE FROM mcp.user_credentials WHERE server_id = $1 AND subject = $2`,
	}
}
