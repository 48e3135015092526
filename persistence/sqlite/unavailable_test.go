package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestBusyIsErrUnavailable: another process holding the write lock past busy_timeout makes a write fail with
// persistence.ErrUnavailable (the front ends answer 503 STORE_UNAVAILABLE), not a bare driver error.
func TestBusyIsErrUnavailable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "aggregator.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.ExecContext(ctx, "ROLLBACK"); _ = conn.Close() })

	cctx, cancel := context.WithTimeout(ctx, busyTimeout+30*time.Second)
	defer cancel()
	err = s.CreateServer(cctx, &persistence.Server{Name: "x", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: []byte(`{"command":"true"}`), Status: persistence.StatusDisconnected}, 0)
	if !errors.Is(err, persistence.ErrUnavailable) {
		t.Fatalf("write while locked: %v, want ErrUnavailable", err)
	}
}
