// Package pgtest gives tests a throw-away PostgreSQL database, so Postgres tests run in isolation from each other
// and from any real data on the same server. Without a reachable server the tests skip, except in CI (CI=true),
// where an unreachable Postgres must fail the build rather than silently test nothing.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// connectTimeout bounds how long an unreachable server delays a test.
const connectTimeout = 10 * time.Second

// ddlTimeout bounds CREATE and DROP DATABASE, which a loaded machine can slow down to seconds.
const ddlTimeout = time.Minute

// ServerURL returns TEST_DATABASE_URL, or DefaultURL when it is not set.
func ServerURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// NewDatabase creates a database with a random name on the server of ServerURL and returns its URL (the server
// URL with the database replaced). The database is dropped WITH (FORCE) when the test ends, after the cleanups
// the test registers later (such as closing a store). An unreachable server skips the test, or fails it when the
// environment variable CI is "true".
func NewDatabase(t testing.TB) string {
	t.Helper()
	base := ServerURL()
	conn, err := connect(base)
	if err != nil {
		msg := fmt.Sprintf("pgtest: PostgreSQL unreachable at %s (set TEST_DATABASE_URL): %v", redact(base), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	defer conn.Close(context.Background())

	name := "mcpgw_test_" + randomHex(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, base, name) })

	dbURL, err := withDatabase(base, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dbURL
}

func dropDatabase(t testing.TB, base, name string) {
	t.Helper()
	conn, err := connect(base)
	if err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

func connect(url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	return pgx.Connect(ctx, url)
}

// withDatabase returns base with its database replaced by name; base is a URL or a keyword/value DSN.
func withDatabase(base, name string) (string, error) {
	if !strings.Contains(base, "://") {
		return base + " dbname=" + name, nil // the last dbname wins
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", redact(base), err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	q := u.Query()
	if q.Has("dbname") {
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// redact hides the password of a URL for messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && strings.Contains(s, "://") {
		return u.Redacted()
	}
	return "the configured server"
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random name: %v", err)
	}
	return hex.EncodeToString(b)
}
