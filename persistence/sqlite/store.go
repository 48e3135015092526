// Package sqlite is the zero-install persistence.Store: one SQLite file through the pure-Go modernc.org/sqlite
// driver (no cgo), so the daemon runs with nothing installed. Open creates and migrates the file.
//
// Concurrency: SQLite has one writer at a time. The store funnels every write through a single connection
// (BEGIN IMMEDIATE), so writers of this process queue in Go instead of failing with SQLITE_BUSY, and reads use a
// separate pool of read-only connections that WAL lets run beside the writer. busy_timeout covers the rare waits
// left (a checkpoint, another process on the same file).
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mcpgw/aggregator/migrations"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// readConns is the size of the read pool; reads are short, and the machine running the embedded store is small.
const readConns = 4

// busyTimeout is how long a connection waits for a lock held by another connection before SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// timeLayout is how timestamps are stored: UTC with a fixed microsecond width, so text order is time order.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// Store implements persistence.Store on a SQLite file. It is safe for concurrent use.
type Store struct {
	w *sql.DB // the single write connection
	r *sql.DB // read-only connections
	sqlstore.Curation
	sqlstore.Features
	sqlstore.Log
	sqlstore.Credentials
	sqlstore.Tasks
	sqlstore.OAuth
}

var _ persistence.Store = (*Store)(nil)

// Open opens the SQLite database at path, creating it (mode 0600) and its parent directory (mode 0700) when
// missing, applies the pending migrations and returns the store. Every connection runs in WAL mode with
// foreign keys on and a busy timeout; synchronous=NORMAL means a commit survives a crash of the process but the
// last commits may be lost on power failure, never corrupting the file. ":memory:" and "file:" URIs are not
// supported.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.Contains(path, "?") {
		return nil, fmt.Errorf("sqlite: open %q: need a plain file path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: create directory of %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // SQLite gives -wal and -shm the same mode
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	w, err := openDB(ctx, path, false)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, w, migrations.SQLite); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	r, err := openDB(ctx, path, true)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	s := &Store{w: w, r: r}
	d := s.dialect()
	s.Curation, s.Features, s.Log = sqlstore.NewCuration(d), sqlstore.NewFeatures(d), sqlstore.NewLog(d)
	s.Credentials = sqlstore.NewCredentials(d)
	s.Tasks = sqlstore.NewTasks(d, taskQueries())
	s.OAuth = sqlstore.NewOAuth(d, oauthQueries())
	return s, nil
}

func openDB(ctx context.Context, path string, readOnly bool) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := 1
	if readOnly {
		n = readConns
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if !readOnly {
		if err := enableWAL(ctx, db); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
	}
	return db, nil
}

// enableWAL switches the file to WAL mode (a persistent property of the file, so the read pool, opened after,
// finds it set). Switching needs an exclusive lock, and SQLite takes it without calling the busy handler: when
// several processes open one fresh file at once, all but one get SQLITE_BUSY at once. Those retry here, bounded
// by busyTimeout and ctx, until the winner's switch is done and theirs becomes a no-op.
func enableWAL(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	wait := 5 * time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return fmt.Errorf("journal_mode is %q after asking for WAL", mode)
			}
			return nil
		}
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return fmt.Errorf("enable WAL: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enable WAL: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Ping checks both pools answer.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer wrap(&err, "ping")
	if err := s.w.PingContext(ctx); err != nil {
		return err
	}
	return s.r.PingContext(ctx)
}

// Close closes both pools.
func (s *Store) Close() {
	_ = s.r.Close()
	_ = s.w.Close()
}

// Kind is "sqlite".
func (s *Store) Kind() string { return "sqlite" }

// mapErr turns driver errors into the persistence sentinels, keeping the driver error in the chain.
func mapErr(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", persistence.ErrAlreadyExists, err)
		}
		if unavailableCode(se.Code()) {
			return fmt.Errorf("%w: %w", persistence.ErrUnavailable, err)
		}
	}
	if errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w: %w", persistence.ErrUnavailable, err)
	}
	return err
}

// wrap gives the error a Store method returns, if any, its context once: the driver's error mapped to the
// persistence sentinels, behind "sqlite: " and what the method was doing. Each method defers it first thing.
func wrap(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = mapErr(*errp)
	}
	storeutil.Wrapf(errp, "sqlite: "+format, args...)
}

// unavailableCode reports whether an SQLite result code (primary or extended) means the file could not be used
// right now: busy or locked past busy_timeout, an I/O error, a full disk, or a file that cannot be opened. The
// request may succeed later; it is not the caller's mistake.
func unavailableCode(code int) bool {
	switch code & 0xff { // the primary code of an extended one
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN:
		return true
	}
	return false
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// writeTx runs fn in a transaction on the write connection, committing when fn succeeds.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTx(ctx, s.w, nil, fn)
}

// readTx runs fn in a read transaction, so a page and its total come from one snapshot.
func (s *Store) readTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTx(ctx, s.r, &sql.TxOptions{ReadOnly: true}, fn)
}

func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return errors.Join(err, rerr)
		}
		return err
	}
	return tx.Commit()
}

// limitArg is the LIMIT parameter: -1 (no limit) for limit <= 0.
func limitArg(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}

func offsetArg(offset int) int { return max(offset, 0) }

// ---- value conversion ----

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func fmtTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func nullString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

func nullFloat(f sql.NullFloat64) *float64 {
	if !f.Valid {
		return nil
	}
	return &f.Float64
}

// jsonArg binds JSON as text (a []byte would be a BLOB, which the STRICT TEXT columns refuse); nil is NULL.
func jsonArg(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

func nullJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// ---- servers ----

const serverColumns = `id, name, description, transport_type, connection_config, health_check_url, auto_connect,
	status, error_message, tool_count, last_health_check, health_response_ms, consecutive_failures, registered_at,
	connected_at, updated_at, tool_filter, tool_pinning, pin_new_tools, pins_baseline_at, credential_mode,
	user_credential`

func scanServer(row storeutil.Scanner) (persistence.Server, error) {
	var v persistence.Server
	var desc, health, errMsg, lastHealth, connectedAt, filter, baselineAt, slot sql.NullString
	var cfg, registeredAt, updatedAt string
	var responseMs sql.NullFloat64
	if err := row.Scan(&v.ID, &v.Name, &desc, &v.TransportType, &cfg, &health, &v.AutoConnect, &v.Status, &errMsg,
		&v.ToolCount, &lastHealth, &responseMs, &v.ConsecutiveFailures, &registeredAt, &connectedAt,
		&updatedAt, &filter, &v.Policy.Pinning, &v.Policy.PinNewTools, &baselineAt, &v.CredentialMode, &slot); err != nil {
		return persistence.Server{}, err
	}
	v.Description, v.HealthCheckURL, v.ErrorMessage = nullString(desc), nullString(health), nullString(errMsg)
	v.ConnectionConfig = json.RawMessage(cfg)
	v.HealthResponseMs = nullFloat(responseMs)
	var err error
	if v.RegisteredAt, err = parseTime(registeredAt); err != nil {
		return persistence.Server{}, err
	}
	if v.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return persistence.Server{}, err
	}
	if v.LastHealthCheck, err = parseNullTime(lastHealth); err != nil {
		return persistence.Server{}, err
	}
	if v.ConnectedAt, err = parseNullTime(connectedAt); err != nil {
		return persistence.Server{}, err
	}
	if v.Policy.Filter, err = storeutil.ParseFilter(nullJSON(filter)); err != nil {
		return persistence.Server{}, err
	}
	if v.Policy.PinsBaselineAt, err = parseNullTime(baselineAt); err != nil {
		return persistence.Server{}, err
	}
	if v.UserCredential, err = storeutil.ParseUserCredential(nullJSON(slot)); err != nil {
		return persistence.Server{}, err
	}
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
	// The write transaction takes SQLite's write lock at BEGIN, so count-then-insert is one decision for every
	// process on the file.
	err = s.writeTx(ctx, func(tx *sql.Tx) error { return insertLimited(ctx, tx, v, max) })
	if err != nil {
		return err
	}
	*srv = v
	return nil
}

// insertLimited inserts the prepared row v in tx unless max servers are registered (ErrLimitReached); max <= 0 is
// no limit.
func insertLimited(ctx context.Context, tx *sql.Tx, v persistence.Server, max int) error {
	if max > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM external_servers`).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return fmt.Errorf("%d servers registered: %w", n, persistence.ErrLimitReached)
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO external_servers (id, name, description, transport_type,
		connection_config, health_check_url, auto_connect, status, error_message, tool_count, last_health_check,
		health_response_ms, consecutive_failures, registered_at, connected_at, updated_at, tool_filter, tool_pinning,
		pin_new_tools, pins_baseline_at, credential_mode, user_credential)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		v.ID, v.Name, v.Description, v.TransportType, jsonArg(v.ConnectionConfig), v.HealthCheckURL,
		v.AutoConnect, v.Status, v.ErrorMessage, v.ToolCount, fmtTimePtr(v.LastHealthCheck), v.HealthResponseMs,
		v.ConsecutiveFailures, fmtTime(v.RegisteredAt), fmtTimePtr(v.ConnectedAt), fmtTime(v.UpdatedAt),
		jsonArg(storeutil.FilterJSON(v.Policy.Filter)), v.Policy.Pinning, v.Policy.PinNewTools,
		fmtTimePtr(v.Policy.PinsBaselineAt), v.CredentialMode, jsonArg(storeutil.UserCredentialJSON(v.UserCredential)))
	return err
}

// CreateServerIdempotent is CreateServer under an idempotency key (persistence.Store). The write transaction holds
// SQLite's write lock from BEGIN, so reading the key and inserting the server and the key is one decision for
// every writer on the file; the lazy sweep of expired keys runs in it too.
func (s *Store) CreateServerIdempotent(ctx context.Context, srv *persistence.Server, max int, k persistence.IdempotencyKey) (replayed bool, err error) {
	defer wrap(&err, "create server %q", srv.Name)
	if err := storeutil.CheckIdempotencyKey(k); err != nil {
		return false, err
	}
	v, err := storeutil.PrepareCreate(*srv)
	if err != nil {
		return false, err
	}
	cutoff := fmtTime(v.RegisteredAt.Add(-k.Retention))
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var fp, sid string
		err := tx.QueryRowContext(ctx, `SELECT fingerprint, server_id FROM idempotency_keys
			WHERE scope = ? AND key = ? AND created_at > ?`, k.Scope, k.Key, cutoff).Scan(&fp, &sid)
		switch {
		case err == nil:
			if fp != k.Fingerprint {
				return fmt.Errorf("key of server %s: %w", sid, persistence.ErrKeyReused)
			}
			got, err := scanServer(tx.QueryRowContext(ctx, `SELECT `+serverColumns+` FROM external_servers WHERE id = ?`, sid))
			if err != nil {
				return fmt.Errorf("server %s of the key: %w", sid, err)
			}
			v, replayed = got, true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// This key, expired, and a bounded batch of other expired keys.
		if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE (scope = ? AND key = ?)
			OR rowid IN (SELECT rowid FROM idempotency_keys WHERE created_at <= ? LIMIT ?)`,
			k.Scope, k.Key, cutoff, storeutil.KeySweepBatch); err != nil {
			return fmt.Errorf("sweep expired idempotency keys: %w", err)
		}
		if err := insertLimited(ctx, tx, v, max); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO idempotency_keys (scope, key, fingerprint, server_id, created_at)
			VALUES (?, ?, ?, ?, ?)`, k.Scope, k.Key, k.Fingerprint, v.ID, fmtTime(v.RegisteredAt))
		return err
	})
	if err != nil {
		return false, err
	}
	*srv = v
	return replayed, nil
}

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
	return scanServer(s.r.QueryRowContext(ctx, `SELECT `+serverColumns+` FROM external_servers WHERE id = ?`, uid))
}

// GetServerByName returns the server with that name.
func (s *Store) GetServerByName(ctx context.Context, name string) (_ persistence.Server, err error) {
	defer wrap(&err, "get server by name %q", name)
	return scanServer(s.r.QueryRowContext(ctx, `SELECT `+serverColumns+` FROM external_servers WHERE name = ?`, name))
}

// ListServers returns one page of servers in registration order and the number matching the filter.
func (s *Store) ListServers(ctx context.Context, f persistence.ListServersFilter) (out []persistence.Server, total int, err error) {
	defer wrap(&err, "list servers")
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM external_servers WHERE (?1 = '' OR status = ?1)`,
			f.Status).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+serverColumns+` FROM external_servers
			WHERE (?1 = '' OR status = ?1) ORDER BY registered_at, id LIMIT ?2 OFFSET ?3`,
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
	credSet, credMode, credSlot, dropSecrets, err := storeutil.CredentialArgs(p)
	if err != nil {
		return persistence.Server{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		ts := fmtTime(storeutil.Now())
		v, err := scanServer(tx.QueryRowContext(ctx, `UPDATE external_servers SET
				name = COALESCE(?2, name),
				description = COALESCE(?3, description),
				connection_config = COALESCE(?4, connection_config),
				health_check_url = CASE WHEN ?5 THEN NULL ELSE COALESCE(?6, health_check_url) END,
				updated_at = ?7,
				credential_mode = CASE WHEN ?8 THEN ?9 ELSE credential_mode END,
				user_credential = CASE WHEN ?8 THEN ?10 ELSE user_credential END
			WHERE id = ?1 RETURNING `+serverColumns,
			uid, p.Name, p.Description, jsonArg(p.ConnectionConfig), p.ClearHealthCheckURL, p.HealthCheckURL, ts,
			credSet, credMode, jsonArg(credSlot)))
		if err != nil {
			return err
		}
		if dropSecrets {
			if _, err := tx.ExecContext(ctx, `DELETE FROM user_credentials WHERE server_id = ?1`, uid); err != nil {
				return fmt.Errorf("drop callers' credentials: %w", err)
			}
		}
		if p.Name != nil {
			if _, err := tx.ExecContext(ctx, `UPDATE tools SET name = ?2 || '.' || original_name, updated_at = ?3
				WHERE source_server_id = ?1 AND name <> ?2 || '.' || original_name`, uid, v.Name, ts); err != nil {
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
func execOne(ctx context.Context, q querier, what, id string, query string, args ...any) error {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	return storeutil.OneRow(n, what, id)
}

// SetAutoConnect records whether the daemon should keep the server connected.
func (s *Store) SetAutoConnect(ctx context.Context, id string, on bool) (err error) {
	defer wrap(&err, "set auto-connect of %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return err
	}
	return execOne(ctx, s.w, "server", id, `UPDATE external_servers SET auto_connect = ?, updated_at = ? WHERE id = ?`,
		on, fmtTime(storeutil.Now()), uid)
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
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := checkFence(ctx, tx, uid, t.Fence); err != nil {
			return err
		}
		if err := execOne(ctx, tx, "server", t.ServerID, `UPDATE external_servers SET status = ?2, error_message = ?3,
				connected_at = CASE WHEN ?5 THEN ?4 ELSE connected_at END, updated_at = ?4
			WHERE id = ?1`, uid, t.To, t.ErrorMessage, fmtTime(at), t.To == persistence.StatusConnected); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO server_connection_history (server_id, event_type, details, timestamp)
			VALUES (?, ?, ?, ?)`, uid, t.To, string(details), fmtTime(at))
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
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := checkFence(ctx, tx, uid, h.Fence); err != nil {
			return err
		}
		return execOne(ctx, tx, "server", h.ServerID, `UPDATE external_servers SET last_health_check = ?,
			health_response_ms = ?, consecutive_failures = ?, error_message = ? WHERE id = ?`,
			fmtTime(storeutil.NormTime(h.CheckedAt)), h.ResponseMs, h.ConsecutiveFailures, h.LastError, uid)
	})
}

// DeleteServer deletes the server; ON DELETE CASCADE removes its tools and history. Audit rows stay.
func (s *Store) DeleteServer(ctx context.Context, id string) (err error) {
	defer wrap(&err, "delete server %q", id)
	uid, err := storeutil.ServerID(id)
	if err != nil {
		return err
	}
	return execOne(ctx, s.w, "server", id, `DELETE FROM external_servers WHERE id = ?`, uid)
}

// CountServersByStatus returns the number of servers per status; every known status is present, zero or not.
func (s *Store) CountServersByStatus(ctx context.Context) (_ map[string]int, err error) {
	defer wrap(&err, "count servers by status")
	rows, err := s.r.QueryContext(ctx, `SELECT status, count(*) FROM external_servers GROUP BY status`)
	if err != nil {
		return nil, err
	}
	return storeutil.CountByStatus(rows)
}

// serverExists returns ErrNotFound when no server has that (canonical) id.
func serverExists(ctx context.Context, q querier, id, shown string) error {
	var found bool
	if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM external_servers WHERE id = ?)`, id).
		Scan(&found); err != nil {
		return err
	}
	if !found {
		return storeutil.NotFound("server", shown)
	}
	return nil
}

// ---- tools ----

const toolColumns = `id, name, original_name, description, input_schema, definition, source_server_id, is_external,
	is_classified, classification_state, skill_ids, primary_skill_id, definition_hash, discovered_at, updated_at,
	changed_at`

func scanTool(row storeutil.Scanner) (persistence.Tool, error) {
	var t persistence.Tool
	var schema, def, skills, discoveredAt, updatedAt string
	var primary, changedAt sql.NullString
	if err := row.Scan(&t.ID, &t.Name, &t.OriginalName, &t.Description, &schema, &def, &t.SourceServerID,
		&t.IsExternal, &t.IsClassified, &t.ClassificationState, &skills, &primary, &t.DefinitionHash,
		&discoveredAt, &updatedAt, &changedAt); err != nil {
		return persistence.Tool{}, err
	}
	t.InputSchema, t.Definition, t.PrimarySkillID = json.RawMessage(schema), json.RawMessage(def), nullString(primary)
	if err := json.Unmarshal([]byte(skills), &t.SkillIDs); err != nil {
		return persistence.Tool{}, fmt.Errorf("stored skill ids %q: %w", skills, err)
	}
	if t.SkillIDs == nil {
		t.SkillIDs = []string{}
	}
	var err error
	if t.DiscoveredAt, err = parseTime(discoveredAt); err != nil {
		return persistence.Tool{}, err
	}
	if t.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return persistence.Tool{}, err
	}
	if t.ChangedAt, err = parseNullTime(changedAt); err != nil {
		return persistence.Tool{}, err
	}
	return t, nil
}

// ReplaceServerTools makes the server's tools exactly defs, in one write transaction. Tools are named
// {server name}.{original name}; a tool that stays keeps its id, discovered_at and classification, and gets
// ChangedAt (and a place in Changed) only when its definition hash (description and canonical input schema)
// differs. A nil input schema or definition is stored as {}.
func (s *Store) ReplaceServerTools(ctx context.Context, serverID string, defs []persistence.ToolDef, fence *persistence.Lease) (diff persistence.ToolDiff, err error) {
	defer wrap(&err, "replace tools of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return persistence.ToolDiff{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var serverName string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM external_servers WHERE id = ?`, uid).
			Scan(&serverName); err != nil {
			return err // no row: ErrNotFound
		}
		if err := checkFence(ctx, tx, uid, fence); err != nil {
			return err
		}
		existing, err := existingTools(ctx, tx, uid)
		if err != nil {
			return err
		}
		plan, err := storeutil.PlanTools(serverName, defs, existing)
		if err != nil {
			return err
		}
		ts := fmtTime(storeutil.Now())
		if len(plan.Remove) > 0 {
			ids, err := json.Marshal(plan.Remove)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM tools WHERE id IN (SELECT value FROM json_each(?))`,
				string(ids)); err != nil {
				return fmt.Errorf("delete tools: %w", err)
			}
		}
		if err := eachPrepared(ctx, tx, `UPDATE tools SET name = ?2, description = ?3, input_schema = ?4,
				definition = ?5, definition_hash = ?6, updated_at = ?7,
				changed_at = CASE WHEN ?8 THEN ?7 ELSE changed_at END
			WHERE id = ?1`, len(plan.Update), func(i int) []any {
			t := plan.Update[i]
			return []any{t.ID, t.Name, t.Description, string(t.InputSchema), string(t.Definition), t.Hash, ts, t.Changed}
		}); err != nil {
			return fmt.Errorf("update tools: %w", err)
		}
		if err := bulkExec(ctx, tx, `INSERT INTO tools (name, original_name, description, input_schema, definition,
				source_server_id, definition_hash, discovered_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			len(plan.Insert), func(i int) []any {
				t := plan.Insert[i]
				return []any{t.Name, t.OriginalName, t.Description, string(t.InputSchema), string(t.Definition), uid,
					t.Hash, ts, ts}
			}); err != nil {
			return fmt.Errorf("insert tools: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE external_servers SET tool_count = ?, updated_at = ? WHERE id = ?`,
			plan.Diff.Total, ts, uid); err != nil {
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

func existingTools(ctx context.Context, tx *sql.Tx, serverID string) (map[string]storeutil.ExistingTool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, name, original_name, definition_hash, description, input_schema,
		definition FROM tools WHERE source_server_id = ?`, serverID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	existing := make(map[string]storeutil.ExistingTool)
	var description string
	var schema, definition sql.RawBytes
	for rows.Next() {
		var e storeutil.ExistingTool
		var original string
		if err := rows.Scan(&e.ID, &e.Name, &original, &e.Hash, &description, &schema, &definition); err != nil {
			return nil, err
		}
		// SQLite keeps the text it was given, so these bytes are what the last discovery wrote.
		e.Row = storeutil.RowFingerprint(e.Name, description, schema, definition)
		existing[original] = e
	}
	return existing, rows.Err()
}

// eachPrepared prepares query once and executes it n times with args(i).
func eachPrepared(ctx context.Context, tx *sql.Tx, query string, n int, args func(i int) []any) error {
	if n == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, args(i)...); err != nil {
			return err
		}
	}
	return nil
}

// ListTools returns one page of tools ordered by name, and the number matching the filter. A ServerID naming no
// server is ErrNotFound.
func (s *Store) ListTools(ctx context.Context, f persistence.ListToolsFilter) (out []persistence.Tool, total int, err error) {
	defer wrap(&err, "list tools")
	uid, err := storeutil.OptionalServerID(f.ServerID)
	if err != nil {
		return nil, 0, err
	}
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if uid != "" {
			if err := serverExists(ctx, tx, uid, f.ServerID); err != nil {
				return err
			}
		}
		// One server's tools through the index on (source_server_id, original_name): a condition that also
		// matches every server ("?1 = '' OR ...") made each server's load a scan of the whole table.
		where := `WHERE ?1 = ''`
		if uid != "" {
			where = `WHERE source_server_id = ?1`
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tools `+where, uid).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+toolColumns+` FROM tools `+where+`
			ORDER BY name, id LIMIT ?2 OFFSET ?3`,
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
	return scanTool(s.r.QueryRowContext(ctx, `SELECT `+toolColumns+` FROM tools WHERE id = ?`, id))
}

// CountTools counts the tools of a server (all servers when serverID is empty); Unclassified is every tool that
// is not CLASSIFIED. An unknown server is ErrNotFound.
func (s *Store) CountTools(ctx context.Context, serverID string) (c persistence.ToolCounts, err error) {
	defer wrap(&err, "count tools")
	uid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return persistence.ToolCounts{}, err
	}
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if uid != "" {
			if err := serverExists(ctx, tx, uid, serverID); err != nil {
				return err
			}
		}
		where := `WHERE ?1 = ''` // one server's through its index, as in ListTools
		if uid != "" {
			where = `WHERE source_server_id = ?1`
		}
		return tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(is_classified), 0) FROM tools `+where, uid).
			Scan(&c.Total, &c.Classified)
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
	skillsJSON, err := json.Marshal(c.SkillIDs)
	if err != nil {
		return err
	}
	return execOne(ctx, s.w, "tool", fmt.Sprint(id), `UPDATE tools SET classification_state = ?, is_classified = ?,
			skill_ids = ?, primary_skill_id = ?, updated_at = ? WHERE id = ?`,
		c.State, c.State == persistence.ClassificationClassified, string(skillsJSON), c.PrimarySkillID,
		fmtTime(storeutil.Now()), id)
}
