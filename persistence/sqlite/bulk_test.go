package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

func TestSplitValues(t *testing.T) {
	cases := []struct {
		query, head, group, tail string
		bad                      bool
	}{
		{query: "INSERT INTO t (a, b) VALUES (?, ?)", head: "INSERT INTO t (a, b) VALUES ", group: "(?, ?)"},
		{query: "INSERT INTO t (a) values (lower(?)) ON CONFLICT (a) DO NOTHING",
			head: "INSERT INTO t (a) values ", group: "(lower(?))", tail: " ON CONFLICT (a) DO NOTHING"},
		{query: "DELETE FROM t WHERE a = ?", bad: true},
		{query: "INSERT INTO t (a) VALUES (?1)", bad: true},
		{query: "INSERT INTO t (a) VALUES (?", bad: true},
	}
	for _, c := range cases {
		head, group, tail, err := splitValues(c.query)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted", c.query)
			}
			continue
		}
		if err != nil || head != c.head || group != c.group || tail != c.tail {
			t.Errorf("%q: %q %q %q %v", c.query, head, group, tail, err)
		}
	}
}

// TestBulkExecWritesEveryRow: rows are written in several statements when they exceed one statement's parameters,
// each row once, and an upsert tail applies to every row.
func TestBulkExecWritesEveryRow(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "bulk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (k TEXT PRIMARY KEY, a INTEGER, b TEXT)`); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, maxBulkVariables/3 + 1, 1000} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = bulkExec(ctx, tx, `INSERT INTO t (k, a, b) VALUES (?, ?, ?)
			ON CONFLICT (k) DO UPDATE SET a = excluded.a, b = excluded.b`, n, func(i int) []any {
			return []any{fmt.Sprint("k", i), i * n, fmt.Sprint("v", n)}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var count, sum int
		if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(a), 0) FROM t WHERE b = ?`,
			fmt.Sprint("v", n)).Scan(&count, &sum); err != nil {
			t.Fatal(err)
		}
		if count != n || sum != n*n*(n-1)/2 {
			t.Fatalf("n=%d: %d rows with sum %d", n, count, sum)
		}
	}
}
