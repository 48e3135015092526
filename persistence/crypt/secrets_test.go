package crypt

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// TestUserSecretsAtRest: a caller's secret is stored only as an envelope bound to its server and subject (a copy on
// another caller's row does not open), a plain value is refused, and RotateSecrets re-seals every secret under the
// new key.
func TestUserSecretsAtRest(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			inner := st.open(t)
			oldKey, newKey := NewKey(), NewKey()
			old := Wrap(inner, mustRing(t, oldKey, nil))
			srv := create(t, old, "per", config("x"))
			for _, sub := range []string{"token:alice", "oauth:bob"} {
				if _, _, err := old.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: sub, Secret: []byte(secret + sub)}); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := inner.GetUserSecret(ctx, srv.ID, "token:alice")
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(raw.Secret, []byte(secret)) {
				t.Fatalf("secret stored in the clear: %s", raw.Secret)
			}
			if kid, sealed := SealedKeyID(raw.Secret); !sealed || kid != KeyID(oldKey) {
				t.Fatalf("stored %s: sealed %v under %s", raw.Secret, sealed, kid)
			}
			got, err := old.GetUserSecret(ctx, srv.ID, "token:alice")
			if err != nil || string(got.Secret) != secret+"token:alice" {
				t.Fatalf("read back %q, %v", got.Secret, err)
			}
			// alice's envelope copied onto bob's row does not open as bob's.
			if _, _, err := inner.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "oauth:bob", Secret: raw.Secret}); err != nil {
				t.Fatal(err)
			}
			if _, err := old.GetUserSecret(ctx, srv.ID, "oauth:bob"); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("copied envelope: %v, want ErrAuthentication", err)
			}
			if _, _, err := inner.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "oauth:bob", Secret: []byte(`"plain"`)}); err != nil {
				t.Fatal(err)
			}
			if _, err := old.GetUserSecret(ctx, srv.ID, "oauth:bob"); !errors.Is(err, ErrMalformed) {
				t.Fatalf("plain secret: %v, want ErrMalformed", err)
			}
			if err := inner.DeleteUserSecret(ctx, srv.ID, "oauth:bob"); err != nil {
				t.Fatal(err)
			}

			s := Wrap(inner, mustRing(t, newKey, oldKey))
			if n, err := PendingSecrets(ctx, s); err != nil || n != 1 {
				t.Fatalf("PendingSecrets = %d, %v; want 1", n, err)
			}
			if n, err := RotateSecrets(ctx, s); err != nil || n != 1 {
				t.Fatalf("RotateSecrets = %d, %v; want 1", n, err)
			}
			if n, err := RotateSecrets(ctx, s); err != nil || n != 0 {
				t.Fatalf("second RotateSecrets = %d, %v; want 0", n, err)
			}
			only := Wrap(inner, mustRing(t, newKey, nil))
			if got, err := only.GetUserSecret(ctx, srv.ID, "token:alice"); err != nil || string(got.Secret) != secret+"token:alice" {
				t.Fatalf("with the new key alone: %q, %v", got.Secret, err)
			}
			if _, err := RotateSecrets(ctx, inner); err == nil {
				t.Fatal("RotateSecrets on an unwrapped store succeeded")
			}
		})
	}
}
