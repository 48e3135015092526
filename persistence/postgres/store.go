// Package postgres is the production persistence.Store: PostgreSQL (schema mcp) through a pgx connection pool,
// configured by DATABASE_URL. Open migrates the database before returning, so a fresh database works at once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/mcpgw/aggregator/migrations"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Store implements persistence.Store on a pgx pool. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	sqlstore.Curation
	sqlstore.Features
	sqlstore.Log
	sqlstore.Credentials
	sqlstore.Tasks
	sqlstore.OAuth
}

var _ persistence.Store = (*Store)(nil)

// Open connects to databaseURL (a postgres:// URL or a keyword/value DSN), checks the connection, applies the
// pending migrations and returns the store. Several processes may Open the same database at once.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port,
			cfg.ConnConfig.Database, mapErr(err))
	}
	db := stdlib.OpenDBFromPool(pool)
	_, err = migrations.Apply(ctx, db, migrations.Postgres)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	s := &Store{pool: pool}
	d := s.dialect()
	s.Curation, s.Features, s.Log = sqlstore.NewCuration(d), sqlstore.NewFeatures(d), sqlstore.NewLog(d)
	s.Credentials = sqlstore.NewCredentials(d)
	s.Tasks = sqlstore.NewTasks(d, taskQueries())
	s.OAuth = sqlstore.NewOAuth(d, oauthQueries())
	return s, nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer wrap(&err, "ping")
	return s.pool.Ping(ctx)
}

// Close closes the pool, waiting for connections in use to be released.
func (s *Store) Close() { s.pool.Close() }

// Kind is "postgres".
func (s *Store) Kind() string { return "postgres" }

// mapErr turns driver errors into the persistence sentinels, keeping the driver error in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return persistence.ErrNotFound
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %w", persistence.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %w", persistence.ErrAlreadyExists, err)
	}
	return err
}

// wrap gives the error a Store method returns, if any, its context once: the driver's error mapped to the
// persistence sentinels, behind "postgres: " and what the method was doing. Each method defers it first thing.
func wrap(errp *error, format string, args ...any) {
	*errp = mapErr(*errp)
	storeutil.Wrapf(errp, "postgres: "+format, args...)
}

// unreachable reports whether err means the database could not be reached or the connection was lost: connect
// errors, a connection closed or reset, timeouts, and the server's own "connection exception" and shutdown codes.
// A caller's cancellation is not an outage.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300": // admin/crash shutdown, cannot connect now, too many connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), pgconn.Timeout(err), errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return false
}

// querier is what pgxpool.Pool and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readTx runs fn in a read-only repeatable-read transaction, so a page and its total agree.
func (s *Store) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func (s *Store) writeTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, fn)
}

// limitArg is the LIMIT parameter: NULL (no limit) for limit <= 0.
func limitArg(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit
}

func offsetArg(offset int) int { return max(offset, 0) }

// nullIfEmpty binds the empty string as NULL: a filter's "every server".
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ---- servers ----

const serverColumns = `id::text, name, description, transport_type, connection_config, health_check_url,
	auto_connect, status, error_message, tool_count, last_health_check, health_response_ms, consecutive_failures,
	registered_at, connected_at, updated_at, tool_filter, tool_pinning, pin_new_tools, pins_baseline_at,
	credential_mode, user_credential`

func scanServer(row storeutil.Scanner) (persistence.Server, error) {
	var v persistence.Server
	var cfg, filter, slot []byte
	err := row.Scan(&v.ID, &v.Name, &v.Description, &v.TransportType, &cfg, &v.HealthCheckURL, &v.AutoConnect,
		&v.Status, &v.ErrorMessage, &v.ToolCount, &v.LastHealthCheck, &v.HealthResponseMs,
		&v.ConsecutiveFailures, &v.RegisteredAt, &v.ConnectedAt, &v.UpdatedAt, &filter, &v.Policy.Pinning,
		&v.Policy.PinNewTools, &v.Policy.PinsBaselineAt, &v.CredentialMode, &slot)
	if err != nil {
		return persistence.Server{}, err
	}
	v.ConnectionConfig = cfg
	if v.UserCredential, err = storeutil.ParseUserCredential(slot); err != nil {
		return persistence.Server{}, err
	}
	if v.Policy.Filter, err = storeutil.ParseFilter(filter); err != nil {
		return persistence.Server{}, err
	}
	v.Policy.PinsBaselineAt = storeutil.NormTimePtr(v.Policy.PinsBaselineAt)
	v.RegisteredAt = v.RegisteredAt.UTC()
	v.UpdatedAt = v.UpdatedAt.UTC()
	v.LastHealthCheck = storeutil.NormTimePtr(v.LastHealthCheck)
	v.ConnectedAt = storeutil.NormTimePtr(v.ConnectedAt)
	return v, nil
}

// CreateServer inserts s as given, except for the create-time defaults (storeutil.PrepareCreate): the store fills
// ID (a UUIDv7 when empty), RegisteredAt and UpdatedAt (storeutil.Now), Status (DISCONNECTED when empty), and
// brings s's times to UTC microseconds. The name's UNIQUE constraint decides duplicates: ErrAlreadyExists.
func (s *Store) CreateServer(ctx context.Context, srv *persistence.Server, max int) (err error) {
	defer wrap(&err, "create server %q", srv.Name)
	v, err := storeutil.PrepareCreate(*srv)
	if err != nil {
		return err
	}
	if max <= 0 {
		err = insertServer(ctx, s.pool, v)
	} else {
		err = s.writeTx(ctx, func(tx pgx.Tx) error { return insertLimited(ctx, tx, v, max) })
	}
	if err != nil {
		return err
	}
	*srv = v
	return nil
}

// insertServer inserts the prepared row v.
func insertServer(ctx context.Context, q querier, v persistence.Server) error {
	var cfg any // a nil RawMessage must reach the database as NULL and fail NOT NULL
	if v.ConnectionConfig != nil {
		cfg = []byte(v.ConnectionConfig)
	}
	_, err := q.Exec(ctx, `INSERT INTO mcp.external_servers (id, name, description, transport_type,
		connection_config, health_check_url, auto_connect, status, error_message, tool_count, last_health_check,
		health_response_ms, consecutive_failures, registered_at, connected_at, updated_at, tool_filter, tool_pinning,
		pin_new_tools, pins_baseline_at, credential_mode, user_credential)
		VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $14, $16::jsonb, $17, $18,
			$19, $20, $21::jsonb)`,
		v.ID, v.Name, v.Description, v.TransportType, cfg, v.HealthCheckURL, v.AutoConnect, v.Status,
		v.ErrorMessage, v.ToolCount, v.LastHealthCheck, v.HealthResponseMs, v.ConsecutiveFailures, v.RegisteredAt,
		v.ConnectedAt, storeutil.FilterJSON(v.Policy.Filter), v.Policy.Pinning, v.Policy.PinNewTools,
		v.Policy.PinsBaselineAt, v.CredentialMode, storeutil.UserCredentialJSON(v.UserCredential))
	return err
}

// insertLimited inserts v in tx unless max servers are registered (ErrLimitReached); max <= 0 is no limit. The
// advisory lock makes count-then-insert one decision for every process on the database.
func insertLimited(ctx context.Context, tx pgx.Tx, v persistence.Server, max int) error {
	if max > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, createServerLock); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp.external_servers`).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return fmt.Errorf("%d servers registered: %w", n, persistence.ErrLimitReached)
		}
	}
	return insertServer(ctx, tx, v)
}

// CreateServerIdempotent is CreateServer under an idempotency key (persistence.Store). A transaction-level
// advisory lock on the key (two-int space: a class and hashtext of scope and key) queues concurrent requests with
// the same key, so the second reads the first's committed key row instead of racing it to the name's UNIQUE
// constraint. The lock on the server limit, when taken, is always taken after it.
func (s *Store) CreateServerIdempotent(ctx context.Context, srv *persistence.Server, max int, k persistence.IdempotencyKey) (replayed bool, err error) {
	defer wrap(&err, "create server %q", srv.Name)
	if err := storeutil.CheckIdempotencyKey(k); err != nil {
		return false, err
	}
	v, err := storeutil.PrepareCreate(*srv)
	if err != nil {
		return false, err
	}
	cutoff := v.RegisteredAt.Add(-k.Retention)
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2 || chr(10) || $3))`,
			idempotencyLockClass, k.Scope, k.Key); err != nil {
			return err
		}
		var fp, sid string
		err := tx.QueryRow(ctx, `SELECT fingerprint, server_id::text FROM mcp.idempotency_keys
			WHERE scope = $1 AND key = $2 AND created_at > $3`, k.Scope, k.Key, cutoff).Scan(&fp, &sid)
		switch {
		case err == nil:
			if fp != k.Fingerprint {
				return fmt.Errorf("key of server %s: %w", sid, persistence.ErrKeyReused)
			}
			got, err := scanServer(tx.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp.external_servers WHERE id = $1`, sid))
			if err != nil {
				return fmt.Errorf("server %s of the key: %w", sid, err)
			}
			v, replayed = got, true
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// This key, expired, goes before the insert below would collide with it.
		if _, err := tx.Exec(ctx, `DELETE FROM mcp.idempotency_keys WHERE scope = $1 AND key = $2`,
			k.Scope, k.Key); err != nil {
			return fmt.Errorf("forget expired idempotency key: %w", err)
		}
		if err := insertLimited(ctx, tx, v, max); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO mcp.idempotency_keys (scope, key, fingerprint, server_id, created_at)
			VALUES ($1, $2, $3, $4, $5)`, k.Scope, k.Key, k.Fingerprint, v.ID, v.RegisteredAt)
		return err
	})
	if err != nil {
		return false, err
	}
	*srv = v
	if !replayed {
		s.sweepKeys(ctx, cutoff)
	}
	return replayed, nil
}

// sweepKeys deletes a bounded batch of idempotency keys created at or before cutoff, best effort: in its own
// statement after the registration committed, skipping rows another sweep holds, so sweeps neither wait for each
// other nor make a registration fail.
func (s *Store) sweepKeys(ctx context.Context, cutoff time.Time) {
	_, _ = s.pool.Exec(ctx, `DELETE FROM mcp.idempotency_keys WHERE ctid IN (SELECT ctid FROM mcp.idempotency_keys
		WHERE created_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, storeutil.KeySweepBatch)
}

// idempotencyLockClass is the first key of the advisory locks CreateServerIdempotent takes per idempotency key.
const idempotencyLockClass int32 = 0x6d636b79

// createServerLock is the advisory lock key that serialises limited registrations.
const createServerLock = 0x6d63706167677201

// GetServer returns the server with that id; ErrNotFound also for an id that is not a UUID.
func (s *Store) GetServer(ctx context.Context, id string) (_ persistence.Server, err error) {
	defer wrap(&err, "get server %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return persistence.Server{}, err
	}
	return s.getServer(ctx, uid)
}

// getServer reads the server with that canonical id.
func (s *Store) getServer(ctx context.Context, uid string) (persistence.Server, error) {
	return scanServer(s.pool.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp.external_servers WHERE id = $1`, uid))
}

// GetServerByName returns the server with that name.
func (s *Store) GetServerByName(ctx context.Context, name string) (_ persistence.Server, err error) {
	defer wrap(&err, "get server by name %q", name)
	return scanServer(s.pool.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp.external_servers WHERE name = $1`, name))
}

// ListServers returns one page of servers in registration order and the number matching the filter.
func (s *Store) ListServers(ctx context.Context, f persistence.ListServersFilter) (out []persistence.Server, total int, err error) {
	defer wrap(&err, "list servers")
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp.external_servers WHERE ($1::text = '' OR status = $1)`,
			f.Status).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+serverColumns+` FROM mcp.external_servers
			WHERE ($1::text = '' OR status = $1) ORDER BY registered_at, id LIMIT $2 OFFSET $3`,
			f.Status, limitArg(f.Limit), offsetArg(f.Offset))
		if err != nil {
			return err
		}
		out, err = storeutil.Collect(rows, scanServer)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// UpdateServer applies p in one transaction and returns the new row. A rename renames every tool of the server
// to {new name}.{original name} in the same transaction; a taken name is ErrAlreadyExists and changes nothing.
// ClearHealthCheckURL wins over HealthCheckURL. An empty patch changes nothing, not even UpdatedAt.
func (s *Store) UpdateServer(ctx context.Context, id string, p persistence.ServerPatch) (out persistence.Server, err error) {
	defer wrap(&err, "update server %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return persistence.Server{}, err
	}
	if storeutil.EmptyPatch(p) {
		return s.getServer(ctx, uid)
	}
	var cfg any
	if p.ConnectionConfig != nil {
		cfg = []byte(p.ConnectionConfig)
	}
	credSet, credMode, credSlot, dropSecrets, err := storeutil.CredentialArgs(p)
	if err != nil {
		return persistence.Server{}, err
	}
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		ts := storeutil.Now()
		v, err := scanServer(tx.QueryRow(ctx, `UPDATE mcp.external_servers SET
				name = COALESCE($2, name),
				description = COALESCE($3, description),
				connection_config = COALESCE($4::jsonb, connection_config),
				health_check_url = CASE WHEN $5::boolean THEN NULL ELSE COALESCE($6, health_check_url) END,
				updated_at = $7,
				credential_mode = CASE WHEN $8::boolean THEN $9::text ELSE credential_mode END,
				user_credential = CASE WHEN $8::boolean THEN $10::jsonb ELSE user_credential END
			WHERE id = $1 RETURNING `+serverColumns,
			uid, p.Name, p.Description, cfg, p.ClearHealthCheckURL, p.HealthCheckURL, ts, credSet, credMode, credSlot))
		if err != nil {
			return err
		}
		if dropSecrets {
			if _, err := tx.Exec(ctx, `DELETE FROM mcp.user_credentials WHERE server_id = $1`, uid); err != nil {
				return fmt.Errorf("drop callers' credentials: %w", err)
			}
		}
		if p.Name != nil {
			if _, err := tx.Exec(ctx, `UPDATE mcp.tools SET name = $2 || '.' || original_name, updated_at = $3
				WHERE source_server_id = $1 AND name <> $2 || '.' || original_name`, uid, v.Name, ts); err != nil {
				return fmt.Errorf("rename tools: %w", err)
			}
		}
		out = v
		return nil
	})
	if err != nil {
		return persistence.Server{}, err
	}
	return out, nil
}

// execOne runs a statement that must touch exactly the row with that id; none is ErrNotFound.
func execOne(ctx context.Context, q querier, what, id string, sql string, args ...any) error {
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	return storeutil.OneRow(tag.RowsAffected(), what, id)
}

// SetAutoConnect records whether the daemon should keep the server connected.
func (s *Store) SetAutoConnect(ctx context.Context, id string, on bool) (err error) {
	defer wrap(&err, "set auto-connect of %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return err
	}
	return execOne(ctx, s.pool, "server", id,
		`UPDATE mcp.external_servers SET auto_connect = $2, updated_at = $3 WHERE id = $1`, uid, on, storeutil.Now())
}

// RecordTransition sets status = To, error_message = ErrorMessage (nil clears it), connected_at = At when To is
// CONNECTED and updated_at = At (zero At: storeutil.Now), and appends a history row (event_type To, details
// {"from","reason","error_message","details"}) in one transaction.
func (s *Store) RecordTransition(ctx context.Context, t persistence.Transition) (err error) {
	defer wrap(&err, "record transition of %q to %q", t.ServerID, t.To)
	uid, err := storeutil.ServerID(t.ServerID)
	if err != nil {
		return err
	}
	details, at, err := storeutil.PrepareTransition(t)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, uid, t.Fence); err != nil {
			return err
		}
		if err := execOne(ctx, tx, "server", t.ServerID, `UPDATE mcp.external_servers SET status = $2,
				error_message = $3, connected_at = CASE WHEN $5::boolean THEN $4 ELSE connected_at END, updated_at = $4
			WHERE id = $1`, uid, t.To, t.ErrorMessage, at, t.To == persistence.StatusConnected); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO mcp.server_connection_history (server_id, event_type, details, timestamp)
			VALUES ($1, $2, $3::jsonb, $4)`, uid, t.To, details, at)
		return err
	})
}

// RecordHealth stores a health check on the server row: last_health_check (zero CheckedAt: storeutil.Now),
// health_response_ms, consecutive_failures, and error_message = LastError (nil clears it). It leaves updated_at,
// the time of the last change to the server, alone.
func (s *Store) RecordHealth(ctx context.Context, h persistence.HealthRecord) (err error) {
	defer wrap(&err, "record health of %q", h.ServerID)
	uid, err := storeutil.ServerID(h.ServerID)
	if err != nil {
		return err
	}
	update := func(q querier) error {
		return execOne(ctx, q, "server", h.ServerID, `UPDATE mcp.external_servers SET last_health_check = $2,
			health_response_ms = $3, consecutive_failures = $4, error_message = $5 WHERE id = $1`,
			uid, storeutil.NormTime(h.CheckedAt), h.ResponseMs, h.ConsecutiveFailures, h.LastError)
	}
	if h.Fence == nil {
		return update(s.pool) // one round trip
	}
	return s.writeTx(ctx, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, uid, h.Fence); err != nil {
			return err
		}
		return update(tx)
	})
}

// DeleteServer deletes the server; ON DELETE CASCADE removes its tools and history. Audit rows stay.
func (s *Store) DeleteServer(ctx context.Context, id string) (err error) {
	defer wrap(&err, "delete server %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return err
	}
	return execOne(ctx, s.pool, "server", id, `DELETE FROM mcp.external_servers WHERE id = $1`, uid)
}

// CountServersByStatus returns the number of servers per status; every known status is present, zero or not.
func (s *Store) CountServersByStatus(ctx context.Context) (_ map[string]int, err error) {
	defer wrap(&err, "count servers by status")
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM mcp.external_servers GROUP BY status`)
	if err != nil {
		return nil, err
	}
	return storeutil.CountByStatus(rows)
}

// serverExists returns ErrNotFound when no server has that (canonical) id.
func serverExists(ctx context.Context, q querier, id, shown string) error {
	var found bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM mcp.external_servers WHERE id = $1)`, id).
		Scan(&found); err != nil {
		return err
	}
	if !found {
		return storeutil.NotFound("server", shown)
	}
	return nil
}

// ---- tools ----

const toolColumns = `id, name, original_name, description, input_schema, definition, source_server_id::text,
	is_external, is_classified, classification_state, skill_ids, primary_skill_id, definition_hash, discovered_at,
	updated_at, changed_at`

func scanTool(row storeutil.Scanner) (persistence.Tool, error) {
	var t persistence.Tool
	var schema, def []byte
	err := row.Scan(&t.ID, &t.Name, &t.OriginalName, &t.Description, &schema, &def, &t.SourceServerID,
		&t.IsExternal, &t.IsClassified, &t.ClassificationState, &t.SkillIDs, &t.PrimarySkillID, &t.DefinitionHash,
		&t.DiscoveredAt, &t.UpdatedAt, &t.ChangedAt)
	if err != nil {
		return persistence.Tool{}, err
	}
	t.InputSchema, t.Definition = schema, def
	if t.SkillIDs == nil {
		t.SkillIDs = []string{}
	}
	t.DiscoveredAt, t.UpdatedAt, t.ChangedAt = t.DiscoveredAt.UTC(), t.UpdatedAt.UTC(), storeutil.NormTimePtr(t.ChangedAt)
	return t, nil
}

// ReplaceServerTools makes the server's tools exactly defs, in one transaction that locks the server row (so a
// concurrent rename or refresh of the same server waits). Tools are named {server name}.{original name}; a tool
// that stays keeps its id, discovered_at and classification, and gets ChangedAt (and a place in Changed) only
// when its definition hash (description and canonical input schema) differs. A nil input schema or definition is
// stored as {}. The work is a handful of set-based statements whatever the number of tools.
func (s *Store) ReplaceServerTools(ctx context.Context, serverID string, defs []persistence.ToolDef, fence *persistence.Lease) (diff persistence.ToolDiff, err error) {
	defer wrap(&err, "replace tools of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.ToolDiff{}, err
	}
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		var serverName string
		if err := tx.QueryRow(ctx, `SELECT name FROM mcp.external_servers WHERE id = $1 FOR UPDATE`, uid).
			Scan(&serverName); err != nil {
			return err // no row: ErrNotFound
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, name, original_name, definition_hash FROM mcp.tools
			WHERE source_server_id = $1`, uid)
		if err != nil {
			return err
		}
		existing := make(map[string]storeutil.ExistingTool)
		var e storeutil.ExistingTool
		var original string
		if _, err := pgx.ForEachRow(rows, []any{&e.ID, &e.Name, &original, &e.Hash}, func() error {
			existing[original] = e
			return nil
		}); err != nil {
			return err
		}
		plan, err := storeutil.PlanTools(serverName, defs, existing)
		if err != nil {
			return err
		}
		ts := storeutil.Now()
		if len(plan.Remove) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM mcp.tools WHERE id = ANY($1::bigint[])`, plan.Remove); err != nil {
				return fmt.Errorf("delete tools: %w", err)
			}
		}
		if len(plan.Update) > 0 {
			c := columnsOf(plan.Update)
			if _, err := tx.Exec(ctx, `UPDATE mcp.tools AS t SET name = u.name, description = u.description,
					input_schema = u.input_schema::jsonb, definition = u.definition::jsonb, definition_hash = u.hash,
					updated_at = $1, changed_at = CASE WHEN u.changed THEN $1 ELSE t.changed_at END
				FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::boolean[])
					AS u(id, name, description, input_schema, definition, hash, changed)
				WHERE t.id = u.id`,
				ts, c.ids, c.names, c.descriptions, c.schemas, c.definitions, c.hashes, c.changed); err != nil {
				return fmt.Errorf("update tools: %w", err)
			}
		}
		if len(plan.Insert) > 0 {
			c := columnsOf(plan.Insert)
			if _, err := tx.Exec(ctx, `INSERT INTO mcp.tools (name, original_name, description, input_schema,
					definition, source_server_id, definition_hash, discovered_at, updated_at)
				SELECT u.name, u.original_name, u.description, u.input_schema::jsonb, u.definition::jsonb, $1,
					u.hash, $2, $2
				FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
					AS u(name, original_name, description, input_schema, definition, hash)`,
				uid, ts, c.names, c.originals, c.descriptions, c.schemas, c.definitions, c.hashes); err != nil {
				return fmt.Errorf("insert tools: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE mcp.external_servers SET tool_count = $2, updated_at = $3 WHERE id = $1`,
			uid, plan.Diff.Total, ts); err != nil {
			return fmt.Errorf("update tool count: %w", err)
		}
		diff = plan.Diff
		return nil
	})
	if err != nil {
		return persistence.ToolDiff{}, err
	}
	return diff, nil
}

// toolColumnsArgs holds planned tools column by column, for unnest.
type toolColumnsArgs struct {
	ids                                                          []int64
	names, originals, descriptions, schemas, definitions, hashes []string
	changed                                                      []bool
}

func columnsOf(ts []storeutil.PlannedTool) toolColumnsArgs {
	n := len(ts)
	c := toolColumnsArgs{
		ids: make([]int64, n), names: make([]string, n), originals: make([]string, n),
		descriptions: make([]string, n), schemas: make([]string, n), definitions: make([]string, n),
		hashes: make([]string, n), changed: make([]bool, n),
	}
	for i, t := range ts {
		c.ids[i], c.names[i], c.originals[i], c.descriptions[i] = t.ID, t.Name, t.OriginalName, t.Description
		c.schemas[i], c.definitions[i], c.hashes[i], c.changed[i] = string(t.InputSchema), string(t.Definition), t.Hash, t.Changed
	}
	return c
}

// ListTools returns one page of tools ordered by name, and the number matching the filter. A ServerID naming no
// server is ErrNotFound.
func (s *Store) ListTools(ctx context.Context, f persistence.ListToolsFilter) (out []persistence.Tool, total int, err error) {
	defer wrap(&err, "list tools")
	sid, err := storeutil.OptionalServerID(f.ServerID)
	if err != nil {
		return nil, 0, err
	}
	uid := nullIfEmpty(sid)
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if sid != "" {
			if err := serverExists(ctx, tx, sid, f.ServerID); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp.tools WHERE ($1::uuid IS NULL OR source_server_id = $1)`,
			uid).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+toolColumns+` FROM mcp.tools
			WHERE ($1::uuid IS NULL OR source_server_id = $1) ORDER BY name, id LIMIT $2 OFFSET $3`,
			uid, limitArg(f.Limit), offsetArg(f.Offset))
		if err != nil {
			return err
		}
		out, err = storeutil.Collect(rows, scanTool)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// GetTool returns the tool with that id.
func (s *Store) GetTool(ctx context.Context, id int64) (_ persistence.Tool, err error) {
	defer wrap(&err, "get tool %d", id)
	return scanTool(s.pool.QueryRow(ctx, `SELECT `+toolColumns+` FROM mcp.tools WHERE id = $1`, id))
}

// CountTools counts the tools of a server (all servers when serverID is empty); Unclassified is every tool that
// is not CLASSIFIED. An unknown server is ErrNotFound.
func (s *Store) CountTools(ctx context.Context, serverID string) (c persistence.ToolCounts, err error) {
	defer wrap(&err, "count tools")
	sid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return persistence.ToolCounts{}, err
	}
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		if sid != "" {
			if err := serverExists(ctx, tx, sid, serverID); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE is_classified) FROM mcp.tools
			WHERE ($1::uuid IS NULL OR source_server_id = $1)`, nullIfEmpty(sid)).Scan(&c.Total, &c.Classified)
	})
	if err != nil {
		return persistence.ToolCounts{}, err
	}
	c.Unclassified = c.Total - c.Classified
	return c, nil
}

// SetToolClassification stores the tool's classification; is_classified is State == CLASSIFIED.
func (s *Store) SetToolClassification(ctx context.Context, id int64, c persistence.ToolClassification) (err error) {
	defer wrap(&err, "classify tool %d", id)
	c, err = storeutil.PrepareClassification(c)
	if err != nil {
		return err
	}
	return execOne(ctx, s.pool, "tool", fmt.Sprint(id), `UPDATE mcp.tools SET classification_state = $2,
			is_classified = $3, skill_ids = $4, primary_skill_id = $5, updated_at = $6 WHERE id = $1`,
		id, c.State, c.State == persistence.ClassificationClassified, c.SkillIDs, c.PrimarySkillID, storeutil.Now())
}
