package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Credentials implements persistence.CredentialStore over a Dialect: the callers' own secrets of per_user servers,
// stored as given (the encrypting store above seals them before they get here).
type Credentials struct {
	d *Dialect
}

// NewCredentials returns the credential methods over d.
func NewCredentials(d *Dialect) Credentials { return Credentials{d: d} }

// checkSubject refuses an empty or too long subject before it reaches the database.
func checkSubject(subject string) error {
	if subject == "" || len(subject) > persistence.MaxSubjectLength {
		return fmt.Errorf("credential subject must be 1 to %d bytes, got %d", persistence.MaxSubjectLength, len(subject))
	}
	return nil
}

// PutUserSecret creates or replaces one secret, in a write transaction that checks the server first.
func (c Credentials) PutUserSecret(ctx context.Context, s persistence.UserSecret) (out persistence.UserSecret, created bool, err error) {
	d := c.d
	defer d.wrap(&err, "put credential of %q on server %q", s.Subject, s.ServerID)
	uid, err := storeutil.ServerID(s.ServerID)
	if err != nil {
		return out, false, err
	}
	if err := checkSubject(s.Subject); err != nil {
		return out, false, err
	}
	if len(s.Secret) == 0 {
		return out, false, errors.New("empty secret")
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		if err := d.serverExists(ctx, tx, uid, s.ServerID); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, d.Q.SecretExists, uid, s.Subject).Scan(&exists); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, d.Q.UpsertSecret, uid, s.Subject, d.JSON(s.Secret), d.Time(storeutil.Now())); err != nil {
			return err
		}
		created = !exists
		out, err = scanSecret(tx.QueryRow(ctx, d.Q.GetSecret, uid, s.Subject))
		out.Secret = nil
		return err
	})
	if err != nil {
		return persistence.UserSecret{}, false, err
	}
	return out, created, nil
}

func scanSecret(row Row) (persistence.UserSecret, error) {
	var s persistence.UserSecret
	var secret []byte
	err := row.Scan(&s.ServerID, &s.Subject, &secret, Time(&s.CreatedAt), Time(&s.UpdatedAt))
	s.Secret = secret
	return s, err
}

// GetUserSecret returns one secret as stored.
func (c Credentials) GetUserSecret(ctx context.Context, serverID, subject string) (out persistence.UserSecret, err error) {
	d := c.d
	defer d.wrap(&err, "get credential of %q on server %q", subject, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return out, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		out, err = scanSecret(tx.QueryRow(ctx, d.Q.GetSecret, uid, subject))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("credential", subject)
		}
		return err
	})
	if err != nil {
		return persistence.UserSecret{}, err
	}
	return out, nil
}

// ListUserSecrets returns the rows of one server, or of all, without their secrets.
func (c Credentials) ListUserSecrets(ctx context.Context, serverID string) (out []persistence.UserSecret, err error) {
	d := c.d
	defer d.wrap(&err, "list credentials")
	sid, err := storeutil.OptionalServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		if sid != "" {
			if err := d.serverExists(ctx, tx, sid, serverID); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, d.Q.ListSecrets, nullIfEmpty(sid))
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.UserSecret, error) {
			var s persistence.UserSecret
			err := row.Scan(&s.ServerID, &s.Subject, Time(&s.CreatedAt), Time(&s.UpdatedAt))
			return s, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteUserSecret removes one secret.
func (c Credentials) DeleteUserSecret(ctx context.Context, serverID, subject string) (err error) {
	d := c.d
	defer d.wrap(&err, "delete credential of %q on server %q", subject, serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		return execOne(ctx, tx, "credential", subject, d.Q.DeleteSecret, uid, subject)
	})
}
