package crypt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// sealedValue is one sealed column of a row: the value as stored and the additional data it is bound to.
type sealedValue struct {
	ad     []byte
	stored []byte
}

// sealedRow is one stored row a rotation re-seals: every kind of sealed row (a server's connection_config, a
// caller's secret, a pending OAuth flow's data and code, a registered OAuth client) is listed as these, so that
// one loop (rotateRows) re-seals them all alike.
type sealedRow struct {
	// what names the row in errors.
	what string
	// values are the row's sealed columns, written together by write.
	values []sealedValue
	// plainOK: a value that is not an envelope (written before encryption) is read as it is and sealed by the
	// rotation; otherwise it is refused as malformed.
	plainOK bool
	// write stores the re-sealed values (in the order of values); persistence.ErrNotFound means the row went
	// meanwhile and is skipped.
	write func(ctx context.Context, sealed [][]byte) error
}

// current reports whether every value of the row is sealed under the primary key.
func (r *Keyring) current(row sealedRow) bool {
	for _, v := range row.values {
		if kid, sealed := SealedKeyID(v.stored); !sealed || kid != r.primary.id {
			return false
		}
	}
	return true
}

// openValue opens one stored value of row.
func (r *Keyring) openValue(row sealedRow, v sealedValue) ([]byte, error) {
	if !row.plainOK {
		return r.openSealed(v.ad, row.what, v.stored)
	}
	return r.open(v.ad, row.what, v.stored)
}

// pendingRows counts the rows with a value not sealed under the primary key.
func (r *Keyring) pendingRows(rows []sealedRow) int {
	n := 0
	for _, row := range rows {
		if !r.current(row) {
			n++
		}
	}
	return n
}

// rotateRows re-seals under the primary key every row with a value that is not under it yet, one write per row, so
// that an interrupted run leaves every row readable and running it again finishes the job. n is the number of rows
// re-sealed. A row that neither key opens stops the run with an error naming the row and its key (nothing is
// dropped); a row gone meanwhile is skipped.
func (r *Keyring) rotateRows(ctx context.Context, rows []sealedRow) (n int, err error) {
	for _, row := range rows {
		if r.current(row) {
			continue
		}
		sealed := make([][]byte, len(row.values))
		for i, v := range row.values {
			plain, err := r.openValue(row, v)
			if err != nil {
				return n, fmt.Errorf("crypt: rotate %s: %w", row.what, err)
			}
			if sealed[i], err = r.seal(v.ad, plain); err != nil {
				return n, err
			}
		}
		if err := row.write(ctx, sealed); err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				continue // removed meanwhile
			}
			return n, fmt.Errorf("crypt: rotate %s: %w", row.what, err)
		}
		n++
	}
	return n, nil
}

// serverRows lists every server's connection_config.
func serverRows(ctx context.Context, w *Store) ([]sealedRow, error) {
	list, _, err := w.Store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return nil, fmt.Errorf("crypt: list servers: %w", err)
	}
	rows := make([]sealedRow, 0, len(list))
	for _, v := range list {
		rows = append(rows, sealedRow{
			what:    fmt.Sprintf("server %s (%s)", v.ID, v.Name),
			values:  []sealedValue{{ad: aad(v.ID), stored: v.ConnectionConfig}},
			plainOK: true,
			write: func(ctx context.Context, sealed [][]byte) error {
				_, err := w.Store.UpdateServer(ctx, v.ID, persistence.ServerPatch{ConnectionConfig: sealed[0]})
				return err
			},
		})
	}
	return rows, nil
}

// secretRows lists every caller's secret.
func secretRows(ctx context.Context, w *Store) ([]sealedRow, error) {
	list, err := w.Store.ListUserSecrets(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("crypt: list credentials: %w", err)
	}
	rows := make([]sealedRow, 0, len(list))
	for _, v := range list {
		got, err := w.Store.GetUserSecret(ctx, v.ServerID, v.Subject)
		if errors.Is(err, persistence.ErrNotFound) {
			continue // revoked meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("crypt: credential of %q on server %s: %w", v.Subject, v.ServerID, err)
		}
		rows = append(rows, sealedRow{
			what:   fmt.Sprintf("credential of %q on server %s", got.Subject, got.ServerID),
			values: []sealedValue{{ad: secretAAD(got.ServerID, got.Subject), stored: got.Secret}},
			write: func(ctx context.Context, sealed [][]byte) error {
				got.Secret = sealed[0]
				_, _, err := w.Store.PutUserSecret(ctx, got)
				return err
			},
		})
	}
	return rows, nil
}

// flowRows lists every pending OAuth flow's data and, once returned with one, its code.
func flowRows(ctx context.Context, w *Store) ([]sealedRow, error) {
	now := time.Now()
	list, err := w.Store.ListOAuthFlows(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("crypt: list OAuth flows: %w", err)
	}
	rows := make([]sealedRow, 0, len(list))
	for _, f := range list {
		values := []sealedValue{{ad: flowAAD("data", f.State), stored: f.Data}}
		if len(f.Code) > 0 {
			values = append(values, sealedValue{ad: flowAAD("code", f.State), stored: f.Code})
		}
		rows = append(rows, sealedRow{
			what:   fmt.Sprintf("OAuth flow of %q on server %s", f.Subject, f.ServerID),
			values: values,
			write: func(ctx context.Context, sealed [][]byte) error {
				var code []byte
				if len(sealed) > 1 {
					code = sealed[1]
				}
				return w.Store.ResealOAuthFlow(ctx, f.State, sealed[0], code, now)
			},
		})
	}
	return rows, nil
}

// clientRows lists every registered OAuth client's data.
func clientRows(ctx context.Context, w *Store) ([]sealedRow, error) {
	list, err := w.Store.ListOAuthClients(ctx)
	if err != nil {
		return nil, fmt.Errorf("crypt: list OAuth clients: %w", err)
	}
	rows := make([]sealedRow, 0, len(list))
	for _, c := range list {
		rows = append(rows, sealedRow{
			what:   fmt.Sprintf("OAuth client of server %s at %s", c.ServerID, c.Issuer),
			values: []sealedValue{{ad: clientAAD(c.ServerID, c.Issuer), stored: c.Data}},
			write: func(ctx context.Context, sealed [][]byte) error {
				return w.Store.ResealOAuthClient(ctx, c.ServerID, c.Issuer, sealed[0])
			},
		})
	}
	return rows, nil
}

// rotate lists the rows of one kind and re-seals them.
func rotate(ctx context.Context, store persistence.Store, list func(context.Context, *Store) ([]sealedRow, error)) (int, error) {
	w, err := unwrap(store)
	if err != nil {
		return 0, err
	}
	rows, err := list(ctx, w)
	if err != nil {
		return 0, fmt.Errorf("crypt: rotate: %w", err)
	}
	return w.ring.rotateRows(ctx, rows)
}

// pending lists the rows of one kind and counts those not sealed under the primary key.
func pending(ctx context.Context, store persistence.Store, list func(context.Context, *Store) ([]sealedRow, error)) (int, error) {
	w, err := unwrap(store)
	if err != nil {
		return 0, err
	}
	rows, err := list(ctx, w)
	if err != nil {
		return 0, err
	}
	return w.ring.pendingRows(rows), nil
}

// Pending counts the servers whose connection_config is not sealed under the primary key: plain rows and rows
// under the previous key, which RotateKeys would re-seal. store must come from Wrap.
func Pending(ctx context.Context, store persistence.Store) (int, error) {
	return pending(ctx, store, serverRows)
}

// RotateKeys re-seals every server's connection_config under the primary key: rows under the previous key and
// plain rows (written before encryption). Each row is its own update, so an interrupted run leaves every row
// readable and running it again finishes the job; rows already under the primary key are left alone. n is the
// number of rows re-sealed. A row that neither key opens stops the run with an error naming its key. Run it with
// the daemon stopped (or with the daemon already reading with both keys): an edit made between the read and the
// write of one row would be lost. store must come from Wrap.
func RotateKeys(ctx context.Context, store persistence.Store) (n int, err error) {
	return rotate(ctx, store, serverRows)
}

// RotateSecrets re-seals every caller's secret under the primary key, as RotateKeys does connection_config; n is
// the number re-sealed. store must come from Wrap.
func RotateSecrets(ctx context.Context, store persistence.Store) (int, error) {
	return rotate(ctx, store, secretRows)
}

// PendingSecrets counts the callers' secrets not sealed under the primary key. store must come from Wrap.
func PendingSecrets(ctx context.Context, store persistence.Store) (int, error) {
	return pending(ctx, store, secretRows)
}

// RotateOAuth re-seals under the primary key, as RotateKeys does connection_config, the pending OAuth flows' data
// and code (a flow in progress still completes once the previous key is dropped) and the registered OAuth clients
// (which would otherwise be registered again); flows and clients are the numbers re-sealed. store must come from
// Wrap.
func RotateOAuth(ctx context.Context, store persistence.Store) (flows, clients int, err error) {
	if flows, err = rotate(ctx, store, flowRows); err != nil {
		return flows, 0, err
	}
	clients, err = rotate(ctx, store, clientRows)
	return flows, clients, err
}

// PendingOAuth counts the pending OAuth flows and the registered OAuth clients not sealed under the primary key.
// store must come from Wrap.
func PendingOAuth(ctx context.Context, store persistence.Store) (flows, clients int, err error) {
	if flows, err = pending(ctx, store, flowRows); err != nil {
		return 0, 0, err
	}
	clients, err = pending(ctx, store, clientRows)
	return flows, clients, err
}
