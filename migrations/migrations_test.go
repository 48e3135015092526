package migrations

import (
	"database/sql"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name    string
		want    int
		wantErr bool
	}{
		{"0001_init.sql", 1, false},
		{"0042_add_index.sql", 42, false},
		{"12_short.sql", 12, false},
		{"0000_zero.sql", 0, true},
		{"init.sql", 0, true},
		{"abc_init.sql", 0, true},
		{"-001_neg.sql", 0, true},
		{"+001_plus.sql", 0, true},
		{"0001_init.txt", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseVersion(tc.name)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestLoad(t *testing.T) {
	versions := map[Dialect][]int{}
	for _, d := range []Dialect{Postgres, SQLite} {
		ms, err := Load(d)
		if err != nil {
			t.Fatalf("Load(%s): %v", d, err)
		}
		if len(ms) == 0 || ms[0].Version != 1 {
			t.Fatalf("Load(%s): %d migrations, want versions from 1", d, len(ms))
		}
		for i, m := range ms {
			if i > 0 && m.Version <= ms[i-1].Version {
				t.Errorf("%s: version %d after %d", d, m.Version, ms[i-1].Version)
			}
			if strings.TrimSpace(m.SQL) == "" {
				t.Errorf("%s/%s is empty", d, m.Name)
			}
			versions[d] = append(versions[d], m.Version)
		}
	}
	// Every schema change is written for both dialects.
	if !reflect.DeepEqual(versions[Postgres], versions[SQLite]) {
		t.Errorf("postgres versions %v, sqlite versions %v", versions[Postgres], versions[SQLite])
	}
	if _, err := Load("mysql"); err == nil {
		t.Error("Load(mysql) succeeded")
	}
}

func TestApplySQLite(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_txlock=immediate&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := Load(SQLite)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range all {
		want = append(want, m.Version)
	}
	applied, err := Apply(ctx, db, SQLite)
	if err != nil || !reflect.DeepEqual(applied, want) {
		t.Fatalf("first Apply = %v, %v; want %v", applied, err, want)
	}
	applied, err = Apply(ctx, db, SQLite)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Apply = %v, %v; want nothing", applied, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(all) {
		t.Errorf("schema_migrations has %d rows, %v; want %d", n, err, len(all))
	}
	for _, table := range []string{"external_servers", "server_connection_history", "tools", "audit_log"} {
		if _, err := db.ExecContext(ctx, `SELECT count(*) FROM `+table); err != nil {
			t.Errorf("table %s: %v", table, err)
		}
	}
	if _, err := Apply(ctx, db, "oracle"); err == nil {
		t.Error("Apply with an unknown dialect succeeded")
	}
}

// A migration that fails leaves nothing behind: neither its statements nor its version.
func TestApplyFailureRollsBack(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A table the first migration is about to create makes it fail half-way.
	if _, err := db.ExecContext(ctx, `CREATE TABLE tools (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, db, SQLite); err == nil {
		t.Fatal("Apply succeeded over a conflicting table")
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'external_servers'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("external_servers exists after a failed migration (%d, %v)", n, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema_migrations has %d rows after a failed migration, %v", n, err)
	}
}
