package persistence

import (
	"context"
	"time"
)

// Credential modes of a server (Server.CredentialMode).
const (
	// CredentialShared: every caller uses the server's one connection_config (the default).
	CredentialShared = "shared"
	// CredentialPerUser: each caller's calls run on a session of their own, with their own secret injected where
	// Server.UserCredential says.
	CredentialPerUser = "per_user"
)

// UserCredentialSlot says where a caller's own secret goes on a per_user server: into the stdio child's
// environment variable Env, or into the HTTP header Header (SSE, HTTP), after Prefix ("Bearer "). With OAuth (HTTP
// only) the backend is an OAuth protected resource: each caller's secret is the token grant the aggregator obtained
// for them (internal/backendauth), sent as Authorization: Bearer and refreshed by the aggregator.
type UserCredentialSlot struct {
	Env    string     `json:"env,omitempty"`
	Header string     `json:"header,omitempty"`
	Prefix string     `json:"prefix,omitempty"`
	OAuth  *OAuthSlot `json:"oauth,omitempty"`
}

// OAuthSlot configures the OAuth 2.1 authorization code flow the aggregator runs for each caller of a backend that
// answers 401 with MCP authorization metadata. ClientID names a client registered beforehand at the backend's
// authorization server (a public client: PKCE, no secret); empty registers one dynamically (RFC 7591). Scopes
// replace the scopes the backend's metadata advertises; empty asks for those. TokenExchange lets the aggregator
// exchange (RFC 8693) a caller's own access token of the organisation's issuer for a backend token at the backend's
// authorization server, when that server offers the grant, instead of asking the caller to authorize: the caller's
// token is then sent to that authorization server, which the admin thereby trusts.
type OAuthSlot struct {
	ClientID      string   `json:"client_id,omitempty"`
	Scopes        []string `json:"scopes,omitempty"`
	TokenExchange bool     `json:"token_exchange,omitempty"`
}

// Value is what the secret becomes where it is injected: Prefix then the secret.
func (s UserCredentialSlot) Value(secret string) string { return s.Prefix + secret }

// UserSecret is one caller's secret for one per_user server. Subject names the caller (gateway's
// CredentialSubject: "oauth:<sub>", "token:<name>"). Secret is the plaintext above the encrypting store
// (persistence/crypt) and the sealed envelope below it; lists leave it nil.
type UserSecret struct {
	ServerID  string
	Subject   string
	Secret    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MaxSubjectLength bounds a credential's subject (VARCHAR(512) in the schema).
const MaxSubjectLength = 512

// CredentialStore keeps the callers' own secrets of per_user servers, one per (server, subject). A secret goes
// with its server (ON DELETE CASCADE).
type CredentialStore interface {
	// PutUserSecret creates or replaces the secret of (s.ServerID, s.Subject) and returns the row as stored,
	// without the secret, with created true when it was new. An unknown server is ErrNotFound.
	PutUserSecret(ctx context.Context, s UserSecret) (stored UserSecret, created bool, err error)
	// GetUserSecret returns one secret; ErrNotFound when the subject has none on that server.
	GetUserSecret(ctx context.Context, serverID, subject string) (UserSecret, error)
	// ListUserSecrets returns the rows of a server (every server when serverID is empty), without their secrets,
	// ordered by server and subject; an unknown server is ErrNotFound.
	ListUserSecrets(ctx context.Context, serverID string) ([]UserSecret, error)
	// DeleteUserSecret removes one secret; ErrNotFound when there is none.
	DeleteUserSecret(ctx context.Context, serverID, subject string) error
}
