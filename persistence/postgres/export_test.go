package postgres

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
)

// stdlibDB exposes the store's pool as a *sql.DB, as Open hands it to the migrations runner.
func stdlibDB(t *testing.T, s *Store) *sql.DB {
	t.Helper()
	db := stdlib.OpenDBFromPool(s.pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
