package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence/crypt"
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
