package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// The access policy (migration 0006): one row, replaced whole.

func scanAccessPolicy(row storeutil.Scanner) (persistence.AccessPolicy, error) {
	var p persistence.AccessPolicy
	var doc []byte
	if err := row.Scan(&doc, &p.Version, &p.UpdatedAt); err != nil {
		return persistence.AccessPolicy{}, err
	}
	p.Document, p.UpdatedAt = json.RawMessage(doc), p.UpdatedAt.UTC()
	return p, nil
}

// GetAccessPolicy implements persistence.Store.
func (s *Store) GetAccessPolicy(ctx context.Context) (_ persistence.AccessPolicy, err error) {
	defer wrap(&err, "get access policy")
	p, err := scanAccessPolicy(s.pool.QueryRow(ctx, `SELECT document, version, updated_at FROM mcp.access_policy WHERE id = 1`))
	if errors.Is(err, pgx.ErrNoRows) {
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
	err = s.writeTx(ctx, func(tx pgx.Tx) error {
		out, err = scanAccessPolicy(tx.QueryRow(ctx, `INSERT INTO mcp.access_policy (id, document, version, updated_at)
			VALUES (1, $1::jsonb, 1, $2) ON CONFLICT (id) DO UPDATE SET document = excluded.document,
			version = mcp.access_policy.version + 1, updated_at = excluded.updated_at
			RETURNING document, version, updated_at`, string(doc), storeutil.Now()))
		return err
	})
	return out, err
}
