package storeutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/persistence"
)

// The guards every Store method runs before or around its SQL, so that a dialect's file holds only its SQL: the
// error context added once per method (Wrapf), id parsing (ServerID, OptionalServerID, AuditServerID), the
// create-time defaults (PrepareCreate), the empty-patch shortcut (EmptyPatch), the classification checks
// (PrepareClassification), the single-row check (OneRow) and the walks over result sets (Collect, CountByStatus).

// Wrapf replaces a non-nil *errp with the formatted context followed by the error, which stays in the chain.
// Deferred once at the top of a function (as go-sdk's internal/util.Wrapf is), it gives every error the function
// returns the same context without a fmt.Errorf on each return.
func Wrapf(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), *errp)
	}
}

// ServerID returns the canonical form of a server id, or a not-found error: an id that is not a UUID names no
// server (ErrNotFound, as the Store interface promises, not a validation error).
func ServerID(id string) (string, error) {
	uid, ok := ParseID(id)
	if !ok {
		return "", NotFound("server", id)
	}
	return uid, nil
}

// OptionalServerID is ServerID for a filter, where the empty id selects every server and stays empty.
func OptionalServerID(id string) (string, error) {
	if id == "" {
		return "", nil
	}
	return ServerID(id)
}

// AuditServerID returns the canonical form of an audit record's server id (nil stays nil). The audit outlives
// its server, so the id is no foreign key and is checked here instead: one that is not a UUID is refused.
func AuditServerID(id *string) (*string, error) {
	if id == nil {
		return nil, nil
	}
	uid, ok := ParseID(*id)
	if !ok {
		return nil, fmt.Errorf("server id %q is not a UUID", *id)
	}
	return &uid, nil
}

// CreateID returns the id a new server is stored under: the canonical form of id, or a new UUIDv7 (time-ordered,
// so rows created together sit together in the index) when id is empty. An id that is not a UUID is an error.
// The crypt decorator needs it before the insert, to seal the config under the id reads will see.
func CreateID(id string) (string, error) {
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("generate id: %w", err)
		}
		return u.String(), nil
	}
	if uid, ok := ParseID(id); ok {
		return uid, nil
	}
	return "", fmt.Errorf("id %q is not a UUID", id)
}

// PrepareCreate returns the row CreateServer inserts for srv: srv with the defaults the Store interface promises
// (ID canonical, a UUIDv7 when empty; Status DISCONNECTED when empty; RegisteredAt and UpdatedAt Now; the policy
// checked and normalised by NormPolicy) and its other times brought to what the store keeps (UTC microseconds).
// The store hands the row back to the caller once the insert succeeded.
func PrepareCreate(srv persistence.Server) (persistence.Server, error) {
	id, err := CreateID(srv.ID)
	if err != nil {
		return persistence.Server{}, err
	}
	srv.ID = id
	if srv.Policy, err = NormPolicy(srv.Policy); err != nil {
		return persistence.Server{}, err
	}
	if srv.Status == "" {
		srv.Status = persistence.StatusDisconnected
	}
	if srv, err = NormCredential(srv); err != nil {
		return persistence.Server{}, err
	}
	ts := Now()
	srv.RegisteredAt, srv.UpdatedAt = ts, ts
	srv.LastHealthCheck, srv.ConnectedAt = NormTimePtr(srv.LastHealthCheck), NormTimePtr(srv.ConnectedAt)
	return srv, nil
}

// EmptyPatch reports whether p changes nothing; UpdateServer then returns the row untouched, UpdatedAt included.
func EmptyPatch(p persistence.ServerPatch) bool {
	return p.Name == nil && p.Description == nil && p.ConnectionConfig == nil && p.HealthCheckURL == nil &&
		!p.ClearHealthCheckURL && p.Credential == nil
}

// CredentialArgs are the SQL arguments of a patch's credential change: whether there is one, the mode, the slot's
// JSON (nil: NULL), and whether the callers' secrets go (a switch to shared). A change NormCredential refuses is
// an error.
func CredentialArgs(p persistence.ServerPatch) (set bool, mode any, slot []byte, dropSecrets bool, err error) {
	c := p.Credential
	if c == nil {
		return false, nil, nil, false, nil
	}
	srv, err := NormCredential(persistence.Server{CredentialMode: c.Mode, UserCredential: c.Slot})
	if err != nil {
		return false, nil, nil, false, err
	}
	return true, srv.CredentialMode, UserCredentialJSON(srv.UserCredential), srv.CredentialMode != persistence.CredentialPerUser, nil
}

// PrepareClassification checks a classification's state and returns it with SkillIDs never nil (stored as an
// empty list, read back as one).
func PrepareClassification(c persistence.ToolClassification) (persistence.ToolClassification, error) {
	if !ValidClassificationState(c.State) {
		return c, fmt.Errorf("unknown classification state %q", c.State)
	}
	if c.SkillIDs == nil {
		c.SkillIDs = []string{}
	}
	return c, nil
}

// PrepareTransition checks a transition and returns its history row's details and the time it is recorded at
// (zero At: Now).
func PrepareTransition(t persistence.Transition) (details []byte, at time.Time, err error) {
	if t.To == "" {
		return nil, time.Time{}, errors.New("no target status")
	}
	details, err = HistoryDetails(t)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("details: %w", err)
	}
	return details, NormTime(t.At), nil
}

// OneRow is the check after a statement that must touch exactly the row it names: n rows affected, none is
// NotFound(what, id).
func OneRow(n int64, what, id string) error {
	if n == 0 {
		return NotFound(what, id)
	}
	return nil
}

// Scanner is one row to scan: *sql.Row and *sql.Rows, pgx.Row and pgx.Rows.
type Scanner interface {
	Scan(dest ...any) error
}

// Rows is a result set to walk: *sql.Rows or pgx.Rows.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// closeRows closes rows, whichever Close it has (*sql.Rows returns an error, pgx.Rows does not).
func closeRows(rows Rows) {
	switch r := rows.(type) {
	case interface{ Close() error }:
		_ = r.Close()
	case interface{ Close() }:
		r.Close()
	}
}

// Collect scans every row of rows with scan, in order, and closes rows. No rows is an empty slice, not nil.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	defer closeRows(rows)
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

// CountByStatus reads (status, count) rows into a map that has every known status (AllStatuses), zero or not,
// and closes rows.
func CountByStatus(rows Rows) (map[string]int, error) {
	defer closeRows(rows)
	out := make(map[string]int)
	for _, st := range AllStatuses() {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Bounds of a stored idempotency key (the columns' limits, in both dialects).
const (
	maxKeyScope       = 255
	maxKeyLen         = 255
	maxKeyFingerprint = 128
)

// CheckIdempotencyKey refuses a key CreateServerIdempotent cannot store: an empty or overlong scope, key or
// fingerprint, or a retention that is not positive.
func CheckIdempotencyKey(k persistence.IdempotencyKey) error {
	switch {
	case k.Scope == "" || len(k.Scope) > maxKeyScope:
		return fmt.Errorf("idempotency key scope must be 1-%d bytes, not %d", maxKeyScope, len(k.Scope))
	case k.Key == "" || len(k.Key) > maxKeyLen:
		return fmt.Errorf("idempotency key must be 1-%d bytes, not %d", maxKeyLen, len(k.Key))
	case k.Fingerprint == "" || len(k.Fingerprint) > maxKeyFingerprint:
		return fmt.Errorf("idempotency key fingerprint must be 1-%d bytes, not %d", maxKeyFingerprint, len(k.Fingerprint))
	case k.Retention <= 0:
		return fmt.Errorf("idempotency key retention must be positive, not %v", k.Retention)
	}
	return nil
}

// KeySweepBatch is how many expired idempotency keys one keyed registration deletes at most (the lazy sweep).
const KeySweepBatch = 100

// NormCredential checks a server's credential settings: an empty mode is CredentialShared; per_user needs a slot
// and shared has none.
func NormCredential(srv persistence.Server) (persistence.Server, error) {
	switch srv.CredentialMode {
	case "", persistence.CredentialShared:
		srv.CredentialMode = persistence.CredentialShared
		if srv.UserCredential != nil {
			return srv, fmt.Errorf("user_credential set on a %s server", persistence.CredentialShared)
		}
	case persistence.CredentialPerUser:
		if srv.UserCredential == nil {
			return srv, fmt.Errorf("a %s server needs user_credential", persistence.CredentialPerUser)
		}
	default:
		return srv, fmt.Errorf("unknown credential_mode %q", srv.CredentialMode)
	}
	return srv, nil
}

// UserCredentialJSON is the stored form of a slot (nil: NULL).
func UserCredentialJSON(s *persistence.UserCredentialSlot) []byte {
	if s == nil {
		return nil
	}
	b, _ := json.Marshal(s) // cannot fail: strings only
	return b
}

// ParseUserCredential reads a stored slot (NULL: nil).
func ParseUserCredential(raw []byte) (*persistence.UserCredentialSlot, error) {
	if raw == nil {
		return nil, nil
	}
	var s persistence.UserCredentialSlot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("stored user_credential %q: %w", raw, err)
	}
	return &s, nil
}
