package crypt

import (
	"context"
	"errors"
	"fmt"

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

// pendingSecrets counts the secrets not sealed under the primary key.
func pendingSecrets(ctx context.Context, w *Store) (int, error) {
	list, err := w.Store.ListUserSecrets(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range list {
		got, err := w.Store.GetUserSecret(ctx, v.ServerID, v.Subject)
		if err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				continue
			}
			return 0, err
		}
		if kid, _ := SealedKeyID(got.Secret); kid != w.ring.PrimaryID() {
			n++
		}
	}
	return n, nil
}

// rotateSecrets re-seals every secret not under the primary key (one write each, like RotateKeys) and returns
// how many it re-sealed.
func rotateSecrets(ctx context.Context, w *Store) (int, error) {
	list, err := w.Store.ListUserSecrets(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("crypt: rotate: list credentials: %w", err)
	}
	n := 0
	for _, v := range list {
		got, err := w.Store.GetUserSecret(ctx, v.ServerID, v.Subject)
		if errors.Is(err, persistence.ErrNotFound) {
			continue // revoked meanwhile
		}
		if err != nil {
			return n, fmt.Errorf("crypt: rotate credential of %q on server %s: %w", v.Subject, v.ServerID, err)
		}
		if kid, _ := SealedKeyID(got.Secret); kid == w.ring.PrimaryID() {
			continue
		}
		plain, err := w.ring.OpenSecret(got.ServerID, got.Subject, got.Secret)
		if err != nil {
			return n, err
		}
		sealed, err := w.ring.SealSecret(got.ServerID, got.Subject, plain)
		if err != nil {
			return n, err
		}
		got.Secret = sealed
		if _, _, err := w.Store.PutUserSecret(ctx, got); err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				continue // server removed meanwhile
			}
			return n, fmt.Errorf("crypt: rotate credential of %q on server %s: %w", v.Subject, v.ServerID, err)
		}
		n++
	}
	return n, nil
}

// RotateSecrets re-seals every caller's secret under the primary key, as RotateKeys does connection_config; n is
// the number re-sealed. store must come from Wrap.
func RotateSecrets(ctx context.Context, store persistence.Store) (int, error) {
	w, err := unwrap(store)
	if err != nil {
		return 0, err
	}
	return rotateSecrets(ctx, w)
}

// PendingSecrets counts the callers' secrets not sealed under the primary key. store must come from Wrap.
func PendingSecrets(ctx context.Context, store persistence.Store) (int, error) {
	w, err := unwrap(store)
	if err != nil {
		return 0, err
	}
	return pendingSecrets(ctx, w)
}
