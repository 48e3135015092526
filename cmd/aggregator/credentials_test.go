package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

func TestCredentialKeyring(t *testing.T) {
	envKey, prevKey := crypt.NewKey(), crypt.NewKey()
	tests := []struct {
		name        string
		key, prev   []byte
		listen      string
		listens     bool
		wantErr     string
		wantFile    bool   // a key file in the data directory is used
		wantPrimary []byte // nil: the file's key
		wantLog     string
	}{
		{name: "key from the environment", key: envKey, prev: prevKey, listen: "0.0.0.0:8081", listens: true, wantPrimary: envKey},
		{name: "loopback without a key: generated into the data directory", listen: "127.0.0.1:8081", listens: true,
			wantFile: true, wantLog: "production must set MCP_CREDENTIAL_KEY"},
		{name: "localhost counts as loopback", listen: "localhost:8081", listens: true, wantFile: true},
		{name: "beyond loopback without a key: refused", listen: "0.0.0.0:8081", listens: true,
			wantErr: "MCP_CREDENTIAL_KEY is not set and MCP_AGGREGATOR_LISTEN=0.0.0.0:8081 is not a loopback address"},
		{name: "all interfaces without a host: refused", listen: ":8081", listens: true, wantErr: "MCP_CREDENTIAL_KEY"},
		{name: "stdio has no listener", listen: "0.0.0.0:8081", listens: false, wantFile: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg := config{Listen: tc.listen, MCPListen: "127.0.0.1:8082", DataDir: dir, CredentialKey: tc.key, CredentialKeyPrevious: tc.prev}
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			ring, err := credentialKeyring(cfg, logger, tc.listens)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if _, err := os.Stat(filepath.Join(dir, credentialKeyFile)); err == nil {
					t.Fatal("a key file was written although the daemon refuses to start")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, credentialKeyFile)
			fi, statErr := os.Stat(path)
			if tc.wantFile != (statErr == nil) {
				t.Fatalf("key file present: %v, want %v", statErr == nil, tc.wantFile)
			}
			want := tc.wantPrimary
			if tc.wantFile {
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
				}
				want, _, _ = crypt.LoadOrCreateKeyFile(path)
				if !strings.Contains(logs.String(), path) {
					t.Errorf("the warning does not say where the key is:\n%s", logs.String())
				}
				// The next start uses the same key.
				again, err := credentialKeyring(cfg, logger, tc.listens)
				if err != nil || again.PrimaryID() != ring.PrimaryID() {
					t.Fatalf("second start: %v, key %s then %s", err, ring.PrimaryID(), again.PrimaryID())
				}
			}
			if ring.PrimaryID() != crypt.KeyID(want) {
				t.Errorf("primary key %s, want %s", ring.PrimaryID(), crypt.KeyID(want))
			}
			if tc.prev != nil && ring.PreviousID() != crypt.KeyID(tc.prev) {
				t.Errorf("previous key %s, want %s", ring.PreviousID(), crypt.KeyID(tc.prev))
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("logs lack %q:\n%s", tc.wantLog, logs.String())
			}
			for _, k := range [][]byte{tc.key, tc.prev, want} {
				if k != nil && strings.Contains(logs.String(), crypt.EncodeKey(k)) {
					t.Fatalf("a key was logged:\n%s", logs.String())
				}
			}
		})
	}
}

// TestRotateKeyOAuthRows: a pending OAuth flow (its verifier and returned code) and a registered OAuth client sealed
// under the old key are named by the start-up warning, re-encrypted and counted on stdout by rotate-key, and open
// with the new key alone afterwards, on both stores. A client that neither key opens fails rotate-key, named, and
// stays stored.
func TestRotateKeyOAuthRows(t *testing.T) {
	for _, st := range []struct {
		name string
		url  func() string
	}{
		{"sqlite", func() string { return "" }},
		{"postgres", func() string { return pgtest.NewDatabase(t) }},
	} {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			oldKey, newKey := crypt.NewKey(), crypt.NewKey()
			cfg := config{Listen: "127.0.0.1:0", MCPListen: "127.0.0.1:0", DataDir: t.TempDir(), DatabaseURL: st.url()}
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			withKeys := func(primary, previous []byte) config {
				c := cfg
				c.CredentialKey, c.CredentialKeyPrevious = primary, previous
				return c
			}
			ring := func(primary []byte) *crypt.Keyring {
				r, err := crypt.NewKeyring(primary, nil)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			inner, err := openStore(ctx, cfg, logger)
			if err != nil {
				t.Fatal(err)
			}
			old := crypt.Wrap(inner, ring(oldKey))
			srv := &persistence.Server{Name: "oauthed", TransportType: persistence.TransportHTTP,
				ConnectionConfig: []byte(`{"base_url":"https://api.example.test/mcp"}`)}
			if err := old.CreateServer(ctx, srv, 0); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if err := old.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: "st-1", ServerID: srv.ID, Subject: "token:alice",
				Data: []byte(`{"verifier":"pkce-verifier"}`), ExpiresAt: now.Add(time.Hour)}, 0, 0, now); err != nil {
				t.Fatal(err)
			}
			if err := old.ReturnOAuthFlow(ctx, "st-1", []byte(`"the-code"`), "", "", now); err != nil {
				t.Fatal(err)
			}
			client := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://as.example", RedirectURL: "https://agg.example/cb",
				Data: []byte(`{"client_id":"registered-client"}`)}
			if err := old.PutOAuthClient(ctx, client); err != nil {
				t.Fatal(err)
			}
			inner.Close()

			// The start-up warning names them.
			s, err := openSealedStore(ctx, withKeys(newKey, oldKey), logger, true)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			if !strings.Contains(logs.String(), "OAuth clients are not encrypted under MCP_CREDENTIAL_KEY yet") ||
				!strings.Contains(logs.String(), "oauth_flows=1 oauth_clients=1") {
				t.Fatalf("no start-up warning about the OAuth rows:\n%s", logs.String())
			}

			var stdout bytes.Buffer
			if code := rotateKey(ctx, withKeys(newKey, oldKey), logger, &stdout); code != 0 {
				t.Fatalf("rotate-key: exit %d\n%s", code, logs.String())
			}
			want := fmt.Sprintf("re-encrypted 1 pending OAuth flows and 1 registered OAuth clients under key %s", crypt.KeyID(newKey))
			if !strings.Contains(stdout.String(), want) {
				t.Fatalf("rotate-key printed:\n%s\nwant %q", stdout.String(), want)
			}

			// The new key alone: no warning, the flow completes and the client opens.
			logs.Reset()
			s, err = openSealedStore(ctx, withKeys(newKey, nil), logger, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if strings.Contains(logs.String(), "not encrypted under MCP_CREDENTIAL_KEY yet") {
				t.Fatalf("a warning after rotation:\n%s", logs.String())
			}
			if got, err := s.GetOAuthClient(ctx, srv.ID, client.Issuer); err != nil || string(got.Data) != string(client.Data) {
				t.Fatalf("client with the new key alone: %s, %v", got.Data, err)
			}
			if got, err := s.TakeOAuthFlow(ctx, "st-1", "token:alice", time.Now()); err != nil ||
				string(got.Data) != `{"verifier":"pkce-verifier"}` || string(got.Code) != `"the-code"` {
				t.Fatalf("flow with the new key alone: %s %s, %v", got.Data, got.Code, err)
			}

			// A client under a key neither configured key is: rotate-key fails naming it, and the row stays.
			strangerKey := crypt.NewKey()
			foreign := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://foreign.example", Data: []byte(`{"client_id":"x"}`)}
			if err := crypt.Wrap(s.(interface{ Inner() persistence.Store }).Inner(), ring(strangerKey)).PutOAuthClient(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			logs.Reset()
			stdout.Reset()
			if code := rotateKey(ctx, withKeys(newKey, nil), logger, &stdout); code == 0 ||
				!strings.Contains(logs.String(), crypt.KeyID(strangerKey)) || !strings.Contains(logs.String(), foreign.Issuer) {
				t.Fatalf("rotate-key with a foreign client: exit %d\n%s", code, logs.String())
			}
			if _, err := s.GetOAuthClient(ctx, srv.ID, foreign.Issuer); !errors.Is(err, crypt.ErrUnknownKey) {
				t.Fatalf("the foreign client: %v, want it kept (ErrUnknownKey)", err)
			}
		})
	}
}
