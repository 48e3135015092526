package crypt

import (
	"context"
	"errors"

	"github.com/mcpgw/aggregator/persistence"
)

// The callers' own secrets of per_user servers are sealed like connection_config, bound to their server and
// subject (a sealed secret copied onto another caller's row does not open), and never stored plain.

// PutUserSecret seals v.Secret under (server, subject) before it reaches the inner store.
func (s *Store) PutUserSecret(ctx context.Context, v persistence.UserSecret) (persistence.UserSecret, bool, error) {
	if len(v.Secret) == 0 {
		return persistence.UserSecret{}, false, errors.New("crypt: put credential: empty secret")
	}
	id := canonicalID(v.ServerID)
	sealed, err := s.ring.SealSecret(id, v.Subject, v.Secret)
	if err != nil {
		return persistence.UserSecret{}, false, err
	}
	v.ServerID, v.Secret = id, sealed
	return s.Store.PutUserSecret(ctx, v)
}

// GetUserSecret returns the secret opened.
func (s *Store) GetUserSecret(ctx context.Context, serverID, subject string) (persistence.UserSecret, error) {
	v, err := s.Store.GetUserSecret(ctx, serverID, subject)
	if err != nil {
		return v, err
	}
	plain, err := s.ring.OpenSecret(v.ServerID, v.Subject, v.Secret)
	if err != nil {
		return persistence.UserSecret{}, err
	}
	v.Secret = plain
	return v, nil
}
