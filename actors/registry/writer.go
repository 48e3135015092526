package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
)

// ServerStore is what a Writer writes. persistence.Store satisfies it.
type ServerStore interface {
	CreateServer(ctx context.Context, s *persistence.Server, max int) error
	CreateServerIdempotent(ctx context.Context, s *persistence.Server, max int, k persistence.IdempotencyKey) (bool, error)
	GetServer(ctx context.Context, id string) (persistence.Server, error)
	UpdateServer(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error)
	DeleteServer(ctx context.Context, id string) error
}

// Writer carries out registrations, updates and deletes in the store. It holds no state; each method is one
// sequence of store operations, run off the registry actor's mailbox.
type Writer struct {
	Store ServerStore
	// MaxServers bounds the registrations, across every process on the store (0: no bound).
	MaxServers int
}

// NewServer is the row a validated registration becomes: DISCONNECTED, pinning on unless asked otherwise, new
// tools of a pinned server served until the admin says otherwise.
func NewServer(req gateway.RegisterRequest) persistence.Server {
	s := persistence.Server{
		Name: req.Name, Description: req.Description, TransportType: req.TransportType,
		ConnectionConfig: req.ConnectionConfig, HealthCheckURL: req.HealthCheckURL,
		AutoConnect: req.AutoConnect, Status: persistence.StatusDisconnected,
		Policy:         persistence.ToolPolicy{Pinning: req.Pinning == nil || *req.Pinning, PinNewTools: req.PinNewTools},
		CredentialMode: req.CredentialMode, UserCredential: req.UserCredential,
	}
	if s.Policy.PinNewTools == "" {
		s.Policy.PinNewTools = persistence.PinNewServe
	}
	if req.Filter != nil {
		s.Policy.Filter = *req.Filter
	}
	return s
}

// Create stores a new registration (under key when not nil); replayed: the store already held it under key, and
// srv is that server as stored now. A full registry is gateway.ErrMaxServers (wrapping the store's
// ErrLimitReached).
func (w *Writer) Create(ctx context.Context, req gateway.RegisterRequest, key *persistence.IdempotencyKey) (srv persistence.Server, replayed bool, err error) {
	srv = NewServer(req)
	if key != nil {
		replayed, err = w.Store.CreateServerIdempotent(ctx, &srv, w.MaxServers, *key)
	} else {
		err = w.Store.CreateServer(ctx, &srv, w.MaxServers)
	}
	if errors.Is(err, persistence.ErrLimitReached) {
		err = fmt.Errorf("%w: %w", gateway.ErrMaxServers, err)
	}
	return srv, replayed, err
}

// Update applies a patch and returns the row before and after it.
func (w *Writer) Update(ctx context.Context, id string, p persistence.ServerPatch) (old, updated persistence.Server, err error) {
	if old, err = w.Store.GetServer(ctx, id); err != nil {
		return old, updated, err
	}
	updated, err = w.Store.UpdateServer(ctx, id, p)
	return old, updated, err
}

// Delete removes a server with its tools and history, after deactivate has let its actor go (closing its session
// and child process, releasing its lease) wherever it lives; name is the server's name when it was found. A
// deactivation that fails is reported to warn (the delete goes on: the lease and the actor go with the row).
func (w *Writer) Delete(ctx context.Context, id string, deactivate func(ctx context.Context, id string) error, warn func(error)) (name string, err error) {
	s, err := w.Store.GetServer(ctx, id)
	if err != nil {
		return "", err
	}
	if err := deactivate(ctx, id); err != nil {
		warn(err)
	}
	return s.Name, w.Store.DeleteServer(ctx, id)
}
