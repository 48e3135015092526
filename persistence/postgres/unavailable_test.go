package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// TestOutageIsErrUnavailable cuts the connection to a real PostgreSQL (a TCP proxy between the store and the
// server): reads and writes fail with persistence.ErrUnavailable (the front ends answer 503), not a bare driver
// error; after the restore the same store works again without being reopened.
func TestOutageIsErrUnavailable(t *testing.T) {
	proxy, dbURL := pgtest.NewProxy(t, pgtest.NewDatabase(t))
	s, err := Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	if _, _, err := s.ListServers(ctx, persistence.ListServersFilter{}); err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	checks := map[string]func(context.Context) error{
		"ping": s.Ping,
		"list": func(ctx context.Context) error {
			_, _, err := s.ListServers(ctx, persistence.ListServersFilter{})
			return err
		},
		"count": func(ctx context.Context) error { _, err := s.CountServersByStatus(ctx); return err },
		"create": func(ctx context.Context) error {
			return s.CreateServer(ctx, &persistence.Server{Name: "x", TransportType: persistence.TransportSTDIO,
				ConnectionConfig: []byte(`{"command":"true"}`), Status: persistence.StatusDisconnected}, 0)
		},
		"get": func(ctx context.Context) error {
			_, err := s.GetServer(ctx, "00000000-0000-0000-0000-000000000001")
			return err
		},
	}
	for name, f := range checks {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if !errors.Is(err, persistence.ErrUnavailable) {
			t.Errorf("%s during the outage: %v, want ErrUnavailable", name, err)
		}
	}

	proxy.Restore()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, err := s.ListServers(ctx, persistence.ListServersFilter{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConnectRefusedIsErrUnavailable: a server that is not there at all is ErrUnavailable too.
func TestConnectRefusedIsErrUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if !errors.Is(err, persistence.ErrUnavailable) {
		t.Fatalf("Open on a closed port: %v", err)
	}
}
