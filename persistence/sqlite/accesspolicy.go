package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// The access policy (migration 0006): one row, replaced whole.

func scanAccessPolicy(row storeutil.Scanner) (persistence.AccessPolicy, error) {
	var p persistence.AccessPolicy
	var doc, at string
	if err := row.Scan(&doc, &p.Version, &at); err != nil {
		return persistence.AccessPolicy{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return persistence.AccessPolicy{}, err
	}
	p.Document, p.UpdatedAt = json.RawMessage(doc), t
	return p, nil
}

// GetAccessPolicy implements persistence.Store.
func (s *Store) GetAccessPolicy(ctx context.Context) (_ persistence.AccessPolicy, err error) {
	defer wrap(&err, "get access policy")
	p, err := scanAccessPolicy(s.r.QueryRowContext(ctx, `SELECT document, version, updated_at FROM access_policy WHERE id = 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.AccessPolicy{}, nil
	}
	return p, err
}

// PutAccessPolicy implements persistence.Store.
func (s *Store) PutAccessPolicy(ctx context.Context, doc json.RawMessage) (out persistence.AccessPolicy, err error) {
	defer wrap(&err, "put access policy")
	if !json.Valid(doc) {
		return persistence.AccessPolicy{}, errors.New("the document is not JSON")
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		out, err = scanAccessPolicy(tx.QueryRowContext(ctx, `INSERT INTO access_policy (id, document, version, updated_at)
			VALUES (1, ?1, 1, ?2) ON CONFLICT (id) DO UPDATE SET document = excluded.document,
			version = access_policy.version + 1, updated_at = excluded.updated_at
			RETURNING document, version, updated_at`, string(doc), fmtTime(storeutil.Now())))
		return err
	})
	return out, err
}
