package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestWithDatabase(t *testing.T) {
	tests := []struct{ base, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable"},
		{"postgres://u:p@h/", "postgres://u:p@h/db1"},
		{"postgresql://h:1/x?dbname=x&sslmode=disable", "postgresql://h:1/db1?dbname=db1&sslmode=disable"},
		{"host=127.0.0.1 user=postgres dbname=postgres", "host=127.0.0.1 user=postgres dbname=postgres dbname=db1"},
	}
	for _, tc := range tests {
		got, err := withDatabase(tc.base, "db1")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.base, got, err, tc.want)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "db1" {
			t.Errorf("%q parses to database %q, %v; want db1", got, cfg.Database, err)
		}
	}
}

func TestNewDatabase(t *testing.T) {
	var url string
	t.Run("create", func(t *testing.T) {
		url = NewDatabase(t)
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatalf("connect to the new database: %v", err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("new database has %d tables, %v", n, err)
		}
	})
	if url == "" {
		t.Skip("no database created")
	}
	// The subtest's cleanup dropped it.
	if conn, err := pgx.Connect(t.Context(), url); err == nil {
		conn.Close(context.Background())
		t.Errorf("database %s still exists after its test ended", url)
	}
}
