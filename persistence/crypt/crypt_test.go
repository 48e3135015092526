package crypt

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	"github.com/mcpgw/aggregator/persistence/storetest"
)

const secret = "s3cr3t-planted-value-7f3a"

func openSQLite(t *testing.T) persistence.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aggregator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func openPostgres(t *testing.T) persistence.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var stores = []struct {
	name string
	open func(t *testing.T) persistence.Store
}{
	{"sqlite", openSQLite},
	{"postgres", openPostgres},
}

func mustRing(t *testing.T, primary, previous []byte) *Keyring {
	t.Helper()
	r, err := NewKeyring(primary, previous)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConformance runs the shared store suite through the wrapper: encryption changes nothing a caller sees.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) persistence.Store {
		return Wrap(openSQLite(t), mustRing(t, NewKey(), nil))
	})
}

func config(extra string) json.RawMessage {
	return json.RawMessage(`{"base_url":"https://api.example.test/mcp","headers":{"Authorization":"Bearer ` + secret + `"},"env":{"K":"` + extra + `"}}`)
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func create(t *testing.T, s persistence.Store, name string, cfg json.RawMessage) persistence.Server {
	t.Helper()
	v := &persistence.Server{Name: name, TransportType: persistence.TransportHTTP, ConnectionConfig: cfg}
	if err := s.CreateServer(t.Context(), v, 0); err != nil {
		t.Fatalf("CreateServer(%s): %v", name, err)
	}
	return *v
}

// storedKID reads the row as the database holds it and fails when the plaintext secret shows.
func storedKID(t *testing.T, inner persistence.Store, id string) string {
	t.Helper()
	raw, err := inner.GetServer(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw.ConnectionConfig, []byte(secret)) {
		t.Fatalf("plaintext at rest: %s", raw.ConnectionConfig)
	}
	kid, ok := SealedKeyID(raw.ConnectionConfig)
	if !ok {
		t.Fatalf("row %s not sealed: %s", id, raw.ConnectionConfig)
	}
	return kid
}

func TestEncryptedAtRest(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			inner := st.open(t)
			k1, k2 := NewKey(), NewKey()
			s := Wrap(inner, mustRing(t, k1, nil))

			a := create(t, s, "alpha", config("a"))
			if !jsonEqual(t, a.ConnectionConfig, config("a")) {
				t.Fatalf("CreateServer changed the caller's config: %s", a.ConnectionConfig)
			}
			if kid := storedKID(t, inner, a.ID); kid != KeyID(k1) {
				t.Fatalf("kid %s, want %s", kid, KeyID(k1))
			}

			// Every read opens it.
			reads := map[string]func() (persistence.Server, error){
				"GetServer":       func() (persistence.Server, error) { return s.GetServer(ctx, a.ID) },
				"GetServer upper": func() (persistence.Server, error) { return s.GetServer(ctx, strings.ToUpper(a.ID)) },
				"GetServerByName": func() (persistence.Server, error) { return s.GetServerByName(ctx, "alpha") },
				"ListServers": func() (persistence.Server, error) {
					l, _, err := s.ListServers(ctx, persistence.ListServersFilter{})
					if err != nil || len(l) != 1 {
						return persistence.Server{}, fmt.Errorf("list: %d, %v", len(l), err)
					}
					return l[0], nil
				},
				"UpdateServer": func() (persistence.Server, error) {
					return s.UpdateServer(ctx, a.ID, persistence.ServerPatch{ConnectionConfig: config("a")})
				},
			}
			for name, read := range reads {
				v, err := read()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !jsonEqual(t, v.ConnectionConfig, config("a")) {
					t.Errorf("%s: %s", name, v.ConnectionConfig)
				}
			}
			storedKID(t, inner, a.ID) // the update sealed it again

			// An explicit id in any spelling: the AAD is the canonical id reads will see.
			explicit := &persistence.Server{ID: strings.ToUpper("0190a7b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"), Name: "explicit",
				TransportType: persistence.TransportHTTP, ConnectionConfig: config("e")}
			if err := s.CreateServer(ctx, explicit, 0); err != nil {
				t.Fatal(err)
			}
			if v, err := s.GetServer(ctx, explicit.ID); err != nil || !jsonEqual(t, v.ConnectionConfig, config("e")) {
				t.Fatalf("explicit id: %v %s", err, v.ConnectionConfig)
			}

			// AAD: an envelope copied onto another row does not open there.
			b := create(t, s, "beta", config("b"))
			rawA, _ := inner.GetServer(ctx, a.ID)
			if _, err := inner.UpdateServer(ctx, b.ID, persistence.ServerPatch{ConnectionConfig: rawA.ConnectionConfig}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetServer(ctx, b.ID); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("swapped envelope: %v, want ErrAuthentication", err)
			}
			if _, _, err := s.ListServers(ctx, persistence.ListServersFilter{}); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("list with a swapped envelope: %v", err)
			}
			if _, err := s.UpdateServer(ctx, b.ID, persistence.ServerPatch{ConnectionConfig: config("b")}); err != nil {
				t.Fatal(err)
			}

			// The wrong key: a clear error naming the key id, never garbage.
			other := Wrap(inner, mustRing(t, k2, nil))
			_, err := other.GetServer(ctx, a.ID)
			if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), KeyID(k1)) || !strings.Contains(err.Error(), a.ID) {
				t.Fatalf("wrong key: %v", err)
			}
			// The old key as previous: reads work, writes use the new key.
			rotated := Wrap(inner, mustRing(t, k2, k1))
			if v, err := rotated.GetServer(ctx, a.ID); err != nil || !jsonEqual(t, v.ConnectionConfig, config("a")) {
				t.Fatalf("read with the previous key: %v %s", err, v.ConnectionConfig)
			}
			c := create(t, rotated, "gamma", config("c"))
			if kid := storedKID(t, inner, c.ID); kid != KeyID(k2) {
				t.Fatalf("new row sealed under %s, want the primary %s", kid, KeyID(k2))
			}

			// Bad input is refused, not sealed.
			if err := s.CreateServer(ctx, &persistence.Server{Name: "bad", TransportType: "HTTP", ConnectionConfig: json.RawMessage(`{"x":`)}, 0); err == nil {
				t.Error("invalid JSON config accepted")
			}
			if _, err := s.UpdateServer(ctx, a.ID, persistence.ServerPatch{ConnectionConfig: json.RawMessage(`{oops`)}); err == nil {
				t.Error("invalid JSON patch accepted")
			}
			if _, err := s.GetServer(ctx, "not-a-uuid"); !errors.Is(err, persistence.ErrNotFound) {
				t.Errorf("not found must pass through: %v", err)
			}
		})
	}
}

func TestRotateKeys(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			inner := st.open(t)
			oldKey, newKey := NewKey(), NewKey()
			old := Wrap(inner, mustRing(t, oldKey, nil))
			want := map[string]json.RawMessage{}
			for i := range 5 {
				v := create(t, old, fmt.Sprintf("sealed-%d", i), config(fmt.Sprint(i)))
				want[v.ID] = config(fmt.Sprint(i))
			}
			// Two rows from before encryption existed.
			for i := range 2 {
				v := create(t, inner, fmt.Sprintf("plain-%d", i), config(fmt.Sprint("p", i)))
				want[v.ID] = config(fmt.Sprint("p", i))
			}

			s := Wrap(inner, mustRing(t, newKey, oldKey))
			if n, err := Pending(ctx, s); err != nil || n != 7 {
				t.Fatalf("Pending = %d, %v; want 7", n, err)
			}
			n, err := RotateKeys(ctx, s)
			if err != nil || n != 7 {
				t.Fatalf("RotateKeys = %d, %v; want 7", n, err)
			}
			for id := range want {
				if kid := storedKID(t, inner, id); kid != KeyID(newKey) {
					t.Errorf("row %s under %s after rotation, want %s", id, kid, KeyID(newKey))
				}
			}
			// Idempotent.
			if n, err := RotateKeys(ctx, s); err != nil || n != 0 {
				t.Fatalf("second RotateKeys = %d, %v; want 0", n, err)
			}
			if n, err := Pending(ctx, s); err != nil || n != 0 {
				t.Fatalf("Pending after rotation = %d, %v", n, err)
			}
			// The new key alone reads everything.
			only := Wrap(inner, mustRing(t, newKey, nil))
			list, _, err := only.ListServers(ctx, persistence.ListServersFilter{})
			if err != nil || len(list) != len(want) {
				t.Fatalf("list with the new key: %d %v", len(list), err)
			}
			for _, v := range list {
				if !jsonEqual(t, v.ConnectionConfig, want[v.ID]) {
					t.Errorf("%s: %s, want %s", v.Name, v.ConnectionConfig, want[v.ID])
				}
			}
			// A store whose rows neither key opens stops with the key named.
			stranger := Wrap(inner, mustRing(t, NewKey(), nil))
			if _, err := RotateKeys(ctx, stranger); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), KeyID(newKey)) {
				t.Fatalf("rotate with unknown keys: %v", err)
			}
			if _, err := RotateKeys(ctx, inner); err == nil {
				t.Fatal("RotateKeys on an unwrapped store succeeded")
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	k := bytes.Repeat([]byte{0xfb}, KeySize)
	short := bytes.Repeat([]byte{1}, 16)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"base64", EncodeKey(k), true},
		{"base64 with spaces and newline", "  " + EncodeKey(k) + "\n", true},
		{"raw base64", strings.TrimRight(EncodeKey(k), "="), true},
		{"url base64", strings.NewReplacer("+", "-", "/", "_").Replace(EncodeKey(k)), true},
		{"hex", hex.EncodeToString(k), true},
		{"hex upper", strings.ToUpper(hex.EncodeToString(k)), true},
		{"16 bytes base64", EncodeKey(short), false},
		{"31 bytes hex", hex.EncodeToString(k[:31]), false},
		{"passphrase", "correct horse battery staple!", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.in)
			if !tc.ok {
				if err == nil {
					t.Fatalf("accepted %q", tc.in)
				}
				if tc.in != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.in)) {
					t.Fatalf("the error shows the key: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, k) {
				t.Fatalf("ParseKey = %x, %v", got, err)
			}
		})
	}
	if _, err := NewKeyring(short, nil); err == nil {
		t.Error("NewKeyring accepted a 16-byte key")
	}
	if _, err := NewKeyring(k, short); err == nil {
		t.Error("NewKeyring accepted a 16-byte previous key")
	}
	if r := mustRing(t, k, k); r.PreviousID() != "" {
		t.Error("a previous key equal to the primary should be ignored")
	}
}

func TestSealOpen(t *testing.T) {
	r := mustRing(t, NewKey(), nil)
	plain := []byte(`{"env":{"T":"` + secret + `"}}`)
	a, err := r.Seal("id-1", plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Seal("id-1", plain)
	if bytes.Equal(a, b) {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
	tampered := func(f func(e *envelope)) []byte {
		var e envelope
		_ = json.Unmarshal(a, &e)
		f(&e)
		out, _ := json.Marshal(e)
		return out
	}
	tests := []struct {
		name   string
		id     string
		stored []byte
		want   error
	}{
		{"round trip", "id-1", a, nil},
		{"plain passes", "id-1", plain, nil},
		{"other row", "id-2", a, ErrAuthentication},
		{"flipped ciphertext", "id-1", tampered(func(e *envelope) { e.CT = flip(e.CT) }), ErrAuthentication},
		{"unknown key", "id-1", tampered(func(e *envelope) { e.KID = "00000000" }), ErrUnknownKey},
		{"other algorithm", "id-1", tampered(func(e *envelope) { e.Enc = "rot13" }), ErrMalformed},
		{"bad base64", "id-1", tampered(func(e *envelope) { e.Nonce = "!!" }), ErrMalformed},
		{"not an envelope object", "id-1", []byte(`{"$enc":5}`), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Open(tc.id, tc.stored)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || got != nil {
					t.Fatalf("Open = %s, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Open = %s, %v", got, err)
			}
		})
	}
}

// flip changes the first base64 character of s.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestLoadOrCreateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "credential.key")
	var wg sync.WaitGroup
	keys := make([][]byte, 4)
	created := make([]bool, 4)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, c, err := LoadOrCreateKeyFile(path)
			if err != nil {
				t.Error(err)
			}
			keys[i], created[i] = k, c
		}()
	}
	wg.Wait()
	nCreated := 0
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) || len(keys[i]) != KeySize {
			t.Fatalf("processes disagree on the key")
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Errorf("%d callers created the key, want 1", nCreated)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if fi, _ := os.Stat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	again, c, err := LoadOrCreateKeyFile(path)
	if err != nil || c || !bytes.Equal(again, keys[0]) {
		t.Fatalf("reload: %v %v", c, err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKeyFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a bad key file: %v", err)
	}
}
