// Package storeutil holds what both Store implementations compute the same way: time normalisation, id parsing,
// canonical JSON and definition hashes, the plan that turns a discovery into inserts, updates and deletes, and the
// guards around each method's SQL (guards.go: error context, id checks, create-time defaults, row checks), so that
// a dialect's store.go holds only its SQL and what its driver needs.
package storeutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/internal/canonjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Both stores must normalise ids, times and JSON and hash tool definitions the same way; the conformance suite
// checks that they do.

// Now is the store's clock, at the microsecond precision PostgreSQL keeps.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// NormTime brings a caller's time to what the store keeps: UTC, microseconds; zero means Now.
func NormTime(t time.Time) time.Time {
	if t.IsZero() {
		return Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

func NormTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := t.UTC().Truncate(time.Microsecond)
	return &n
}

// ParseID returns the canonical (lowercase, hyphenated) form of a UUID, or false when s is not one.
func ParseID(s string) (string, bool) {
	u, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// NotFound is the error for an id that names no row, including ids that are not UUIDs at all.
func NotFound(what, id string) error {
	return fmt.Errorf("%s %q: %w", what, id, persistence.ErrNotFound)
}

// CanonicalJSON re-encodes raw with object keys sorted, insignificant whitespace removed and numbers kept as
// written, so two encodings of the same value give the same bytes. Empty input is the empty object.
func CanonicalJSON(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("{}"), nil
	}
	// canonjson gives encoding/json's bytes (numbers as written, keys sorted, HTML escaped) without decoding into maps:
	// a discovery canonicalises every schema it lists. FuzzCanonicalJSON holds the two equal.
	return canonjson.Append(make([]byte, 0, len(raw)), raw)
}

// DefinitionHash is the hex SHA-256 of the JSON array [description, canonical input schema]: equal for the same
// description and schema however the backend orders keys or spaces its JSON, different when either changes.
func DefinitionHash(description string, canonicalSchema []byte) string {
	// encoding/json's bytes for []any{description, json.RawMessage(canonicalSchema)}, written directly: the schema
	// is canonical (compact), the description escaped as encoding/json escapes it (FuzzDefinitionHash).
	b := make([]byte, 0, len(description)+len(canonicalSchema)+8)
	b = append(b, '[')
	b = segjson.AppendEscape(b, description, segjson.EscapeHTML)
	b = append(b, ',')
	b = append(b, canonicalSchema...)
	b = append(b, ']')
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// JsonOrEmpty returns raw, or the empty object when raw is empty, after checking it is one JSON value.
func JsonOrEmpty(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !segjson.Valid(raw) { // encoding/json's verdict (FuzzJsonOrEmpty), at a fraction of its cost
		return nil, errors.New("invalid JSON")
	}
	return raw, nil
}

// HistoryDetails builds the details of a history row: where the server came from, why, the error and the
// caller's own details.
func HistoryDetails(t persistence.Transition) ([]byte, error) {
	d := struct {
		From         string          `json:"from,omitempty"`
		Reason       string          `json:"reason,omitempty"`
		ErrorMessage *string         `json:"error_message,omitempty"`
		Details      json.RawMessage `json:"details,omitempty"`
	}{From: t.From, Reason: t.Reason, ErrorMessage: t.ErrorMessage, Details: t.Details}
	return json.Marshal(d)
}

// ExistingTool is what ReplaceServerTools needs of a stored tool. Row, when not zero, is RowFingerprint of the row
// as stored: a store that keeps the bytes it was given (SQLite) fills it, and a tool whose planned row has the same
// fingerprint is left alone instead of rewritten. A store that normalises JSON (PostgreSQL's jsonb) leaves it zero
// and rewrites every kept tool in one set-based statement.
type ExistingTool struct {
	ID   int64
	Name string
	Hash string
	Row  [sha256.Size]byte
}

// RowFingerprint identifies a stored tool row by the columns a rediscovery may change: its namespaced name,
// description, input schema and definition, as bytes. Equal fingerprints mean writing the row again changes nothing.
func RowFingerprint(name, description string, schema, definition []byte) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(name), []byte(description), schema, definition} {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(part)))) // length-prefixed: one encoding per row
		h.Write(part)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// PlannedTool is one definition of a ReplaceServerTools call, ready to write.
type PlannedTool struct {
	ID           int64 // 0: insert
	Name         string
	OriginalName string
	Description  string
	InputSchema  json.RawMessage
	Definition   json.RawMessage
	Hash         string
	Changed      bool
}

// ToolPlan is what ReplaceServerTools writes, and the diff it reports.
type ToolPlan struct {
	Insert []PlannedTool
	Update []PlannedTool
	Remove []int64
	Diff   persistence.ToolDiff
}

// PlanTools compares defs with the stored tools of server serverName. A later definition with the same original
// name replaces an earlier one (a backend listing a tool twice updates it).
func PlanTools(serverName string, defs []persistence.ToolDef, existing map[string]ExistingTool) (ToolPlan, error) {
	var p ToolPlan
	index := make(map[string]int, len(defs))
	var planned []PlannedTool
	for _, d := range defs {
		if d.OriginalName == "" {
			return p, errors.New("tool without a name")
		}
		schema, err := JsonOrEmpty(d.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tool %q: input schema: %w", d.OriginalName, err)
		}
		canon, err := CanonicalJSON(schema)
		if err != nil {
			return p, fmt.Errorf("tool %q: input schema: %w", d.OriginalName, err)
		}
		def, err := JsonOrEmpty(d.Definition)
		if err != nil {
			return p, fmt.Errorf("tool %q: definition: %w", d.OriginalName, err)
		}
		t := PlannedTool{
			Name:         serverName + "." + d.OriginalName,
			OriginalName: d.OriginalName,
			Description:  d.Description,
			InputSchema:  schema,
			Definition:   def,
			Hash:         DefinitionHash(d.Description, canon),
		}
		if i, dup := index[d.OriginalName]; dup {
			planned[i] = t
			continue
		}
		index[d.OriginalName] = len(planned)
		planned = append(planned, t)
	}
	for _, t := range planned {
		old, ok := existing[t.OriginalName]
		if !ok {
			p.Insert = append(p.Insert, t)
			p.Diff.Added = append(p.Diff.Added, t.Name)
			continue
		}
		t.ID = old.ID
		t.Changed = old.Hash != t.Hash
		if t.Changed {
			p.Diff.Changed = append(p.Diff.Changed, t.Name)
		}
		if old.Row != ([sha256.Size]byte{}) && old.Hash == t.Hash &&
			old.Row == RowFingerprint(t.Name, t.Description, t.InputSchema, t.Definition) {
			continue // stored exactly as listed: nothing to write
		}
		p.Update = append(p.Update, t)
	}
	for original, old := range existing {
		if _, keep := index[original]; !keep {
			p.Remove = append(p.Remove, old.ID)
			p.Diff.Removed = append(p.Diff.Removed, old.Name)
		}
	}
	sort.Strings(p.Diff.Added)
	sort.Strings(p.Diff.Changed)
	sort.Strings(p.Diff.Removed)
	p.Diff.Total = len(planned)
	return p, nil
}

// ValidClassificationState reports whether s is one of the states of the tool classification state machine.
func ValidClassificationState(s string) bool {
	switch s {
	case persistence.ClassificationDiscovered, persistence.ClassificationClassifying,
		persistence.ClassificationClassified, persistence.ClassificationUnclassified:
		return true
	}
	return false
}

// AllStatuses are reported by CountServersByStatus even when no server is in them, so a gauge built from the map
// drops to zero instead of keeping its last value.
func AllStatuses() []string {
	return []string{
		persistence.StatusDisconnected, persistence.StatusConnecting, persistence.StatusConnected,
		persistence.StatusDegraded, persistence.StatusError, persistence.StatusDisconnecting,
	}
}
