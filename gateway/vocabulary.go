package gateway

import (
	"encoding/json"
	"errors"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/toolsearch"
)

// The words the use cases and the actor system share. They are declared here, below both, so that a front end
// (and package apierror, which maps the errors) names them without importing the actor system; package actors
// re-exports them under its old names.

// Errors the actor system returns (wrapped) besides persistence.ErrNotFound and persistence.ErrAlreadyExists.
// apierror.FromError maps each to its answer.
var (
	// ErrAskTimeout means an actor did not answer within the ask deadline; the front end answers 503.
	ErrAskTimeout = errors.New("actor did not answer in time")
	// ErrMaxServers means MCP_AGGREGATOR_MAX_SERVERS servers are already registered.
	ErrMaxServers = errors.New("maximum number of servers reached")
	// ErrShuttingDown means the daemon is stopping and takes no new work.
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrProfileInUse means a profile still has client tokens bound to it: deleting it would widen what they see
	// (409); unbind them first.
	ErrProfileInUse = errors.New("profile has bound clients")
	// ErrNameTaken means an override's exposed name is already a tool's name on the MCP endpoint (409).
	ErrNameTaken = errors.New("tool name already taken")
)

// RegisterRequest is a validated registration.
type RegisterRequest struct {
	Name             string
	Description      *string
	TransportType    string
	ConnectionConfig json.RawMessage
	HealthCheckURL   *string
	AutoConnect      bool
	// Pinning turns definition pinning on or off for the new server (nil: on, the default for every server
	// registered from now on); PinNewTools is its pin_new_tools setting ("" : serve).
	Pinning     *bool
	PinNewTools string
	// Filter is the server's tool filter (nil: none).
	Filter *persistence.ToolFilter
	// CredentialMode is persistence.CredentialShared ("" too) or CredentialPerUser; UserCredential says where a
	// per_user server's callers' secrets go.
	CredentialMode string
	UserCredential *persistence.UserCredentialSlot
	// Actor and IP identify who asked, for the audit log.
	Actor string
	IP    string
}

// Search strategies.
const (
	StrategyHierarchical = toolsearch.StrategyHierarchical
	StrategyDirect       = toolsearch.StrategyDirect
)

// SearchRequest is a validated POST /api/v1/search (and search_aggregated_tools).
type SearchRequest struct {
	Query           string
	ItemType        string // "tool" (default) or "skill"
	IncludeExternal bool
	ServerFilter    []string // server names
	Limit           int
	SkillThreshold  float64
	ToolThreshold   float64
	IncludeSchemas  bool
	Strategy        string
	// Profile is the profile the caller asked for ("" none); Gateway.Search turns it and the caller's Within into
	// Scope.
	Profile string `json:",omitempty"`
	// Scope restricts the answer to some profiles' tools (nil: every tool; see RouteTable.ScopeFor).
	Scope routing.Scope `json:",omitempty"`
	// Visible, when set, is the access policy's view of the caller (Gateway.Search sets it): the search answers,
	// ranks and counts only the tools of rt it accepts, choosing its candidates among them, so that an answer
	// holds up to Limit tools the caller may see and no count includes a hidden one. It may be called from more
	// than one goroutine.
	Visible func(rt *routing.RouteTable, e *routing.ToolEntry) bool `json:"-"`
}

// SearchHit is one tool in a search answer.
type SearchHit struct {
	Tool     *routing.ToolEntry
	Score    float64
	Server   routing.ServerEntry
	Lexical  float64
	Semantic float64
}

// MatchedSkill is a skill the query matched.
type MatchedSkill = toolsearch.MatchedSkill

// SearchResponse is the ranked answer.
type SearchResponse struct {
	Tools         []SearchHit
	MatchedSkills []MatchedSkill
	StrategyUsed  string
	// Fallback is set by the hierarchical strategy when its skill signal did not inform the answer: the query
	// matched no skill, or no tool answered has a matched skill in its profile (the skills its own text is
	// closest to). The answer is then exactly direct's.
	Fallback        bool
	ServersSearched int
	ToolsSearched   int
}
