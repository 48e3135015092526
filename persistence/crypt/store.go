package crypt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Store seals connection_config on the way into an inner store and opens it on the way out. Every other method
// is the inner store's (embedded).
type Store struct {
	persistence.Store
	ring *Keyring
}

// Wrap returns inner with connection_config encrypted at rest under ring.
func Wrap(inner persistence.Store, ring *Keyring) persistence.Store {
	return &Store{Store: inner, ring: ring}
}

// Inner is the wrapped store, which reads and writes envelopes as they are stored.
func (s *Store) Inner() persistence.Store { return s.Store }

// Keyring is the keys the store seals and opens with.
func (s *Store) Keyring() *Keyring { return s.ring }

// canonicalID is the id the store will keep (a UUID's canonical spelling), so the AAD matches what reads see.
func canonicalID(id string) string {
	if c, ok := storeutil.ParseID(id); ok {
		return c
	}
	return id
}

// CreateServer seals srv.ConnectionConfig under the server's id, generating the id first when it is empty. srv
// keeps its plaintext config.
func (s *Store) CreateServer(ctx context.Context, srv *persistence.Server, max int) error {
	plain := srv.ConnectionConfig
	if plain == nil {
		return s.Store.CreateServer(ctx, srv, max) // the inner store refuses it with its own message
	}
	if !json.Valid(plain) {
		return fmt.Errorf("crypt: create server %q: connection_config is not valid JSON", srv.Name)
	}
	origID := srv.ID
	id, err := storeutil.CreateID(srv.ID) // the id the inner store keeps, known before the insert for the AAD
	if err != nil {
		return fmt.Errorf("crypt: create server %q: %w", srv.Name, err)
	}
	sealed, err := s.ring.Seal(id, plain)
	if err != nil {
		return err
	}
	srv.ID, srv.ConnectionConfig = id, sealed
	err = s.Store.CreateServer(ctx, srv, max)
	srv.ConnectionConfig = plain
	if err != nil {
		srv.ID = origID
	}
	return err
}

// CreateServerIdempotent seals srv.ConnectionConfig as CreateServer does; a replay hands back the stored server
// with its config opened.
func (s *Store) CreateServerIdempotent(ctx context.Context, srv *persistence.Server, max int, k persistence.IdempotencyKey) (bool, error) {
	plain := srv.ConnectionConfig
	if plain == nil {
		return s.Store.CreateServerIdempotent(ctx, srv, max, k) // the inner store refuses it with its own message
	}
	if !json.Valid(plain) {
		return false, fmt.Errorf("crypt: create server %q: connection_config is not valid JSON", srv.Name)
	}
	in := *srv
	id, err := storeutil.CreateID(srv.ID)
	if err != nil {
		return false, fmt.Errorf("crypt: create server %q: %w", srv.Name, err)
	}
	sealed, err := s.ring.Seal(id, plain)
	if err != nil {
		return false, err
	}
	in.ID, in.ConnectionConfig = id, sealed
	replayed, err := s.Store.CreateServerIdempotent(ctx, &in, max, k)
	if err != nil {
		return false, err
	}
	if !replayed {
		in.ConnectionConfig = plain
		*srv = in
		return false, nil
	}
	got, err := s.open(in, nil)
	if err != nil {
		return false, fmt.Errorf("crypt: create server %q: %w", in.Name, err)
	}
	*srv = got
	return true, nil
}

func (s *Store) open(v persistence.Server, err error) (persistence.Server, error) {
	if err != nil {
		return v, err
	}
	plain, err := s.ring.Open(v.ID, v.ConnectionConfig)
	if err != nil {
		return persistence.Server{}, err
	}
	v.ConnectionConfig = plain
	return v, nil
}

// GetServer returns the server with its connection_config opened.
func (s *Store) GetServer(ctx context.Context, id string) (persistence.Server, error) {
	return s.open(s.Store.GetServer(ctx, id))
}

// GetServerByName returns the server with its connection_config opened.
func (s *Store) GetServerByName(ctx context.Context, name string) (persistence.Server, error) {
	return s.open(s.Store.GetServerByName(ctx, name))
}

// ListServers returns the page with every connection_config opened; one that cannot be opened fails the list.
func (s *Store) ListServers(ctx context.Context, f persistence.ListServersFilter) ([]persistence.Server, int, error) {
	list, total, err := s.Store.ListServers(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	for i := range list {
		if list[i], err = s.open(list[i], nil); err != nil {
			return nil, 0, err
		}
	}
	return list, total, nil
}

// UpdateServer seals a new connection_config and returns the row with its config opened.
func (s *Store) UpdateServer(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error) {
	if p.ConnectionConfig != nil {
		if !json.Valid(p.ConnectionConfig) {
			return persistence.Server{}, fmt.Errorf("crypt: update server %q: connection_config is not valid JSON", id)
		}
		sealed, err := s.ring.Seal(canonicalID(id), p.ConnectionConfig)
		if err != nil {
			return persistence.Server{}, err
		}
		p.ConnectionConfig = sealed
	}
	return s.open(s.Store.UpdateServer(ctx, id, p))
}

// SetToolPolicy returns the new row with its connection_config opened.
func (s *Store) SetToolPolicy(ctx context.Context, id string, p persistence.ToolPolicyPatch) (persistence.Server, error) {
	return s.open(s.Store.SetToolPolicy(ctx, id, p))
}

// unwrap returns the store a wrapped store decorates, or an error for a store that Wrap did not return.
func unwrap(store persistence.Store) (*Store, error) {
	w, ok := store.(*Store)
	if !ok {
		return nil, errors.New("crypt: the store is not encrypted (use crypt.Wrap)")
	}
	return w, nil
}
