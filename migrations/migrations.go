// Package migrations versions the aggregator's database schema. Both stores (persistence/postgres and
// persistence/sqlite) call Apply when they open, so a fresh database becomes usable and an existing one is brought
// up to date exactly once, even when several daemons start against the same database at the same time. The SQL
// files are embedded, so the single binary carries its own schema and nothing has to be installed next to it.
//
// Files are named NNNN_description.sql under one directory per dialect; the number is the version. Once released,
// a file is never edited: a schema change is a new file with the next version, written for both dialects.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a database engine; it selects the directory of SQL files and the bookkeeping statements.
type Dialect string

// The supported dialects.
const (
	// Postgres keeps the schema in schema mcp and the applied versions in mcp.schema_migrations. Every migration
	// transaction takes a transaction-level advisory lock, so concurrent migrators queue instead of racing.
	Postgres Dialect = "postgres"
	// SQLite keeps the applied versions in schema_migrations. Concurrent migrators are serialised by SQLite's
	// write lock, which the caller's connection must take at BEGIN (modernc DSN parameter _txlock=immediate);
	// otherwise a migrator could read the applied versions and then fail to upgrade its lock.
	SQLite Dialect = "sqlite"
)

// AdvisoryLockKey is the PostgreSQL advisory lock key ("mcpgw-mi") every Postgres migration transaction holds.
const AdvisoryLockKey int64 = 0x6d63706777_2d6d69

// Migration is one versioned SQL file.
type Migration struct {
	Version int
	// Name is the file name, kept in the migrations table for people reading it.
	Name string
	SQL  string
}

// statements are the dialect-specific bookkeeping statements of the runner.
type statements struct {
	bootstrap string // creates the migrations table
	lock      string // taken first in every transaction; empty when the dialect needs none
	applied   string // lists applied versions
	isApplied string // one parameter: version
	record    string // two parameters: version, name
}

func (d Dialect) statements() (statements, error) {
	switch d {
	case Postgres:
		return statements{
			bootstrap: `CREATE SCHEMA IF NOT EXISTS mcp;
CREATE TABLE IF NOT EXISTS mcp.schema_migrations (
    version    INTEGER     PRIMARY KEY,
    name       TEXT        NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
			lock:      `SELECT pg_advisory_xact_lock(` + strconv.FormatInt(AdvisoryLockKey, 10) + `)`,
			applied:   `SELECT version FROM mcp.schema_migrations`,
			isApplied: `SELECT EXISTS (SELECT 1 FROM mcp.schema_migrations WHERE version = $1)`,
			record:    `INSERT INTO mcp.schema_migrations (version, name) VALUES ($1, $2)`,
		}, nil
	case SQLite:
		return statements{
			bootstrap: `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
) STRICT`,
			applied:   `SELECT version FROM schema_migrations`,
			isApplied: `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)`,
			record:    `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`,
		}, nil
	default:
		return statements{}, fmt.Errorf("migrations: unknown dialect %q", d)
	}
}

// Load returns the dialect's migrations in ascending version order. It fails on a file whose name does not start
// with a version number and on two files with the same version.
func Load(d Dialect) ([]Migration, error) {
	if _, err := d.statements(); err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(files, string(d))
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", d, err)
	}
	var out []Migration
	seen := make(map[int]string)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := ParseVersion(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", d, err)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations: %s: version %d used by %s and %s", d, v, prev, e.Name())
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(files, path.Join(string(d), e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s/%s: %w", d, e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// ParseVersion reads the version of a migration file name "NNNN_description.sql". Versions start at 1.
func ParseVersion(name string) (int, error) {
	digits, _, ok := strings.Cut(name, "_")
	if !ok || !strings.HasSuffix(name, ".sql") {
		return 0, fmt.Errorf("file name %q is not NNNN_description.sql", name)
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < 1 || strings.HasPrefix(digits, "+") || strings.HasPrefix(digits, "-") {
		return 0, fmt.Errorf("file name %q does not start with a version number >= 1", name)
	}
	return v, nil
}

// Apply brings db up to date with the dialect's migrations and returns the versions it applied (none when the
// database was already current). Each migration runs in its own transaction together with the row that records
// it, so a failed migration leaves nothing behind and is retried on the next Apply. Whether a version is applied
// is re-read inside the locked transaction, which is what makes concurrent Applies on one database safe.
func Apply(ctx context.Context, db *sql.DB, d Dialect) ([]int, error) {
	st, err := d.statements()
	if err != nil {
		return nil, err
	}
	all, err := Load(d)
	if err != nil {
		return nil, err
	}
	if err := inTx(ctx, db, st.lock, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, st.bootstrap)
		return err
	}); err != nil {
		return nil, fmt.Errorf("migrations: create migrations table: %w", err)
	}

	done, err := appliedVersions(ctx, db, st.applied)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		if done[m.Version] {
			continue
		}
		ran := false
		err := inTx(ctx, db, st.lock, func(tx *sql.Tx) error {
			var already bool
			if err := tx.QueryRowContext(ctx, st.isApplied, m.Version).Scan(&already); err != nil {
				return fmt.Errorf("check version: %w", err)
			}
			if already { // another migrator applied it since appliedVersions read the table
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, st.record, m.Version, m.Name); err != nil {
				return fmt.Errorf("record version: %w", err)
			}
			ran = true
			return nil
		})
		if err != nil {
			return applied, fmt.Errorf("migrations: apply %s/%s: %w", d, m.Name, err)
		}
		if ran {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, db *sql.DB, query string) (map[int]bool, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("migrations: read applied versions: %w", err)
	}
	defer rows.Close()
	done := make(map[int]bool)
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("migrations: read applied versions: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read applied versions: %w", err)
	}
	return done, nil
}

// inTx runs fn in a transaction that first takes lock (when not empty), committing when fn succeeds.
func inTx(ctx context.Context, db *sql.DB, lock string, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
