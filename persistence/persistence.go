// Package persistence holds the aggregator's durable state: registered servers, their connection history, the
// tools discovered on them and the audit log. One Store interface has two implementations that pass one shared
// conformance suite (persistence/storetest): PostgreSQL through pgx (persistence/postgres) for production and a
// pure-Go embedded SQLite file (persistence/sqlite) so the daemon runs with nothing installed.
package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors every Store returns (wrapped) so callers can map them to HTTP codes with errors.Is.
var (
	// ErrNotFound means the addressed row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists means a unique constraint (the server name) refused the write.
	ErrAlreadyExists = errors.New("already exists")
	// ErrUnavailable means the store could not be reached (connection refused, lost or timed out); the request may
	// be retried later. The front ends answer 503 STORE_UNAVAILABLE, never 500.
	ErrUnavailable = errors.New("store unavailable")
	// ErrLeaseHeld means another owner holds a live lease on the server (AcquireLease returns the holder's lease
	// beside it, so the caller knows where the server lives).
	ErrLeaseHeld = errors.New("lease held by another owner")
	// ErrLimitReached means CreateServer's limit of servers is reached (decided by the store, for every process that
	// shares it).
	ErrLimitReached = errors.New("server limit reached")
	// ErrLeaseLost means the caller's lease is no longer the current one (it was released, or taken over by
	// another owner or with a higher epoch): a write fenced by it was not made, and the caller must give the server
	// up. A lease that lapsed and that nobody took over since still fences (see Lease).
	ErrLeaseLost = errors.New("lease lost")
	// ErrKeyReused means CreateServerIdempotent found the idempotency key stored for a request with another
	// fingerprint: the key was reused for a different registration, and nothing was written.
	ErrKeyReused = errors.New("idempotency key reused with a different request")
)

// IdempotencyKey makes a registration retryable (the Idempotency-Key header of POST /servers): the first request
// stores the key beside the server it creates, in the same transaction, and a retry with the same key and
// fingerprint gets that server back instead of a second registration or a 409.
type IdempotencyKey struct {
	// Scope is whose key it is (the caller's identity); keys of different scopes never meet.
	Scope string
	// Key is the client's key as sent (1-255 printable ASCII characters).
	Key string
	// Fingerprint identifies the request the key was first used for (a hash of its canonical body; never the body
	// itself, which may hold secrets).
	Fingerprint string
	// Retention is how long a stored key is honoured; an older one is forgotten (and swept lazily by later keyed
	// registrations), so the key may then register anew.
	Retention time.Duration
}

// Server states of the lifecycle state machine (logic-contract.md plus the transient DISCONNECTING).
const (
	StatusDisconnected  = "DISCONNECTED"
	StatusConnecting    = "CONNECTING"
	StatusConnected     = "CONNECTED"
	StatusDegraded      = "DEGRADED"
	StatusError         = "ERROR"
	StatusDisconnecting = "DISCONNECTING"
)

// Transport types accepted at registration.
const (
	TransportSTDIO = "STDIO"
	TransportSSE   = "SSE"
	TransportHTTP  = "HTTP"
)

// Server is one registered external MCP server as stored. ConnectionConfig is kept exactly as the admin wrote it
// (with ${VAR} references unresolved).
type Server struct {
	ID               string
	Name             string
	Description      *string
	TransportType    string
	ConnectionConfig json.RawMessage
	HealthCheckURL   *string
	// AutoConnect is the admin's intent: true when the server should be connected (set by registration with
	// auto_connect, by connect; cleared by disconnect). At start the daemon reconnects every server that has it.
	AutoConnect         bool
	Status              string
	ErrorMessage        *string
	ToolCount           int
	LastHealthCheck     *time.Time
	HealthResponseMs    *float64
	ConsecutiveFailures int
	RegisteredAt        time.Time
	ConnectedAt         *time.Time
	UpdatedAt           time.Time
	// Policy is the server's tool curation settings (filter, pinning); changed by SetToolPolicy.
	Policy ToolPolicy
	// CredentialMode is CredentialShared ("" reads as it) or CredentialPerUser; UserCredential says where a
	// per_user server's callers' secrets go (nil for a shared server). Both are set at registration.
	CredentialMode string
	UserCredential *UserCredentialSlot
}

// ServerPatch changes the admin-editable fields of a server; nil fields are left as they are. ClearHealthCheckURL
// removes the health URL. A rename renames every tool of the server in the same transaction.
type ServerPatch struct {
	Name                *string
	Description         *string
	ConnectionConfig    json.RawMessage
	HealthCheckURL      *string
	ClearHealthCheckURL bool
	// Credential, when set, replaces credential_mode and user_credential together (issue 28: PATCH switches a
	// server between shared and per_user). Switching to shared deletes every caller's stored secret of the
	// server in the same transaction: kept, they would come back into use unseen if it were switched back.
	Credential *CredentialChange
}

// CredentialChange is a server's new credential_mode with its user_credential (nil for shared).
type CredentialChange struct {
	Mode string
	Slot *UserCredentialSlot
}

// ListServersFilter selects and pages servers; ordering is by registration time, then id.
type ListServersFilter struct {
	Status string // empty: all
	Limit  int    // <= 0: no limit
	Offset int
}

// Transition is one state change of a server, persisted with its history row in one transaction.
type Transition struct {
	ServerID string
	From     string
	To       string
	Reason   string
	// ErrorMessage is stored on the server row: set when To is ERROR, cleared otherwise.
	ErrorMessage *string
	At           time.Time
	// Details is extra JSON kept in the history row (exit status, attempt number, ...); may be nil.
	Details json.RawMessage
	// Fence, when set, makes the write conditional on that lease still being current (ErrLeaseLost otherwise).
	Fence *Lease
}

// HealthRecord is the outcome of one health check.
type HealthRecord struct {
	ServerID            string
	CheckedAt           time.Time
	ResponseMs          *float64
	ConsecutiveFailures int
	LastError           *string
	// Fence, when set, makes the write conditional on that lease still being current (ErrLeaseLost otherwise).
	Fence *Lease
}

// Lease is one process's exclusive ownership of a server: only the owner opens the server's session (and starts
// its child process), and every status, health and tool write it makes is fenced by the lease. The epoch grows by
// one each time the server changes hands (or its lease is taken again after it lapsed), so a write from an owner
// that lost the lease is refused even if its clock has not noticed yet. Expiry is decided by the database's clock.
//
// A write is fenced by owner and epoch alone, not by expiry: a lease that lapsed while its owner could not reach
// the store, and that nobody took over since, is its owner's again at the next renewal with the same epoch, and the
// owner is the only process running the server; refusing its writes in the moment between the store's return and
// that renewal would make it give a live session up (TestStoreOutageKeepsSessionsE2E). Whoever takes the lease
// afterwards changes its owner or epoch, which the fence refuses.
type Lease struct {
	ServerID  string
	Owner     string
	Epoch     int64
	ExpiresAt time.Time
}

// Node is one running daemon process as the store knows it: where its MCP endpoint answers, and when it last said
// it was alive. A process that finds a live node can serve through it instead of starting backends of its own.
type Node struct {
	ID          string
	Address     string
	HeartbeatAt time.Time
}

// HistoryEvent is a row of server_connection_history.
type HistoryEvent struct {
	ID        int64
	ServerID  string
	EventType string // the state entered: CONNECTED, DISCONNECTED, ERROR, ...
	Details   json.RawMessage
	Timestamp time.Time
}

// ToolDef is a tool as a backend's tools/list returned it, before namespacing.
type ToolDef struct {
	OriginalName string
	Description  string
	InputSchema  json.RawMessage
	// Definition is the whole tool object as the backend sent it (title, annotations, output schema ...), kept so
	// the aggregator's own MCP endpoint can expose it faithfully.
	Definition json.RawMessage
}

// Tool is a stored, namespaced tool.
type Tool struct {
	ID             int64
	Name           string // {server}.{original}
	OriginalName   string
	Description    string
	InputSchema    json.RawMessage
	Definition     json.RawMessage
	SourceServerID string
	IsExternal     bool
	IsClassified   bool
	// ClassificationState is DISCOVERED, CLASSIFYING, CLASSIFIED or UNCLASSIFIED.
	ClassificationState string
	SkillIDs            []string
	PrimarySkillID      *string
	// DefinitionHash is a hash of description and input schema; a change sets ChangedAt.
	DefinitionHash string
	DiscoveredAt   time.Time
	UpdatedAt      time.Time
	ChangedAt      *time.Time
}

// Classification states of a tool (logic-contract.md, tool classification state machine).
const (
	ClassificationDiscovered   = "DISCOVERED"
	ClassificationClassifying  = "CLASSIFYING"
	ClassificationClassified   = "CLASSIFIED"
	ClassificationUnclassified = "UNCLASSIFIED"
)

// ToolClassification is the outcome of classifying one tool (BR-004), written by SetToolClassification.
type ToolClassification struct {
	// State is one of the Classification* constants; the tool counts as classified exactly when it is CLASSIFIED.
	State          string
	SkillIDs       []string
	PrimarySkillID *string
}

// Kinds of a backend feature other than tools (FeatureDef.Kind).
const (
	FeaturePrompt           = "prompt"
	FeatureResource         = "resource"
	FeatureResourceTemplate = "resource_template"
)

// FeatureDef is one prompt, resource or resource template as a backend listed it: the aggregated MCP endpoint
// exposes what a backend offers besides tools from the stored definitions (no request to the backend per listing).
type FeatureDef struct {
	// Kind is FeaturePrompt, FeatureResource or FeatureResourceTemplate.
	Kind string
	// Key identifies the feature within its server and kind: a prompt's name, a resource's URI, a template's URI
	// template.
	Key string
	// Definition is the whole object as the backend sent it.
	Definition json.RawMessage
}

// Feature is a stored FeatureDef of a server; Position is its place in the backend's listing of its kind.
type Feature struct {
	ServerID string
	FeatureDef
	Position  int
	UpdatedAt time.Time
}

// ToolDiff says what ReplaceServerTools did, by namespaced name.
type ToolDiff struct {
	Added   []string
	Removed []string
	Changed []string
	Total   int
}

// ListToolsFilter selects and pages tools; ordering is by name.
type ListToolsFilter struct {
	ServerID string // empty: all servers
	Limit    int    // <= 0: no limit
	Offset   int
}

// ToolCounts are totals over a set of tools.
type ToolCounts struct {
	Total        int
	Classified   int
	Unclassified int
}

// AuditRecord is one admin operation.
type AuditRecord struct {
	ID         int64
	Event      string // server.registered, server.updated, server.connected, ...
	ServerID   *string
	ServerName *string
	Actor      string
	IPAddress  string
	Details    json.RawMessage
	Timestamp  time.Time
}

// Feed is what a Store that several processes can share offers beyond storage: short notices delivered to every
// process listening on the same database (PostgreSQL's LISTEN/NOTIFY). The daemon sends its events through it so
// that other processes' routing tables and search indexes follow changes made elsewhere. Delivery is at most once
// and in the order the notices were sent by one process; a listener that was disconnected has missed notices, so
// connected tells it to resynchronise from the store. The embedded store does not implement it.
type Feed interface {
	// Notify sends payload (at most MaxNoticeBytes bytes) to every listener, this process's included.
	Notify(ctx context.Context, payload string) error
	// Listen calls fn with each notice, in order, until ctx ends, reconnecting after a failure (with backoff);
	// connected is called after every connection, the first included, before any notice it delivers. It returns
	// ctx's error.
	Listen(ctx context.Context, fn func(payload string), connected func()) error
}

// FeedOf returns the Feed of s, looking through wrappers that expose their inner store with Inner (the encrypting
// store does); false when the store has none.
func FeedOf(s Store) (Feed, bool) {
	for s != nil {
		if f, ok := s.(Feed); ok {
			return f, true
		}
		w, ok := s.(interface{ Inner() Store })
		if !ok {
			break
		}
		s = w.Inner()
	}
	return nil, false
}

// MaxNoticeBytes is the largest Feed payload (PostgreSQL refuses NOTIFY payloads of 8000 bytes or more).
const MaxNoticeBytes = 7900

// Store is everything the daemon keeps durably. Implementations are safe for concurrent use and return errors
// wrapping ErrNotFound and ErrAlreadyExists where those apply.
type Store interface {
	// Ping checks the store can answer (for /health).
	Ping(ctx context.Context) error
	// Close releases connections.
	Close()
	// Kind names the implementation ("postgres" or "sqlite").
	Kind() string
	// TaskStore keeps the durable tasks (tasks.go).
	TaskStore

	// CreateServer inserts s. The store fills ID (when empty), RegisteredAt and UpdatedAt. A second server with
	// the same name fails with ErrAlreadyExists, decided by the database's unique constraint. With max > 0, a
	// server beyond max registered servers fails with ErrLimitReached, decided atomically across every process
	// that shares the store. s.Policy is stored too (PinNewTools "" is PinNewWithhold).
	CreateServer(ctx context.Context, s *Server, max int) error
	// CreateServerIdempotent is CreateServer under an idempotency key, decided in one transaction with the
	// insert, so a crash stores the server and its key together or neither. When the store holds k (same Scope and
	// Key, younger than k.Retention), nothing is written: with the same Fingerprint, *s becomes the server the key
	// created, as stored now, and replayed is true; with another, it fails with ErrKeyReused. Otherwise s is
	// inserted as CreateServer does (ErrAlreadyExists, ErrLimitReached as there) and the key stored beside it.
	// Concurrent calls with one key create one server. A key goes with its server (DeleteServer), so after a
	// delete the key registers anew. Stale keys are swept lazily, a bounded number per call.
	CreateServerIdempotent(ctx context.Context, s *Server, max int, k IdempotencyKey) (replayed bool, err error)
	GetServer(ctx context.Context, id string) (Server, error)
	GetServerByName(ctx context.Context, name string) (Server, error)
	// ListServers returns the page and the total count matching the filter.
	ListServers(ctx context.Context, f ListServersFilter) ([]Server, int, error)
	// UpdateServer applies p and returns the new row. A rename to a taken name is ErrAlreadyExists.
	UpdateServer(ctx context.Context, id string, p ServerPatch) (Server, error)
	// SetAutoConnect records the admin's intent to keep the server connected.
	SetAutoConnect(ctx context.Context, id string, on bool) error
	// RecordTransition sets the server's status (and connected_at when entering CONNECTED, error_message as
	// given) and appends the history row, atomically.
	RecordTransition(ctx context.Context, t Transition) error
	// RecordHealth stores the outcome of a health check on the server row.
	RecordHealth(ctx context.Context, h HealthRecord) error
	// DeleteServer removes the server; its tools, history, lease, tool overrides and pins go with it (ON DELETE
	// CASCADE).
	DeleteServer(ctx context.Context, id string) error
	// CountServersByStatus returns how many servers are in each status.
	CountServersByStatus(ctx context.Context) (map[string]int, error)
	// ListHistory returns the newest history rows of a server first.
	ListHistory(ctx context.Context, serverID string, limit int) ([]HistoryEvent, error)

	// ReplaceServerTools makes the server's stored tools exactly defs (namespaced with the server's current
	// name): new ones are inserted, existing ones updated (ChangedAt set when the definition hash differs), the
	// rest deleted, and tool_count updated, in one transaction.
	// A non-nil fence makes the write conditional on that lease still being current (ErrLeaseLost otherwise).
	ReplaceServerTools(ctx context.Context, serverID string, defs []ToolDef, fence *Lease) (ToolDiff, error)
	ListTools(ctx context.Context, f ListToolsFilter) ([]Tool, int, error)
	GetTool(ctx context.Context, id int64) (Tool, error)
	CountTools(ctx context.Context, serverID string) (ToolCounts, error)
	// SetToolClassification stores a tool's classification state, skills and primary skill (is_classified follows
	// State == CLASSIFIED). ReplaceServerTools keeps them for tools that stay.
	SetToolClassification(ctx context.Context, id int64, c ToolClassification) error

	// ReplaceServerFeatures makes the server's stored prompts, resources and resource templates exactly defs (a
	// later duplicate of a kind and key is skipped), in one transaction; fenced like ReplaceServerTools. An unknown
	// kind, an empty key or a definition that is not a JSON object is an error, and nothing is written.
	ReplaceServerFeatures(ctx context.Context, serverID string, defs []FeatureDef, fence *Lease) error
	// ListFeatures returns the stored features of one server (all servers when serverID is empty), ordered by
	// server, kind and position. A serverID naming no server is ErrNotFound.
	ListFeatures(ctx context.Context, serverID string) ([]Feature, error)

	// AcquireLease makes owner the server's owner for ttl: when nobody holds a live lease (then the epoch grows by
	// one; the first is 1), or when owner already holds it (then only the expiry moves). A live lease of another
	// owner is ErrLeaseHeld, returned with that lease. Racing callers get exactly one winner. An unknown server is
	// ErrNotFound.
	AcquireLease(ctx context.Context, serverID, owner string, ttl time.Duration) (Lease, error)
	// TakeOverLease is AcquireLease that also takes a live lease whose owner is from: a process the caller knows
	// is gone (a cluster member that left) before its lease lapsed. The epoch grows by one. from empty: AcquireLease.
	TakeOverLease(ctx context.Context, serverID, owner, from string, ttl time.Duration) (Lease, error)
	// GetLease returns the server's lease row, live or expired, and the database's current time to compare with;
	// ErrNotFound when the server never had one.
	GetLease(ctx context.Context, serverID string) (Lease, time.Time, error)
	// RenewLeases extends every lease of owner by ttl from now and returns them: its live leases, and the ones that
	// lapsed (owner could not reach the store) that nobody took over or released since. A server missing from the
	// answer is no longer owner's (its lease changed hands or was released). One statement whatever the number.
	RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]Lease, error)
	// ReleaseLease ends l if it is still owner's, live or lapsed: the row stays, expired and with no owner (so
	// epochs keep growing, and nobody mistakes it for a lease its holder only could not renew); releasing a lease
	// already lost is not an error.
	ReleaseLease(ctx context.Context, l Lease) error
	// ReleaseOwnerLeases ends every lease of owner (a clean shutdown) and returns how many live ones it ended.
	ReleaseOwnerLeases(ctx context.Context, owner string) (int, error)
	// ListLeases returns every lease row, live or expired, with the database's current time to compare with.
	ListLeases(ctx context.Context) (leases []Lease, now time.Time, err error)
	// Heartbeat records that node id is alive and where it answers.
	Heartbeat(ctx context.Context, n Node) error
	// ListNodes returns the nodes whose last heartbeat is within alive of now, newest first.
	ListNodes(ctx context.Context, alive time.Duration) ([]Node, error)
	// RemoveNode forgets a node (a clean shutdown).
	RemoveNode(ctx context.Context, id string) error

	InsertAudit(ctx context.Context, r AuditRecord) error
	// ListAudit returns the newest records first, and the total.
	ListAudit(ctx context.Context, limit, offset int) ([]AuditRecord, int, error)

	// SetToolPolicy applies p in one transaction and returns the new server row; ErrNotFound for an unknown
	// server. When p.Pinning turns pinning from off to on, the server's pins are replaced by p.Baseline (the
	// caller computes them from the stored tools), pins_baseline_at = now and pins_version grows by one. Turning
	// it off clears every pin's pending change (pins_version grows by one). An empty patch changes nothing.
	SetToolPolicy(ctx context.Context, serverID string, p ToolPolicyPatch) (Server, error)

	// ListToolOverrides returns the overrides of a server (every server when serverID is empty), ordered by
	// server id, then original name; an unknown server is ErrNotFound.
	ListToolOverrides(ctx context.Context, serverID string) ([]ToolOverride, error)
	// PutToolOverride creates or replaces the override of (o.ServerID, o.OriginalName) and returns it as stored.
	// An unknown server is ErrNotFound; an ExposedName another override has is ErrAlreadyExists.
	PutToolOverride(ctx context.Context, o ToolOverride) (ToolOverride, error)
	// DeleteToolOverride removes an override; ErrNotFound when there is none.
	DeleteToolOverride(ctx context.Context, serverID, originalName string) error

	// ListToolPins returns the server's pins ordered by original name and the pins_version they were read at;
	// ErrNotFound for an unknown server.
	ListToolPins(ctx context.Context, serverID string) (PinSet, error)
	// SaveToolPins makes the server's pins exactly pins (upserting those given, deleting the rest) if
	// pins_version is still expect, and then increments it; ErrChanged otherwise, with nothing written. A non-nil
	// fence makes the write conditional on that lease still being current (ErrLeaseLost otherwise).
	SaveToolPins(ctx context.Context, serverID string, expect int64, pins []ToolPin, fence *Lease) error
	// ResolveToolChange approves or rejects the pending change of one tool and returns the pin as stored:
	// ErrNotFound when the tool has no pending change; ErrChanged when expectHash is not empty and is not the
	// pending hash. Approve: approved_* = pending_*, approved_at = now, rejected_hash = ''. Reject: rejected_hash
	// = pending_hash. Both clear pending_* and increment pins_version.
	ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, expectHash string) (ToolPin, error)

	// ListProfiles returns every profile by name.
	ListProfiles(ctx context.Context) ([]Profile, error)
	// GetProfile returns one profile; ErrNotFound when absent.
	GetProfile(ctx context.Context, name string) (Profile, error)
	// PutProfile creates p, or replaces the profile of that name keeping its CreatedAt, and returns it as stored
	// with created true when it was new.
	PutProfile(ctx context.Context, p Profile) (Profile, bool, error)
	// DeleteProfile removes a profile; ErrNotFound when absent.
	DeleteProfile(ctx context.Context, name string) error

	// GetAccessPolicy returns the stored access policy; the zero AccessPolicy (Version 0, no Document) when none
	// was ever written.
	GetAccessPolicy(ctx context.Context) (AccessPolicy, error)
	// PutAccessPolicy replaces the access policy with doc (a JSON object, validated by the caller) and returns it
	// as stored, its version one more than before.
	PutAccessPolicy(ctx context.Context, doc json.RawMessage) (AccessPolicy, error)

	CredentialStore
	OAuthStore
}
