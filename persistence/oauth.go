package persistence

import (
	"context"
	"errors"
	"time"
)

// OAuthFlow is one caller's OAuth authorization code flow to a per_user server's backend, kept in the store between
// its start and its completion so that the authorization server's redirect and the completion may be served by any
// node (internal/backendauth). State (the authorization request's state, random) is the key. Data is the flow's
// private part (the PKCE verifier, the client, the endpoints) and Code the authorization code that came back: both
// plaintext above the encrypting store (persistence/crypt) and sealed envelopes below it.
type OAuthFlow struct {
	State     string
	ServerID  string
	Subject   string
	Data      []byte
	CreatedAt time.Time
	ExpiresAt time.Time
	// Returned is set once the authorization server sent the browser back (ReturnOAuthFlow): with Code and Iss,
	// or with Error (the authorization server's error answer).
	Returned bool
	Code     []byte
	Iss      string
	Error    string
}

// OAuthClient is a client the aggregator registered dynamically (RFC 7591) at a backend's authorization server for
// a server, reused by every caller's flow of a daemon whose redirect URI it was registered with. RedirectURL is the
// registering daemon's; Data (client id, secret, token endpoint auth method, and every redirect URI it lists: the
// nodes of a cluster with per-node console URLs) is plaintext above the encrypting store and sealed below it.
type OAuthClient struct {
	ServerID    string
	Issuer      string
	RedirectURL string
	Data        []byte
	CreatedAt   time.Time
}

// Bounds of the stored flows and clients (the columns' limits, in both dialects).
const (
	MaxOAuthStateBytes  = 128
	MaxOAuthIssuerBytes = 2048
	MaxOAuthErrorBytes  = 1024
)

var (
	// ErrOAuthFlowLimit means CreateOAuthFlow found the subject, or the store, at its limit of pending flows;
	// nothing was written.
	ErrOAuthFlowLimit = errors.New("pending OAuth flow limit reached")
	// ErrOAuthFlowPending means TakeOAuthFlow found the subject's flow, but the authorization server has not sent
	// the browser back yet; the flow is left as it was.
	ErrOAuthFlowPending = errors.New("the OAuth flow has not come back from the authorization server")
)

// OAuthStore keeps the callers' pending OAuth flows and the registered OAuth clients. Both go with their server
// (ON DELETE CASCADE). Every method that reads a flow takes the time now: a flow whose ExpiresAt is not after now
// is gone for it.
type OAuthStore interface {
	// CreateOAuthFlow stores a new flow, first deleting the expired ones; ErrOAuthFlowLimit when f.Subject already
	// has perSubject pending flows or the store total (0: no bound), ErrAlreadyExists when the state is taken, and
	// ErrNotFound when the server is unknown.
	CreateOAuthFlow(ctx context.Context, f OAuthFlow, perSubject, total int, now time.Time) error
	// ReturnOAuthFlow records what the authorization server sent back for the flow of state (code and iss, or
	// errText), once: ErrNotFound when no such flow is pending (unknown, expired, or returned already).
	ReturnOAuthFlow(ctx context.Context, state string, code []byte, iss, errText string, now time.Time) error
	// TakeOAuthFlow removes and returns subject's returned flow of state: it is taken once. ErrNotFound when the
	// state is unknown, expired, or another subject's (which leaves it to its subject); ErrOAuthFlowPending when
	// it has not returned yet (left as it was).
	TakeOAuthFlow(ctx context.Context, state, subject string, now time.Time) (OAuthFlow, error)
	// CountOAuthFlows counts the flows pending at now.
	CountOAuthFlows(ctx context.Context, now time.Time) (int, error)

	// GetOAuthClient returns the client registered for (server, issuer); ErrNotFound when none.
	GetOAuthClient(ctx context.Context, serverID, issuer string) (OAuthClient, error)
	// PutOAuthClient creates or replaces the client of (c.ServerID, c.Issuer); ErrNotFound when the server is
	// unknown.
	PutOAuthClient(ctx context.Context, c OAuthClient) error
	// DeleteOAuthClient removes the client of (server, issuer); ErrNotFound when none.
	DeleteOAuthClient(ctx context.Context, serverID, issuer string) error

	// The key rotation (persistence/crypt, `aggregator rotate-key`) re-seals the stored flows and clients with
	// these: it reads and writes Data and Code as they are stored.

	// ListOAuthFlows returns every flow pending at now (returned or not), oldest first.
	ListOAuthFlows(ctx context.Context, now time.Time) ([]OAuthFlow, error)
	// ResealOAuthFlow replaces the data and the code of the flow of state pending at now, each only when given
	// (nil keeps the stored one); ErrNotFound when no such flow is pending.
	ResealOAuthFlow(ctx context.Context, state string, data, code []byte, now time.Time) error
	// ListOAuthClients returns every registered client.
	ListOAuthClients(ctx context.Context) ([]OAuthClient, error)
	// ResealOAuthClient replaces the data of the client of (server, issuer), keeping the rest; ErrNotFound when
	// none.
	ResealOAuthClient(ctx context.Context, serverID, issuer string, data []byte) error
}
