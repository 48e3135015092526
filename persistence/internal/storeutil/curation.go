package storeutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// The checks and encodings of the tool curation rows (filters, overrides, pins, profiles) that both stores share,
// so that each dialect's curation.go holds only its SQL and both read back exactly what they were given.

// NormFilter checks a filter and returns it as the store keeps it: no filter is the zero ToolFilter, a filter's
// Patterns is never nil. Patterns without a mode are refused (they would silently be dropped).
func NormFilter(f persistence.ToolFilter) (persistence.ToolFilter, error) {
	switch f.Mode {
	case "":
		if len(f.Patterns) > 0 {
			return f, errors.New("tool filter: patterns without a mode")
		}
		return persistence.ToolFilter{}, nil
	case persistence.FilterAllow, persistence.FilterDeny:
		out := persistence.ToolFilter{Mode: f.Mode, Patterns: make([]string, len(f.Patterns))}
		copy(out.Patterns, f.Patterns)
		return out, nil
	default:
		return f, fmt.Errorf("tool filter: unknown mode %q", f.Mode)
	}
}

// FilterJSON is the stored form of a normalised filter: nil (SQL NULL) for no filter.
func FilterJSON(f persistence.ToolFilter) []byte {
	if f.Mode == "" {
		return nil
	}
	b, _ := json.Marshal(f) // cannot fail: strings only
	return b
}

// ParseFilter reads a stored filter (nil: none).
func ParseFilter(raw []byte) (persistence.ToolFilter, error) {
	if raw == nil {
		return persistence.ToolFilter{}, nil
	}
	var f persistence.ToolFilter
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, fmt.Errorf("stored tool filter %q: %w", raw, err)
	}
	return NormFilter(f)
}

// NormPinNewTools checks a pin_new_tools setting; "" is PinNewWithhold.
func NormPinNewTools(s string) (string, error) {
	switch s {
	case "":
		return persistence.PinNewWithhold, nil
	case persistence.PinNewWithhold, persistence.PinNewServe:
		return s, nil
	}
	return "", fmt.Errorf("unknown pin_new_tools %q", s)
}

// NormPolicy checks a server's policy at creation and returns it as the store keeps it.
func NormPolicy(p persistence.ToolPolicy) (persistence.ToolPolicy, error) {
	var err error
	if p.Filter, err = NormFilter(p.Filter); err != nil {
		return p, err
	}
	if p.PinNewTools, err = NormPinNewTools(p.PinNewTools); err != nil {
		return p, err
	}
	p.PinsBaselineAt = NormTimePtr(p.PinsBaselineAt)
	return p, nil
}

// PolicyUpdate is a checked ToolPolicyPatch, ready for SQL: each Set* says whether the column changes.
type PolicyUpdate struct {
	SetFilter   bool
	Filter      []byte // stored form; nil is NULL
	SetPinning  bool
	Pinning     bool
	SetPinNew   bool
	PinNewTools string
	Baseline    []persistence.ToolPin // prepared for the server (PreparePins)
}

// Empty reports whether the update changes nothing.
func (u PolicyUpdate) Empty() bool { return !u.SetFilter && !u.SetPinning && !u.SetPinNew }

// PreparePolicyPatch checks p for server uid.
func PreparePolicyPatch(uid string, p persistence.ToolPolicyPatch) (PolicyUpdate, error) {
	var u PolicyUpdate
	if p.Filter != nil {
		f, err := NormFilter(*p.Filter)
		if err != nil {
			return u, err
		}
		u.SetFilter, u.Filter = true, FilterJSON(f)
	}
	if p.Pinning != nil {
		u.SetPinning, u.Pinning = true, *p.Pinning
	}
	if p.PinNewTools != nil {
		v, err := NormPinNewTools(*p.PinNewTools)
		if err != nil {
			return u, err
		}
		u.SetPinNew, u.PinNewTools = true, v
	}
	if u.SetPinning && u.Pinning {
		pins, err := PreparePins(uid, p.Baseline, Now())
		if err != nil {
			return u, fmt.Errorf("baseline: %w", err)
		}
		u.Baseline = pins
	}
	return u, nil
}

// PreparePins checks the pins written for server uid and returns copies as the store keeps them: ServerID uid
// (whatever the caller set), times in UTC microseconds, ApprovedAt now when a hash is approved without a time
// and PendingSince now when a change is pending without one. Every original name must be set and appear once;
// definitions must be valid JSON.
func PreparePins(uid string, pins []persistence.ToolPin, now time.Time) ([]persistence.ToolPin, error) {
	out := make([]persistence.ToolPin, len(pins))
	seen := make(map[string]bool, len(pins))
	for i, p := range pins {
		if p.OriginalName == "" {
			return nil, errors.New("pin without a tool name")
		}
		if seen[p.OriginalName] {
			return nil, fmt.Errorf("tool %q pinned twice", p.OriginalName)
		}
		seen[p.OriginalName] = true
		if p.ApprovedDef != nil && !json.Valid(p.ApprovedDef) {
			return nil, fmt.Errorf("pin of %q: approved definition is not valid JSON", p.OriginalName)
		}
		if p.PendingDef != nil && !json.Valid(p.PendingDef) {
			return nil, fmt.Errorf("pin of %q: pending definition is not valid JSON", p.OriginalName)
		}
		p.ServerID = uid
		p.ApprovedAt, p.PendingSince = NormTimePtr(p.ApprovedAt), NormTimePtr(p.PendingSince)
		if p.ApprovedAt == nil && p.ApprovedHash != "" {
			p.ApprovedAt = &now
		}
		if p.PendingSince == nil && p.PendingHash != "" {
			p.PendingSince = &now
		}
		out[i] = p
	}
	return out, nil
}

// PinNames returns the original names of pins, in order.
func PinNames(pins []persistence.ToolPin) []string {
	out := make([]string, len(pins))
	for i, p := range pins {
		out[i] = p.OriginalName
	}
	return out
}

// ResolvePin is what ResolveToolChange writes over pin (read under the write lock): ErrNotFound when nothing is
// pending, ErrChanged when expectHash is set and is not the pending hash.
func ResolvePin(pin persistence.ToolPin, approve bool, expectHash string, now time.Time) (persistence.ToolPin, error) {
	if pin.PendingHash == "" {
		return pin, NotFound("pending change of tool", pin.OriginalName)
	}
	if expectHash != "" && expectHash != pin.PendingHash {
		return pin, fmt.Errorf("pending change of tool %q is %s, not %s: %w", pin.OriginalName, pin.PendingHash,
			expectHash, persistence.ErrChanged)
	}
	if approve {
		pin.ApprovedHash, pin.ApprovedDef, pin.ApprovedAt, pin.RejectedHash = pin.PendingHash, pin.PendingDef, &now, ""
	} else {
		pin.RejectedHash = pin.PendingHash
	}
	pin.PendingHash, pin.PendingDef, pin.PendingSince = "", nil, nil
	return pin, nil
}

// OverrideRow is a checked ToolOverride, ready for SQL.
type OverrideRow struct {
	ServerID     string
	OriginalName string
	ExposedName  *string
	Description  *string
	Annotations  []byte // stored form; nil is NULL
}

// PrepareOverride checks o: an original name is required and an exposed name, when set, is not empty. The
// server id must be a UUID (ErrNotFound otherwise).
func PrepareOverride(o persistence.ToolOverride) (OverrideRow, error) {
	uid, err := ServerID(o.ServerID)
	if err != nil {
		return OverrideRow{}, err
	}
	if o.OriginalName == "" {
		return OverrideRow{}, errors.New("override without a tool name")
	}
	if o.ExposedName != nil && *o.ExposedName == "" {
		return OverrideRow{}, fmt.Errorf("override of %q: empty exposed name", o.OriginalName)
	}
	r := OverrideRow{ServerID: uid, OriginalName: o.OriginalName, ExposedName: o.ExposedName,
		Description: o.Description}
	if o.Annotations != nil {
		r.Annotations, _ = json.Marshal(o.Annotations) // cannot fail: pointers to strings and bools
	}
	return r, nil
}

// ParseAnnotations reads stored annotations (nil: none).
func ParseAnnotations(raw []byte) (*persistence.ToolAnnotations, error) {
	if raw == nil {
		return nil, nil
	}
	var a persistence.ToolAnnotations
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("stored annotations %q: %w", raw, err)
	}
	return &a, nil
}

// ProfileRow is a checked Profile, ready for SQL.
type ProfileRow struct {
	Name        string
	Description *string
	Selectors   []byte
	Clients     []byte
	Bindings    []byte
	TokenBudget any // nil (NULL) or an int64
}

// PrepareProfile checks p (a name is required) and encodes its lists; nil lists are stored as empty arrays.
func PrepareProfile(p persistence.Profile) (ProfileRow, error) {
	if p.Name == "" {
		return ProfileRow{}, errors.New("profile without a name")
	}
	sel, err := json.Marshal(normSelectors(p.Selectors))
	if err != nil {
		return ProfileRow{}, err
	}
	clients := p.Clients
	if clients == nil {
		clients = []string{}
	}
	cl, err := json.Marshal(clients)
	if err != nil {
		return ProfileRow{}, err
	}
	bindings := p.Bindings
	if bindings == nil {
		bindings = []persistence.ProfileBinding{}
	}
	bn, err := json.Marshal(bindings)
	if err != nil {
		return ProfileRow{}, err
	}
	r := ProfileRow{Name: p.Name, Description: p.Description, Selectors: sel, Clients: cl, Bindings: bn}
	if p.TokenBudget != nil {
		if *p.TokenBudget < 0 {
			return ProfileRow{}, fmt.Errorf("profile %q: negative token budget %d", p.Name, *p.TokenBudget)
		}
		r.TokenBudget = int64(*p.TokenBudget)
	}
	return r, nil
}

// normSelectors copies selectors as they read back: never nil, each empty list nil (omitted in JSON).
func normSelectors(in []persistence.ProfileSelector) []persistence.ProfileSelector {
	out := make([]persistence.ProfileSelector, len(in))
	for i, s := range in {
		if len(s.Tools) == 0 {
			s.Tools = nil
		}
		if len(s.Skills) == 0 {
			s.Skills = nil
		}
		out[i] = s
	}
	return out
}

// ParseProfileLists reads a profile's stored selectors, clients and bindings into p; all come back non-nil.
func ParseProfileLists(p *persistence.Profile, selectors, clients, bindings []byte) error {
	if err := json.Unmarshal(selectors, &p.Selectors); err != nil {
		return fmt.Errorf("stored selectors of profile %q: %w", p.Name, err)
	}
	if err := json.Unmarshal(clients, &p.Clients); err != nil {
		return fmt.Errorf("stored clients of profile %q: %w", p.Name, err)
	}
	if err := json.Unmarshal(bindings, &p.Bindings); err != nil {
		return fmt.Errorf("stored bindings of profile %q: %w", p.Name, err)
	}
	p.Selectors = normSelectors(p.Selectors)
	if p.Clients == nil {
		p.Clients = []string{}
	}
	if p.Bindings == nil {
		p.Bindings = []persistence.ProfileBinding{}
	}
	return nil
}
