package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// idemKey is a key of scope "token:alice" honoured for an hour.
func idemKey(key, fingerprint string) persistence.IdempotencyKey {
	return persistence.IdempotencyKey{Scope: "token:alice", Key: key, Fingerprint: fingerprint, Retention: time.Hour}
}

// createKeyed calls CreateServerIdempotent for a minimal server named name and returns it as answered.
func createKeyed(t *testing.T, s persistence.Store, name string, max int, k persistence.IdempotencyKey) (persistence.Server, bool, error) {
	t.Helper()
	srv := newServer(name)
	replayed, err := s.CreateServerIdempotent(t.Context(), srv, max, k)
	return *srv, replayed, err
}

func countServers(t *testing.T, s persistence.Store) int {
	t.Helper()
	_, total, err := s.ListServers(t.Context(), persistence.ListServersFilter{})
	if err != nil {
		t.Fatalf("ListServers: %v", err)
	}
	return total
}

// testIdempotentCreate: a retry with the same key and fingerprint gets the server the key created (as stored now,
// even when the limit is reached since), another fingerprint is ErrKeyReused and writes nothing, keys are per
// scope, a taken name is still ErrAlreadyExists, and a key goes with its server.
func testIdempotentCreate(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	first, replayed, err := createKeyed(t, s, "keyed", 1, idemKey("k-1", "fp-a"))
	if err != nil || replayed {
		t.Fatalf("first keyed create: replayed %v, %v", replayed, err)
	}
	if first.ID == "" || !jsonEqual(first.ConnectionConfig, []byte(stdioConfig)) {
		t.Fatalf("first keyed create answered %s", dump(first))
	}
	equalServer(t, first, mustGet(t, s, first.ID))

	// The retry answers the current row: a change made since shows.
	if _, err := s.UpdateServer(ctx, first.ID, persistence.ServerPatch{Description: ptr("changed")}); err != nil {
		t.Fatal(err)
	}
	again, replayed, err := createKeyed(t, s, "keyed", 1, idemKey("k-1", "fp-a"))
	if err != nil || !replayed {
		t.Fatalf("retry: replayed %v, %v; want the stored server (the limit of 1 does not apply to a replay)", replayed, err)
	}
	equalServer(t, mustGet(t, s, first.ID), again)
	if again.Description == nil || *again.Description != "changed" {
		t.Errorf("retry answered description %v, want the current one", again.Description)
	}

	_, _, err = createKeyed(t, s, "other-name", 0, idemKey("k-1", "fp-b"))
	requireErrIs(t, "same key, other fingerprint", err, persistence.ErrKeyReused)
	if n := countServers(t, s); n != 1 {
		t.Errorf("%d servers after a reused key, want 1", n)
	}

	// Another caller's key of the same spelling is another key.
	k := idemKey("k-1", "fp-b")
	k.Scope = "token:bob"
	bob, replayed, err := createKeyed(t, s, "bobs", 0, k)
	if err != nil || replayed || bob.ID == first.ID {
		t.Fatalf("other scope, same key: %s replayed %v, %v; want a new server", bob.ID, replayed, err)
	}

	// A fresh key does not lift the name's uniqueness.
	_, _, err = createKeyed(t, s, "keyed", 0, idemKey("k-2", "fp-a"))
	requireErrIs(t, "fresh key, taken name", err, persistence.ErrAlreadyExists)
	// Nor did the failed attempt keep its key: it registers once the name is free.
	if err := s.DeleteServer(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	second, replayed, err := createKeyed(t, s, "keyed", 0, idemKey("k-2", "fp-b"))
	if err != nil || replayed {
		t.Fatalf("k-2 after the failed attempt: replayed %v, %v", replayed, err)
	}
	// The deleted server's key went with it: the same request registers anew.
	third, replayed, err := createKeyed(t, s, "keyed-again", 0, idemKey("k-1", "fp-a"))
	if err != nil || replayed || third.ID == first.ID || third.ID == second.ID {
		t.Fatalf("k-1 after its server was deleted: %s replayed %v, %v; want a new server", third.ID, replayed, err)
	}

	for _, bad := range []persistence.IdempotencyKey{
		{Key: "k", Fingerprint: "f", Retention: time.Hour},
		{Scope: "s", Fingerprint: "f", Retention: time.Hour},
		{Scope: "s", Key: "k", Retention: time.Hour},
		{Scope: "s", Key: "k", Fingerprint: "f"},
	} {
		_, _, err := createKeyed(t, s, "bad-key", 0, bad)
		if err == nil || errors.Is(err, persistence.ErrKeyReused) {
			t.Errorf("key %+v: %v, want an error", bad, err)
		}
	}
	if _, err := s.GetServerByName(ctx, "bad-key"); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("a refused key stored its server: %v", err)
	}
}

// testIdempotencyKeyExpiry: a key older than the retention window is forgotten (the key registers anew, whatever
// the request), and keyed registrations sweep expired keys of other callers.
func testIdempotencyKeyExpiry(t *testing.T, s persistence.Store) {
	if _, _, err := createKeyed(t, s, "old", 0, idemKey("k-old", "fp-a")); err != nil {
		t.Fatal(err)
	}
	other := idemKey("k-other", "fp-a")
	other.Scope = "token:bob"
	if _, _, err := createKeyed(t, s, "bobs-old", 0, other); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	short := idemKey("k-old", "fp-b")
	short.Retention = 10 * time.Millisecond
	v, replayed, err := createKeyed(t, s, "new", 0, short)
	if err != nil || replayed {
		t.Fatalf("expired key with another request: replayed %v, %v; want a new registration", replayed, err)
	}
	// The key now names the new registration.
	got, replayed, err := createKeyed(t, s, "new", 0, idemKey("k-old", "fp-b"))
	if err != nil || !replayed || got.ID != v.ID {
		t.Fatalf("retry of the re-used key: %s replayed %v, %v; want %s", got.ID, replayed, err, v.ID)
	}
	// bob's key was swept by that registration: with an hour's retention it would still answer ErrKeyReused.
	other.Fingerprint = "fp-b"
	if _, replayed, err := createKeyed(t, s, "bobs-new", 0, other); err != nil || replayed {
		t.Fatalf("bob's key after the sweep: replayed %v, %v; want a new registration", replayed, err)
	}
}

// testConcurrentIdempotentCreate: concurrent requests with one key create one server, and every one of them gets
// it.
func testConcurrentIdempotentCreate(t *testing.T, s persistence.Store) {
	const n = 20
	ctx := t.Context()
	start := make(chan struct{})
	got := make([]persistence.Server, n)
	replays := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := newServer("raced")
			<-start
			replays[i], errs[i] = s.CreateServerIdempotent(ctx, v, 0, idemKey("k-race", "fp-a"))
			got[i] = *v
		}()
	}
	close(start)
	wg.Wait()

	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("caller %d: %v", i, errs[i])
			continue
		}
		if !replays[i] {
			created++
		}
		if got[i].ID != got[0].ID {
			t.Errorf("caller %d got server %s, caller 0 %s", i, got[i].ID, got[0].ID)
		}
	}
	if created != 1 {
		t.Errorf("%d callers created the server, want 1", created)
	}
	if c := countServers(t, s); c != 1 {
		t.Errorf("%d servers stored, want 1", c)
	}
	// Different keys racing for one name: one wins, the others are ErrAlreadyExists as without keys.
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.CreateServerIdempotent(ctx, newServer("raced-2"), 0, idemKey(fmt.Sprintf("k-%d", i), "fp-a"))
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, persistence.ErrAlreadyExists):
			t.Errorf("caller %d: %v, want ErrAlreadyExists", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d callers with their own keys created raced-2, want 1", won)
	}
}
