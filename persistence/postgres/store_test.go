package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/migrations"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
	"github.com/mcpgw/aggregator/persistence/storetest"
)

// openFresh opens a store on a new, empty database that is dropped when t ends.
func openFresh(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) persistence.Store {
		s := openFresh(t)
		if s.Kind() != "postgres" {
			t.Fatalf("Kind() = %q", s.Kind())
		}
		return s
	})
}

// appliedMigrations reads mcp.schema_migrations: version -> applied_at.
func appliedMigrations(t *testing.T, s *Store) map[int]time.Time {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT version, applied_at FROM mcp.schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
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

func wantAllMigrations(t *testing.T, got map[int]time.Time) {
	t.Helper()
	all, err := migrations.Load(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all) {
		t.Fatalf("%d migrations recorded, want %d", len(got), len(all))
	}
	for _, m := range all {
		if _, ok := got[m.Version]; !ok {
			t.Errorf("migration %d not recorded", m.Version)
		}
	}
}

func TestOpenTwiceMigratesOnce(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	s1, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("first Open: %v", err)
	}
	first := appliedMigrations(t, s1)
	wantAllMigrations(t, first)
	srv := &persistence.Server{Name: "survivor", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: []byte(`{"command":"x"}`)}
	if err := s1.CreateServer(ctx, srv, 0); err != nil {
		t.Fatal(err)
	}
	s1.Close()

	s2, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer s2.Close()
	second := appliedMigrations(t, s2)
	wantAllMigrations(t, second)
	for v, at := range first {
		if !second[v].Equal(at) {
			t.Errorf("migration %d re-applied: applied_at %v, then %v", v, at, second[v])
		}
	}
	if _, err := s2.GetServer(ctx, srv.ID); err != nil {
		t.Errorf("data lost across Open: %v", err)
	}
	// Applying again on the open database applies nothing.
	db := stdlibDB(t, s2)
	if applied, err := migrations.Apply(ctx, db, migrations.Postgres); err != nil || len(applied) != 0 {
		t.Errorf("Apply on a current database = %v, %v; want nothing applied", applied, err)
	}
}

func TestConcurrentOpenOnFreshDatabase(t *testing.T) {
	const n = 4
	url := pgtest.NewDatabase(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	stores := make([]*Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = Open(t.Context(), url)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	wantAllMigrations(t, appliedMigrations(t, stores[0]))
	var created atomic.Int32
	for i, s := range stores {
		srv := &persistence.Server{Name: fmt.Sprintf("from-%d", i), TransportType: persistence.TransportHTTP,
			ConnectionConfig: []byte(`{"base_url":"http://x"}`)}
		if err := s.CreateServer(t.Context(), srv, 0); err != nil {
			t.Errorf("store %d: CreateServer: %v", i, err)
			continue
		}
		created.Add(1)
	}
	if _, total, err := stores[n-1].ListServers(t.Context(), persistence.ListServersFilter{}); err != nil ||
		total != int(created.Load()) {
		t.Errorf("ListServers total %d, %v; want %d", total, err, created.Load())
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if s, err := Open(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"); err == nil {
		s.Close()
		t.Fatal("Open on a closed port succeeded")
	}
	if _, err := Open(ctx, "postgres://%zz"); err == nil {
		t.Fatal("Open with an unparsable URL succeeded")
	}
}

// BenchmarkCreateServer measures one registration (one INSERT) per op.
func BenchmarkCreateServer(b *testing.B) {
	s := openFresh(b)
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
