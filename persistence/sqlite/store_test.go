package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/migrations"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/storetest"
)

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) persistence.Store {
		s := openAt(t, filepath.Join(t.TempDir(), "data", "aggregator.db"))
		if s.Kind() != "sqlite" {
			t.Fatalf("Kind() = %q", s.Kind())
		}
		return s
	})
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "agg.db")
	s := openAt(t, path)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, got, c.mode)
		}
	}
}

func TestOpenRejectsNonFilePaths(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory", "x.db?_pragma=foo"} {
		if s, err := Open(t.Context(), p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// appliedMigrations reads schema_migrations: version -> applied_at.
func appliedMigrations(t *testing.T, s *Store) map[int]string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var v int
		var at string
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatal(err)
		}
		out[v] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenTwiceMigratesOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "agg.db")
	all, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	first := appliedMigrations(t, s1)
	if len(first) != len(all) {
		t.Fatalf("%d migrations recorded, want %d", len(first), len(all))
	}
	srv := &persistence.Server{Name: "survivor", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: []byte(`{"command":"x"}`)}
	if err := s1.CreateServer(ctx, srv, 0); err != nil {
		t.Fatal(err)
	}
	s1.Close()

	time.Sleep(2 * time.Millisecond) // a re-applied migration would get a later applied_at
	s2 := openAt(t, path)
	second := appliedMigrations(t, s2)
	if len(second) != len(all) {
		t.Fatalf("%d migrations recorded after the second Open, want %d", len(second), len(all))
	}
	for v, at := range first {
		if second[v] != at {
			t.Errorf("migration %d re-applied: applied_at %s, then %s", v, at, second[v])
		}
	}
	if _, err := s2.GetServer(ctx, srv.ID); err != nil {
		t.Errorf("data lost across Open: %v", err)
	}
	if applied, err := migrations.Apply(ctx, s2.w, migrations.SQLite); err != nil || len(applied) != 0 {
		t.Errorf("Apply on a current database = %v, %v; want nothing applied", applied, err)
	}
}

// TestConcurrentOpenAndWrite has several stores (as several processes would) open one fresh file at once and
// write to it together: busy_timeout and BEGIN IMMEDIATE must keep SQLITE_BUSY away.
func TestConcurrentOpenAndWrite(t *testing.T) {
	const n, perStore = 3, 10
	path := filepath.Join(t.TempDir(), "shared.db")
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n*(perStore+1))
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := Open(t.Context(), path)
			if err != nil {
				errs <- fmt.Errorf("Open %d: %w", i, err)
				return
			}
			defer s.Close()
			for j := range perStore {
				srv := &persistence.Server{Name: fmt.Sprintf("s%d-%d", i, j), TransportType: persistence.TransportSTDIO,
					ConnectionConfig: []byte(`{"command":"x"}`)}
				if err := s.CreateServer(t.Context(), srv, 0); err != nil {
					errs <- fmt.Errorf("store %d: CreateServer: %w", i, err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := openAt(t, path)
	if _, total, err := s.ListServers(t.Context(), persistence.ListServersFilter{}); err != nil || total != n*perStore {
		t.Errorf("ListServers total %d, %v; want %d", total, err, n*perStore)
	}
}

// BenchmarkCreateServer measures one registration (one INSERT) per op.
func BenchmarkCreateServer(b *testing.B) {
	s := openAt(b, filepath.Join(b.TempDir(), "bench.db"))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		srv := &persistence.Server{Name: fmt.Sprintf("bench-%d", i), TransportType: persistence.TransportSTDIO,
			ConnectionConfig: []byte(`{"command":"npx","args":["-y","server"],"env":{"TOKEN":"${TOKEN}"}}`)}
		if err := s.CreateServer(ctx, srv, 0); err != nil {
			b.Fatal(err)
		}
	}
}
