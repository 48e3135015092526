package persistence

import (
	"encoding/json"
	"errors"
	"time"
)

// Tool curation (issue 16): what an admin decides about the tools the backends offer, kept in the store so that
// every process serves the same curated set. Filters hide tools of a server, overrides rename and redescribe
// them, profiles name subsets for clients, and pins hold a changed tool definition until an admin approves it.
// The store only keeps these; the routing table applies them.

// ErrChanged means an optimistic-concurrency check refused a write: the row changed since the caller read it
// (pins_version moved, or a pending change is not the one the admin looked at). Nothing was written.
var ErrChanged = errors.New("changed since read")

// ToolFilter hides tools of a server. Mode "" means no filter (Patterns is then empty). With FilterAllow only the
// tools matching one of Patterns (glob patterns on the original name) are served; with FilterDeny those are hidden.
type ToolFilter struct {
	Mode     string   `json:"mode"`
	Patterns []string `json:"patterns"`
}

// Filter modes and what pinning does with a tool that is new since the baseline.
const (
	FilterAllow = "allow"
	FilterDeny  = "deny"
	// PinNewWithhold withholds a tool that appeared after the baseline until an admin approves it.
	PinNewWithhold = "withhold"
	// PinNewServe serves a tool that appeared after the baseline at once.
	PinNewServe = "serve"
)

// ToolPolicy is a server's curation settings, read with the server (Server.Policy). A stored filter always has a
// non-nil Patterns; no filter is the zero ToolFilter. PinNewTools is never empty once stored.
type ToolPolicy struct {
	Filter      ToolFilter
	Pinning     bool
	PinNewTools string
	// PinsBaselineAt is when the approved definitions were last taken as a whole (pinning turned on, or the first
	// SaveToolPins of a pinned server that had no baseline); nil: never.
	PinsBaselineAt *time.Time
}

// ToolPolicyPatch changes a server's curation settings; nil fields are left as they are. Baseline is used only when
// Pinning turns pinning from off to on: it becomes the server's pins.
type ToolPolicyPatch struct {
	Filter      *ToolFilter
	Pinning     *bool
	PinNewTools *string
	Baseline    []ToolPin
}

// ToolAnnotations are the MCP tool annotations an override may set (each nil field keeps the backend's).
type ToolAnnotations struct {
	Title           *string `json:"title,omitempty"`
	ReadOnlyHint    *bool   `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool   `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool   `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool   `json:"openWorldHint,omitempty"`
}

// ToolOverride is what an admin changed about one tool of a server, keyed by the backend's original name so it
// survives rediscovery and server renames. A nil field keeps the backend's value. ExposedName is unique over every
// override (the store's unique index decides: ErrAlreadyExists).
type ToolOverride struct {
	ServerID     string
	OriginalName string
	ExposedName  *string
	Description  *string
	Annotations  *ToolAnnotations
	UpdatedAt    time.Time
}

// ToolPin is the pinning state of one tool of a server: the approved definition (served and routed), the pending
// change waiting for an admin (empty PendingHash: none), and the last rejected hash (so the same change is not
// raised again). Hashes are the caller's; the store compares them only for equality.
type ToolPin struct {
	ServerID     string
	OriginalName string
	ApprovedHash string
	ApprovedDef  json.RawMessage
	ApprovedAt   *time.Time
	PendingHash  string
	PendingDef   json.RawMessage
	PendingSince *time.Time
	RejectedHash string
}

// PinSet is every pin of a server and the version they were read at (servers.pins_version), which SaveToolPins
// checks so that a writer working from an old read is refused instead of overwriting an admin's decision.
type PinSet struct {
	Version int64
	Pins    []ToolPin
}

// ProfileSelector selects tools for a profile by server (a server name, which may not exist yet), tool name (glob
// patterns) and skill (skill ids). The store keeps selectors as given; the routing table interprets them.
type ProfileSelector struct {
	Server string   `json:"server,omitempty"`
	Tools  []string `json:"tools,omitempty"`
	Skills []string `json:"skills,omitempty"`
}

// ProfileBinding binds a profile to the callers authenticated by an OAuth access token: the one whose subject (sub)
// is Subject, or every one whose claim Claim has the value Value (a string claim equal to it, or a list claim that
// holds it: {"claim":"groups","value":"eng"}). Exactly one of Subject and Claim is set; Value goes with Claim.
type ProfileBinding struct {
	Subject string `json:"subject,omitempty"`
	Claim   string `json:"claim,omitempty"`
	Value   string `json:"value,omitempty"`
}

// Profile is a named subset of the tools, served at its own endpoint, and who is bound to it: static client token
// names (Clients) and OAuth subjects or claim values (Bindings). Selectors, Clients and Bindings are never nil once
// stored; a selector's empty Tools or Skills is nil. TokenBudget bounds what a tools/list answer of the profile's
// endpoint may cost, in tokens (issue 31): nil leaves the endpoint's budget, 0 serves the whole toolset.
type Profile struct {
	Name        string
	Description *string
	Selectors   []ProfileSelector
	Clients     []string
	Bindings    []ProfileBinding
	TokenBudget *int
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// AccessPolicy is the stored access policy (issue 27): the rules deciding which caller may list and call which
// tool, as the JSON document package gateway/policy compiles. The store keeps it as given; Version grows by one on
// every write (0: never written, no rule).
type AccessPolicy struct {
	Document  json.RawMessage
	Version   int64
	UpdatedAt time.Time
}
