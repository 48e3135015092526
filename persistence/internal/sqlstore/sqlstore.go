// Package sqlstore writes once the store features whose logic both SQL stores share (tool curation, the servers'
// prompts and resources, the audit log and the connection history): the order of the reads and writes, the checks, the transactions' shape and
// the scanning. Each dialect (persistence/postgres, persistence/sqlite) gives only a Dialect: its SQL, how it binds
// a time and a JSON document, how it runs a transaction and a bulk write, and how it maps its driver's errors; its
// Store embeds the feature types built over that Dialect.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Row is one result row (pgx.Row, *sql.Row). No row is an error wrapping database/sql's ErrNoRows (pgx's
// ErrNoRows wraps it too).
type Row interface {
	Scan(dest ...any) error
}

// Rows is a result set; Close may be called more than once.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Tx is a dialect's transaction as the features use it.
type Tx interface {
	// Exec runs a statement and returns the number of rows it touched.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Dialect is what one SQL store gives the shared features. Every field must be set.
type Dialect struct {
	// Name prefixes every error ("postgres", "sqlite").
	Name string
	// MapErr turns the driver's errors into the persistence sentinels (ErrNotFound for no row, ErrAlreadyExists,
	// ErrUnavailable), keeping the driver's error in the chain.
	MapErr func(error) error
	// ReadTx runs fn in a read-only transaction (one snapshot); WriteTx in a transaction that commits when fn
	// succeeds.
	ReadTx, WriteTx func(ctx context.Context, fn func(Tx) error) error
	// Writer runs a write that is one statement, outside a transaction.
	Writer Tx
	// NoLimit is the LIMIT parameter that means no limit.
	NoLimit any
	// Time binds a time; JSON binds a JSON document (nil is NULL).
	Time func(time.Time) any
	JSON func([]byte) any
	// Bulk runs query once per row i < n with the arguments row(i) returns, as the dialect does it best (one
	// statement over arrays, or one prepared statement executed n times); n == 0 runs nothing.
	Bulk func(ctx context.Context, tx Tx, query string, n int, row func(i int) []any) error
	// CheckFence refuses, inside tx, a write fenced by a lease that is no longer current (ErrLeaseLost); a nil
	// fence passes.
	CheckFence func(ctx context.Context, tx Tx, uid string, fence *persistence.Lease) error
	// ScanServer scans a row of Q.ServerColumns.
	ScanServer func(Row) (persistence.Server, error)
	// Q is the dialect's SQL.
	Q Queries
}

// Queries is a dialect's SQL for the shared features. The comment of each says its parameters, in order; a
// parameter shown as "id or NULL" is a server id, NULL for every server.
type Queries struct {
	// ServerColumns are the columns ScanServer reads.
	ServerColumns string
	// GetServer (id) selects ServerColumns.
	GetServer string
	// ServerExists (id) selects whether the server exists (a boolean).
	ServerExists string
	// LockServer (id) selects tool_pinning and pins_version, locking the server row until the transaction ends
	// where the dialect locks rows.
	LockServer string

	// UpdatePolicy (id, set filter, filter, pinning or NULL, pin_new_tools or NULL, pinning turns on, pinning
	// turns off, now) updates the policy columns and returns ServerColumns.
	UpdatePolicy string
	// DeletePins (id); ClearPending (id) drops every pending change of the server's pins.
	DeletePins, ClearPending string
	// PinsVersion (id) selects pins_version.
	PinsVersion string
	// ListPins (id) selects PinColumns ordered by original name, byte by byte.
	ListPins string
	// GetPin (id, original name) selects PinColumns.
	GetPin string
	// UpsertPin (id, original name, approved hash, approved definition, approved at, pending hash, pending
	// definition, pending since, rejected hash) is run through Bulk.
	UpsertPin string
	// DeletePinsExcept (id, JSON array of original names) deletes the server's other pins.
	DeletePinsExcept string
	// SavedPins (id, now) bumps pins_version and records the baseline time of a pinned server without one.
	SavedPins string
	// ResolvePin (id, original name, approved hash, approved definition, approved at, rejected hash) clears the
	// pending change.
	ResolvePin string
	// BumpPins (id) bumps pins_version.
	BumpPins string

	// ListOverrides (id or NULL) selects OverrideColumns ordered by server and original name, byte by byte.
	ListOverrides string
	// UpsertOverride (id, original name, exposed name, description, annotations, now) returns OverrideColumns.
	UpsertOverride string
	// DeleteOverride (id, original name).
	DeleteOverride string

	// ListProfiles selects ProfileColumns ordered by name, byte by byte; GetProfile (name) one of them.
	ListProfiles, GetProfile string
	// InsertProfile (name, description, selectors, clients, bindings, now) returns ProfileColumns, or no row when the name
	// is taken; UpdateProfile (same parameters) returns ProfileColumns.
	InsertProfile, UpdateProfile string
	// DeleteProfile (name).
	DeleteProfile string

	// DeleteFeatures (id).
	DeleteFeatures string
	// InsertFeature (id, kind, key, position, definition, now) is run through Bulk.
	InsertFeature string
	// ListFeatures (id or NULL) selects server id, kind, key, position, definition and updated_at ordered by
	// server, kind and position.
	ListFeatures string

	// InsertAudit (event, server id or NULL, server name, actor, ip address, details, timestamp).
	InsertAudit string
	// CountAudit counts the audit records; ListAudit (limit, offset) selects id, event, server id, server name,
	// actor, ip address, details and timestamp, newest first (by timestamp, then id).
	CountAudit, ListAudit string
	// SecretExists (id, subject) selects whether the subject has a secret on the server (a boolean).
	SecretExists string
	// UpsertSecret (id, subject, secret, now) creates or replaces the secret (created_at kept on replace).
	UpsertSecret string
	// GetSecret (id, subject) selects server id, subject, secret, created_at and updated_at.
	GetSecret string
	// ListSecrets (id or NULL) selects server id, subject, created_at and updated_at ordered by server and
	// subject, byte by byte.
	ListSecrets string
	// DeleteSecret (id, subject).
	DeleteSecret string

	// ListHistory (id, limit) selects the server's history rows (id, server id, event type, details, timestamp),
	// newest first.
	ListHistory string
}

// wrap gives the error a method returns, if any, its context once: the driver's error mapped to the persistence
// sentinels, behind the dialect's name and what the method was doing.
func (d *Dialect) wrap(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = d.MapErr(*errp)
	}
	storeutil.Wrapf(errp, d.Name+": "+format, args...)
}

func (d *Dialect) timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return d.Time(*t)
}

// serverExists returns ErrNotFound (naming shown) when no server has the canonical id uid.
func (d *Dialect) serverExists(ctx context.Context, tx Tx, uid, shown string) error {
	var found bool
	if err := tx.QueryRow(ctx, d.Q.ServerExists, uid).Scan(&found); err != nil {
		return err
	}
	if !found {
		return storeutil.NotFound("server", shown)
	}
	return nil
}

// lockServer reads (and, where the dialect locks rows, locks) the columns the curation writes decide on; no
// server is ErrNotFound.
func (d *Dialect) lockServer(ctx context.Context, tx Tx, uid, shown string) (pinning bool, version int64, err error) {
	err = tx.QueryRow(ctx, d.Q.LockServer, uid).Scan(&pinning, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, storeutil.NotFound("server", shown)
	}
	return pinning, version, err
}

// execOne runs a statement that must touch exactly the row with that id; none is ErrNotFound.
func execOne(ctx context.Context, tx Tx, what, id string, query string, args ...any) error {
	n, err := tx.Exec(ctx, query, args...)
	if err != nil {
		return err
	}
	return storeutil.OneRow(n, what, id)
}

// limitArg is the LIMIT parameter: the dialect's NoLimit for limit <= 0.
func (d *Dialect) limitArg(limit int) any {
	if limit <= 0 {
		return d.NoLimit
	}
	return limit
}

// nullIfEmpty binds the empty string as NULL: a filter's "every server".
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// collect scans every row of rows with scan, in order, and closes rows. No rows is an empty slice, not nil.
func collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Time scans a stored time into *T: a time.Time as the driver gives it, or text in RFC 3339 (how SQLite keeps
// it); the result is in UTC.
func Time(t *time.Time) any { return timeDest{t} }

// NullTime is Time for a nullable column: NULL is a nil *time.Time.
func NullTime(t **time.Time) any { return nullTimeDest{t} }

type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	t, err := parseTime(src)
	if err != nil {
		return err
	}
	if t == nil {
		return errors.New("stored time is NULL")
	}
	*d.t = *t
	return nil
}

type nullTimeDest struct{ t **time.Time }

func (d nullTimeDest) Scan(src any) error {
	t, err := parseTime(src)
	*d.t = t
	return err
}

func parseTime(src any) (*time.Time, error) {
	var t time.Time
	switch v := src.(type) {
	case nil:
		return nil, nil
	case time.Time:
		t = v
	case string:
		return parseText(v)
	case []byte:
		return parseText(string(v))
	default:
		return nil, fmt.Errorf("stored time of type %T", src)
	}
	t = t.UTC()
	return &t, nil
}

func parseText(s string) (*time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, fmt.Errorf("stored time %q: %w", s, err)
	}
	t = t.UTC()
	return &t, nil
}
