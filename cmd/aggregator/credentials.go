package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
)

// credentialKeyFile is where a local daemon without MCP_CREDENTIAL_KEY keeps the key it generated, in the data
// directory.
const credentialKeyFile = "credential.key"

// exposedListen names the listen addresses of cfg that are not loopback.
func exposedListen(cfg config) []string {
	var out []string
	for _, l := range []struct{ name, addr string }{
		{"MCP_AGGREGATOR_LISTEN", cfg.Listen}, {"MCP_AGGREGATOR_MCP_LISTEN", cfg.MCPListen},
	} {
		if !auth.IsLoopback(l.addr) {
			out = append(out, fmt.Sprintf("%s=%s", l.name, l.addr))
		}
	}
	return out
}

// credentialKeyring builds the keyring connection_config is sealed under (READING.md, "Credential key"):
// MCP_CREDENTIAL_KEY, with MCP_CREDENTIAL_KEY_PREVIOUS accepted for reading. Without MCP_CREDENTIAL_KEY a daemon
// that only listens on loopback (or has no listener: stdio) uses a key generated once into the data directory,
// with a warning; one that listens beyond loopback refuses to start.
func credentialKeyring(cfg config, logger *slog.Logger, listens bool) (*crypt.Keyring, error) {
	primary := cfg.CredentialKey
	if primary == nil {
		if exposed := exposedListen(cfg); listens && len(exposed) > 0 {
			return nil, fmt.Errorf("refusing to start: MCP_CREDENTIAL_KEY is not set and %s is not a loopback address; "+
				"set MCP_CREDENTIAL_KEY to 32 random bytes as base64 (e.g. `openssl rand -base64 32`): connection_config "+
				"is encrypted at rest under it", strings.Join(exposed, " and "))
		}
		path := filepath.Join(cfg.DataDir, credentialKeyFile)
		key, created, err := crypt.LoadOrCreateKeyFile(path)
		if err != nil {
			return nil, err
		}
		verb := "using the credential key generated earlier"
		if created {
			verb = "generated a credential key"
		}
		logger.Warn("MCP_CREDENTIAL_KEY is not set: "+verb+" for this local daemon; production must set "+
			"MCP_CREDENTIAL_KEY (and keep it: connection_config is encrypted under it)", "path", path, "key_id", crypt.KeyID(key))
		primary = key
	}
	ring, err := crypt.NewKeyring(primary, cfg.CredentialKeyPrevious)
	if err != nil {
		return nil, err
	}
	logger.Info("connection_config encrypted at rest (AES-256-GCM)", "key_id", ring.PrimaryID(),
		"previous_key_id", ring.PreviousID())
	return ring, nil
}

// openSealedStore opens the store with connection_config encrypted under the credential keyring. It refuses a store
// holding a config that no configured key opens (naming the key it needs), and warns about configs not yet sealed
// under the current key (rows from before encryption, or under the previous key): `aggregator rotate-key` seals
// them.
func openSealedStore(ctx context.Context, cfg config, logger *slog.Logger, listens bool) (persistence.Store, error) {
	ring, err := credentialKeyring(cfg, logger, listens)
	if err != nil {
		return nil, err
	}
	inner, err := openStore(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	store := crypt.Wrap(inner, ring)
	if _, _, err := store.ListServers(ctx, persistence.ListServersFilter{}); err != nil {
		store.Close()
		return nil, fmt.Errorf("read the stored servers: %w", err)
	}
	if n, err := crypt.Pending(ctx, store); err == nil && n > 0 {
		logger.Warn("some servers' connection_config is not encrypted under MCP_CREDENTIAL_KEY yet; run `aggregator rotate-key`",
			"servers", n, "key_id", ring.PrimaryID())
	}
	if n, err := crypt.PendingSecrets(ctx, store); err == nil && n > 0 {
		logger.Warn("some callers' credentials are not encrypted under MCP_CREDENTIAL_KEY yet; run `aggregator rotate-key`",
			"credentials", n, "key_id", ring.PrimaryID())
	}
	if flows, clients, err := crypt.PendingOAuth(ctx, store); err == nil && flows+clients > 0 {
		logger.Warn("some pending OAuth flows or registered OAuth clients are not encrypted under MCP_CREDENTIAL_KEY yet; "+
			"run `aggregator rotate-key`", "oauth_flows", flows, "oauth_clients", clients, "key_id", ring.PrimaryID())
	}
	return store, nil
}

// rotateKey is `aggregator rotate-key`: it re-encrypts every server's connection_config, every caller's own
// credential (per_user servers), the pending OAuth flows and the registered OAuth clients under MCP_CREDENTIAL_KEY
// (reading old rows with MCP_CREDENTIAL_KEY_PREVIOUS, and rows from before encryption as they are) and prints how
// many it re-encrypted. Safe to run again; run it with the daemon stopped.
func rotateKey(ctx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) int {
	ring, err := credentialKeyring(cfg, logger, true)
	if err != nil {
		logger.Error("rotate-key failed", "error", err)
		return 1
	}
	inner, err := openStore(ctx, cfg, logger)
	if err != nil {
		logger.Error("rotate-key failed", "error", err)
		return 1
	}
	store := crypt.Wrap(inner, ring)
	defer store.Close()
	n, err := crypt.RotateKeys(ctx, store)
	if err != nil {
		logger.Error("rotate-key failed; the servers re-encrypted so far stay readable, run it again once fixed",
			"error", err, "reencrypted", n)
		return 1
	}
	secrets, err := crypt.RotateSecrets(ctx, store)
	if err != nil {
		logger.Error("rotate-key failed on the callers' credentials; those re-encrypted so far stay readable, run it "+
			"again once fixed", "error", err, "reencrypted_credentials", secrets)
		return 1
	}
	flows, clients, err := crypt.RotateOAuth(ctx, store)
	if err != nil {
		logger.Error("rotate-key failed on the OAuth flows and clients; those re-encrypted so far stay readable, run it "+
			"again once fixed", "error", err, "reencrypted_oauth_flows", flows, "reencrypted_oauth_clients", clients)
		return 1
	}
	_, total, err := inner.ListServers(ctx, persistence.ListServersFilter{Limit: 1})
	if err != nil {
		total = n
	}
	fmt.Fprintf(stdout, "re-encrypted %d of %d servers' connection_config under key %s\n", n, total, ring.PrimaryID())
	fmt.Fprintf(stdout, "re-encrypted %d callers' credentials under key %s\n", secrets, ring.PrimaryID())
	fmt.Fprintf(stdout, "re-encrypted %d pending OAuth flows and %d registered OAuth clients under key %s\n", flows,
		clients, ring.PrimaryID())
	logger.Info("credential key rotated", "reencrypted", n, "servers", total, "reencrypted_credentials", secrets,
		"reencrypted_oauth_flows", flows, "reencrypted_oauth_clients", clients, "key_id", ring.PrimaryID())
	return 0
}
