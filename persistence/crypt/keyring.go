// Package crypt encrypts the servers' connection_config at rest (system-contract.md, Security Contract).
//
// Why: connection_config holds what the daemon needs to reach a backend: header values (bearer tokens, API keys),
// environment values of stdio children and URLs that may carry a password. A database dump, a backup or a
// read-only SQL account must not be enough to use them. The column is therefore sealed with AES-256-GCM under
// MCP_CREDENTIAL_KEY, the server's id bound in as additional authenticated data so that a sealed value cannot be
// copied onto another server's row. The decision is made once, in a persistence.Store decorator (Wrap), so that
// neither store implementation nor any caller has to think about it: callers see plaintext, the database sees
// envelopes.
//
// Stored form (valid JSON, so both the JSONB column and SQLite's json_valid check accept it):
//
//	{"$enc":"aes-256-gcm","kid":"1a2b3c4d","nonce":"<base64, 12 bytes>","ct":"<base64 ciphertext+tag>"}
//
// kid names the key (the first 4 bytes of a SHA-256 of it, in hex), so a value sealed under another key is refused
// with a message naming that key rather than decrypted into garbage. A second, older key (MCP_CREDENTIAL_KEY_PREVIOUS)
// is accepted for reading, and RotateKeys re-seals every row under the current key. Rows written before encryption
// existed (plain JSON objects) are read as they are and sealed by RotateKeys.
package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of a credential key: AES-256.
const KeySize = 32

// Algorithm is the value of an envelope's "$enc" member.
const Algorithm = "aes-256-gcm"

// Errors a read can fail with (wrapped, with the server and key named).
var (
	// ErrUnknownKey: the value is sealed under a key that is neither the primary nor the previous key.
	ErrUnknownKey = errors.New("sealed under an unknown credential key")
	// ErrAuthentication: the key is known but the value does not open under it (tampered with, or moved from
	// another server's row).
	ErrAuthentication = errors.New("does not authenticate")
	// ErrMalformed: the value looks like an envelope but is not a well-formed one.
	ErrMalformed = errors.New("malformed encrypted connection_config")
)

type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring holds the key new values are sealed under and, optionally, an older key still accepted for reading.
type Keyring struct {
	primary  key
	previous *key
}

// NewKeyring builds a keyring from a primary key and an optional previous one (nil or empty: none). Both must be
// KeySize bytes.
func NewKeyring(primary, previous []byte) (*Keyring, error) {
	p, err := newKey(primary)
	if err != nil {
		return nil, fmt.Errorf("credential key: %w", err)
	}
	r := &Keyring{primary: p}
	if len(previous) > 0 {
		prev, err := newKey(previous)
		if err != nil {
			return nil, fmt.Errorf("previous credential key: %w", err)
		}
		if prev.id != p.id {
			r.previous = &prev
		}
	}
	return r, nil
}

func newKey(b []byte) (key, error) {
	if len(b) != KeySize {
		return key{}, fmt.Errorf("want %d bytes, got %d", KeySize, len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return key{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, err
	}
	return key{id: KeyID(b), aead: aead}, nil
}

// KeyID names a key without revealing it: the first 4 bytes of SHA-256("mcpgw credential key id" || key), in hex.
func KeyID(k []byte) string {
	h := sha256.New()
	h.Write([]byte("mcpgw credential key id\x00"))
	h.Write(k)
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// PrimaryID is the id of the key new values are sealed under.
func (r *Keyring) PrimaryID() string { return r.primary.id }

// PreviousID is the id of the key accepted for reading only, or "".
func (r *Keyring) PreviousID() string {
	if r.previous == nil {
		return ""
	}
	return r.previous.id
}

func (r *Keyring) byID(id string) *key {
	switch {
	case id == r.primary.id:
		return &r.primary
	case r.previous != nil && id == r.previous.id:
		return r.previous
	}
	return nil
}

// envelope is the stored form of a sealed connection_config.
type envelope struct {
	Enc   string `json:"$enc"`
	KID   string `json:"kid"`
	Nonce string `json:"nonce"`
	CT    string `json:"ct"`
}

// aad binds a sealed value to its row.
func aad(serverID string) []byte {
	return []byte("mcpgw/external_servers/connection_config/v1\x00" + serverID)
}

// Seal encrypts plain (a JSON value) for the server with that (canonical) id under the primary key and returns the
// envelope.
func (r *Keyring) Seal(serverID string, plain []byte) (json.RawMessage, error) {
	return r.seal(aad(serverID), plain)
}

// secretAAD binds a caller's sealed secret to its server and subject: it opens on no other row.
func secretAAD(serverID, subject string) []byte {
	return []byte("mcpgw/user_credentials/secret/v1\x00" + serverID + "\x00" + subject)
}

// SealSecret encrypts a caller's secret for (server, subject) under the primary key and returns the envelope.
func (r *Keyring) SealSecret(serverID, subject string, plain []byte) (json.RawMessage, error) {
	return r.seal(secretAAD(serverID, subject), plain)
}

// OpenSecret opens a caller's sealed secret. Unlike connection_config, a secret is never read plain: a value that is
// not an envelope is refused (ErrMalformed).
func (r *Keyring) OpenSecret(serverID, subject string, stored []byte) ([]byte, error) {
	return r.openSealed(secretAAD(serverID, subject), fmt.Sprintf("credential of %q on server %s", subject, serverID), stored)
}

// openSealed is open for a value that is never stored plain (callers' secrets, OAuth flows and clients): a value
// that is not an envelope is refused (ErrMalformed).
func (r *Keyring) openSealed(ad []byte, what string, stored []byte) ([]byte, error) {
	if _, sealed, err := parseEnvelope(stored); err != nil || !sealed {
		return nil, fmt.Errorf("crypt: %s: %w: not an encrypted envelope", what, ErrMalformed)
	}
	return r.open(ad, what, stored)
}

func (r *Keyring) seal(ad, plain []byte) (json.RawMessage, error) {
	nonce := make([]byte, r.primary.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("crypt: nonce: %w", err)
	}
	ct := r.primary.aead.Seal(nil, nonce, plain, ad)
	return json.Marshal(envelope{
		Enc: Algorithm, KID: r.primary.id,
		Nonce: base64.StdEncoding.EncodeToString(nonce), CT: base64.StdEncoding.EncodeToString(ct),
	})
}

// parseEnvelope reports whether stored is an envelope (a JSON object with a "$enc" member) and decodes it.
func parseEnvelope(stored []byte) (envelope, bool, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(stored, &probe); err != nil {
		return envelope{}, false, nil // not an object: a plain value
	}
	if _, ok := probe["$enc"]; !ok {
		return envelope{}, false, nil
	}
	var e envelope
	if err := json.Unmarshal(stored, &e); err != nil {
		return envelope{}, true, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.Enc != Algorithm {
		return e, true, fmt.Errorf("%w: unsupported algorithm %q", ErrMalformed, e.Enc)
	}
	return e, true, nil
}

// SealedKeyID returns the key id of a sealed value, and false for a plain one.
func SealedKeyID(stored []byte) (string, bool) {
	e, ok, _ := parseEnvelope(stored)
	return e.KID, ok
}

// Open returns the plaintext of a stored value: an envelope is opened with the key it names (primary or previous);
// a plain value (written before encryption) is returned as it is.
func (r *Keyring) Open(serverID string, stored []byte) (json.RawMessage, error) {
	return r.open(aad(serverID), "connection_config of server "+serverID, stored)
}

// open opens stored (what names it in errors) with additional data ad; a plain value is returned as it is.
func (r *Keyring) open(ad []byte, what string, stored []byte) ([]byte, error) {
	e, sealed, err := parseEnvelope(stored)
	if err != nil {
		return nil, fmt.Errorf("crypt: %s: %w", what, err)
	}
	if !sealed {
		return stored, nil
	}
	k := r.byID(e.KID)
	if k == nil {
		known := "MCP_CREDENTIAL_KEY is " + r.primary.id
		if r.previous != nil {
			known += ", MCP_CREDENTIAL_KEY_PREVIOUS is " + r.previous.id
		}
		return nil, fmt.Errorf("crypt: %s is %w %s (%s): set that key as "+
			"MCP_CREDENTIAL_KEY or MCP_CREDENTIAL_KEY_PREVIOUS", what, ErrUnknownKey, e.KID, known)
	}
	nonce, err1 := base64.StdEncoding.DecodeString(e.Nonce)
	ct, err2 := base64.StdEncoding.DecodeString(e.CT)
	if err1 != nil || err2 != nil || len(nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("crypt: %s: %w: bad nonce or ciphertext encoding", what, ErrMalformed)
	}
	plain, err := k.aead.Open(nil, nonce, ct, ad)
	if err != nil {
		return nil, fmt.Errorf("crypt: %s %w under key %s (tampered with, or copied from another row)", what,
			ErrAuthentication, e.KID)
	}
	return plain, nil
}

// ParseKey reads a key written as base64 (standard or URL alphabet, padded or not) or as 64 hex characters. The
// error never contains the input.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("want %d bytes as base64 or %d hex characters, got %d bytes", KeySize, 2*KeySize, len(b))
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("want %d bytes as base64 or %d hex characters (e.g. `openssl rand -base64 32`)", KeySize, 2*KeySize)
}

// EncodeKey writes a key the way ParseKey reads it (standard base64).
func EncodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// NewKey returns a fresh random key.
func NewKey() []byte {
	b := make([]byte, KeySize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return b
}

// LoadOrCreateKeyFile reads the key in path, or creates the file (mode 0600, its directory 0700) with a new random
// key when it does not exist. created reports that the key is new. Two processes starting at once agree on one key:
// the file appears atomically, complete, or not at all.
func LoadOrCreateKeyFile(path string) (k []byte, created bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		k, err := ParseKey(string(b))
		if err != nil {
			return nil, false, fmt.Errorf("credential key file %s: %w", path, err)
		}
		return k, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("read credential key file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create directory for the credential key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".credential-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("create credential key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	k = NewKey()
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(EncodeKey(k) + "\n")
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("write credential key file: %w", err)
	}
	// link fails when another process created the file first: then its key wins.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return LoadOrCreateKeyFile(path)
		}
		return nil, false, fmt.Errorf("create credential key file: %w", err)
	}
	return k, true, nil
}
