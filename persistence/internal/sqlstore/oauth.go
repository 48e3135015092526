package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// OAuthQueries is a dialect's SQL of the callers' OAuth flows and the registered clients.
type OAuthQueries struct {
	// LockSubject (subject) serialises the creations of one subject's flows until the transaction ends; empty when
	// the dialect's write transactions are serial already.
	LockSubject string
	// DeleteExpiredFlows (now).
	DeleteExpiredFlows string
	// CountFlows (now) counts the flows pending; CountSubjectFlows (subject, now) one subject's.
	CountFlows, CountSubjectFlows string
	// InsertFlow (state, server id, subject, data, created_at, expires_at).
	InsertFlow string
	// ReturnFlow (state, code or NULL, iss, error, now) records the return of a pending flow not returned yet.
	ReturnFlow string
	// TakeFlow (state, subject, now) deletes the subject's returned, unexpired flow and returns state, server id,
	// subject, data, created_at, expires_at, code, iss and error.
	TakeFlow string
	// FlowPending (state, subject, now) selects whether the subject has that unexpired flow (a boolean).
	FlowPending string

	// GetClient (server id, issuer) selects server id, issuer, redirect url, data and created_at.
	GetClient string
	// UpsertClient (server id, issuer, redirect url, data, now) creates or replaces the client.
	UpsertClient string
	// DeleteClient (server id, issuer).
	DeleteClient string

	// ListFlows (now) selects the pending flows' state, server id, subject, data, created_at, expires_at,
	// returned, code, iss and error, oldest first.
	ListFlows string
	// ResealFlow (state, data or NULL, code or NULL, now) replaces the given data and code of a pending flow.
	ResealFlow string
	// ListClients selects every client's server id, issuer, redirect url, data and created_at.
	ListClients string
	// ResealClient (server id, issuer, data) replaces a client's data.
	ResealClient string
}

// OAuth implements persistence.OAuthStore over a Dialect, storing data and codes as given (the encrypting store
// above seals them before they get here).
type OAuth struct {
	d *Dialect
	q OAuthQueries
}

// NewOAuth returns the OAuth flow methods over d with the dialect's SQL q.
func NewOAuth(d *Dialect, q OAuthQueries) OAuth { return OAuth{d: d, q: q} }

func checkState(state string) error {
	if state == "" || len(state) > persistence.MaxOAuthStateBytes {
		return storeutil.NotFound("OAuth flow", "")
	}
	return nil
}

// CreateOAuthFlow stores a new flow after deleting the expired ones, within the bounds.
func (o OAuth) CreateOAuthFlow(ctx context.Context, f persistence.OAuthFlow, perSubject, total int, now time.Time) (err error) {
	d := o.d
	defer d.wrap(&err, "create OAuth flow of %q on server %q", f.Subject, f.ServerID)
	uid, err := storeutil.ServerID(f.ServerID)
	if err != nil {
		return err
	}
	switch {
	case f.State == "" || len(f.State) > persistence.MaxOAuthStateBytes:
		return fmt.Errorf("OAuth state must be 1 to %d bytes, got %d", persistence.MaxOAuthStateBytes, len(f.State))
	case len(f.Data) == 0:
		return errors.New("empty flow data")
	case !f.ExpiresAt.After(now):
		return errors.New("the flow expires before it starts")
	}
	if err := checkSubject(f.Subject); err != nil {
		return err
	}
	now = storeutil.NormTime(now)
	return d.WriteTx(ctx, func(tx Tx) error {
		if err := d.serverExists(ctx, tx, uid, f.ServerID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, o.q.DeleteExpiredFlows, d.Time(now)); err != nil {
			return fmt.Errorf("delete expired flows: %w", err)
		}
		if o.q.LockSubject != "" {
			if _, err := tx.Exec(ctx, o.q.LockSubject, f.Subject); err != nil {
				return fmt.Errorf("lock subject: %w", err)
			}
		}
		var n int
		if err := tx.QueryRow(ctx, o.q.CountSubjectFlows, f.Subject, d.Time(now)).Scan(&n); err != nil {
			return err
		}
		if perSubject > 0 && n >= perSubject {
			return fmt.Errorf("%w: %d pending for the subject, at most %d", persistence.ErrOAuthFlowLimit, n, perSubject)
		}
		if total > 0 {
			if err := tx.QueryRow(ctx, o.q.CountFlows, d.Time(now)).Scan(&n); err != nil {
				return err
			}
			if n >= total {
				return fmt.Errorf("%w: %d pending, at most %d", persistence.ErrOAuthFlowLimit, n, total)
			}
		}
		_, err := tx.Exec(ctx, o.q.InsertFlow, f.State, uid, f.Subject, d.JSON(f.Data), d.Time(now),
			d.Time(storeutil.NormTime(f.ExpiresAt)))
		return err
	})
}

// ReturnOAuthFlow records the authorization server's answer of a pending flow, once.
func (o OAuth) ReturnOAuthFlow(ctx context.Context, state string, code []byte, iss, errText string, now time.Time) (err error) {
	d := o.d
	defer d.wrap(&err, "return OAuth flow")
	if err := checkState(state); err != nil {
		return err
	}
	if len(iss) > persistence.MaxOAuthIssuerBytes {
		return storeutil.NotFound("OAuth flow", "")
	}
	if len(errText) > persistence.MaxOAuthErrorBytes {
		errText = errText[:persistence.MaxOAuthErrorBytes]
	}
	var codeArg any
	if len(code) > 0 {
		codeArg = d.JSON(code)
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		return execOne(ctx, tx, "OAuth flow", "", o.q.ReturnFlow, state, codeArg, iss, errText, d.Time(storeutil.NormTime(now)))
	})
}

// TakeOAuthFlow removes and returns the subject's returned flow.
func (o OAuth) TakeOAuthFlow(ctx context.Context, state, subject string, now time.Time) (out persistence.OAuthFlow, err error) {
	d := o.d
	defer d.wrap(&err, "take OAuth flow")
	if err := checkState(state); err != nil {
		return out, err
	}
	if err := checkSubject(subject); err != nil {
		return out, storeutil.NotFound("OAuth flow", "")
	}
	at := d.Time(storeutil.NormTime(now))
	err = d.WriteTx(ctx, func(tx Tx) error {
		var data, code []byte
		err := tx.QueryRow(ctx, o.q.TakeFlow, state, subject, at).Scan(&out.State, &out.ServerID, &out.Subject, &data,
			Time(&out.CreatedAt), Time(&out.ExpiresAt), &code, &out.Iss, &out.Error)
		if errors.Is(err, sql.ErrNoRows) {
			var pending bool
			if err := tx.QueryRow(ctx, o.q.FlowPending, state, subject, at).Scan(&pending); err != nil {
				return err
			}
			if pending {
				return persistence.ErrOAuthFlowPending
			}
			return storeutil.NotFound("OAuth flow", "")
		}
		if err != nil {
			return err
		}
		out.Data, out.Code, out.Returned = data, code, true
		return nil
	})
	if err != nil {
		return persistence.OAuthFlow{}, err
	}
	return out, nil
}

// CountOAuthFlows counts the pending flows.
func (o OAuth) CountOAuthFlows(ctx context.Context, now time.Time) (n int, err error) {
	d := o.d
	defer d.wrap(&err, "count OAuth flows")
	err = d.ReadTx(ctx, func(tx Tx) error {
		return tx.QueryRow(ctx, o.q.CountFlows, d.Time(storeutil.NormTime(now))).Scan(&n)
	})
	return n, err
}

// GetOAuthClient returns the registered client of (server, issuer).
func (o OAuth) GetOAuthClient(ctx context.Context, serverID, issuer string) (out persistence.OAuthClient, err error) {
	d := o.d
	defer d.wrap(&err, "get OAuth client of server %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return out, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		var data []byte
		err := tx.QueryRow(ctx, o.q.GetClient, uid, issuer).Scan(&out.ServerID, &out.Issuer, &out.RedirectURL, &data, Time(&out.CreatedAt))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("OAuth client", issuer)
		}
		out.Data = data
		return err
	})
	if err != nil {
		return persistence.OAuthClient{}, err
	}
	return out, nil
}

// PutOAuthClient creates or replaces the client of (server, issuer).
func (o OAuth) PutOAuthClient(ctx context.Context, c persistence.OAuthClient) (err error) {
	d := o.d
	defer d.wrap(&err, "put OAuth client of server %q", c.ServerID)
	uid, err := storeutil.ServerID(c.ServerID)
	if err != nil {
		return err
	}
	switch {
	case c.Issuer == "" || len(c.Issuer) > persistence.MaxOAuthIssuerBytes:
		return fmt.Errorf("OAuth issuer must be 1 to %d bytes, got %d", persistence.MaxOAuthIssuerBytes, len(c.Issuer))
	case len(c.RedirectURL) > persistence.MaxOAuthIssuerBytes:
		return fmt.Errorf("redirect URL longer than %d bytes", persistence.MaxOAuthIssuerBytes)
	case len(c.Data) == 0:
		return errors.New("empty client data")
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		if err := d.serverExists(ctx, tx, uid, c.ServerID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, o.q.UpsertClient, uid, c.Issuer, c.RedirectURL, d.JSON(c.Data), d.Time(storeutil.Now()))
		return err
	})
}

// DeleteOAuthClient removes the client of (server, issuer).
func (o OAuth) DeleteOAuthClient(ctx context.Context, serverID, issuer string) (err error) {
	d := o.d
	defer d.wrap(&err, "delete OAuth client of server %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		return execOne(ctx, tx, "OAuth client", issuer, o.q.DeleteClient, uid, issuer)
	})
}

// ListOAuthFlows returns the pending flows as stored.
func (o OAuth) ListOAuthFlows(ctx context.Context, now time.Time) (out []persistence.OAuthFlow, err error) {
	d := o.d
	defer d.wrap(&err, "list OAuth flows")
	err = d.ReadTx(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, o.q.ListFlows, d.Time(storeutil.NormTime(now)))
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.OAuthFlow, error) {
			var f persistence.OAuthFlow
			var data, code []byte
			err := row.Scan(&f.State, &f.ServerID, &f.Subject, &data, Time(&f.CreatedAt), Time(&f.ExpiresAt),
				&f.Returned, &code, &f.Iss, &f.Error)
			f.Data, f.Code = data, code
			return f, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ResealOAuthFlow replaces the stored data and code (those given) of a pending flow.
func (o OAuth) ResealOAuthFlow(ctx context.Context, state string, data, code []byte, now time.Time) (err error) {
	d := o.d
	defer d.wrap(&err, "reseal OAuth flow")
	if err := checkState(state); err != nil {
		return err
	}
	var dataArg, codeArg any
	if len(data) > 0 {
		dataArg = d.JSON(data)
	}
	if len(code) > 0 {
		codeArg = d.JSON(code)
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		return execOne(ctx, tx, "OAuth flow", "", o.q.ResealFlow, state, dataArg, codeArg, d.Time(storeutil.NormTime(now)))
	})
}

// ListOAuthClients returns every registered client as stored.
func (o OAuth) ListOAuthClients(ctx context.Context) (out []persistence.OAuthClient, err error) {
	d := o.d
	defer d.wrap(&err, "list OAuth clients")
	err = d.ReadTx(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, o.q.ListClients)
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.OAuthClient, error) {
			var c persistence.OAuthClient
			var data []byte
			err := row.Scan(&c.ServerID, &c.Issuer, &c.RedirectURL, &data, Time(&c.CreatedAt))
			c.Data = data
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ResealOAuthClient replaces the stored data of a client.
func (o OAuth) ResealOAuthClient(ctx context.Context, serverID, issuer string, data []byte) (err error) {
	d := o.d
	defer d.wrap(&err, "reseal OAuth client of server %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("empty client data")
	}
	return d.WriteTx(ctx, func(tx Tx) error {
		return execOne(ctx, tx, "OAuth client", issuer, o.q.ResealClient, uid, issuer, d.JSON(data))
	})
}
