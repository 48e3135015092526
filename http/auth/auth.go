// Package auth is the aggregator's bearer-token authentication and scope authorization, shared by the REST app
// (Fiber) and the MCP listener (net/http), plus the per-client rate limiter of tool calls.
//
// Why a package of its own: both front ends must make the very same decisions (which token is valid, which scope a
// route needs, who the caller is for the audit log and the rate limit), and the MCP meta-tools must repeat the
// scope decision per call because one MCP server is shared by every session. Keeping tokens, policy and identity
// here, free of Fiber and of the handlers, lets all three use one implementation and test it once.
//
// Tokens come from MCP_AGGREGATOR_ADMIN_TOKENS / MCP_AGGREGATOR_CLIENT_TOKENS and MCP_AGGREGATOR_TOKENS_FILE
// (READING.md, "Auth"). Only their SHA-256 is kept; a presented token is hashed and compared with every configured
// hash in constant time. With no token at all, auth is off: every caller is an anonymous admin, which the daemon
// only allows on loopback listeners.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Scope is what a caller may do. Scopes are ordered: a higher scope allows everything a lower one does.
type Scope int

const (
	// ScopeNone marks an open route (GET /health, /metrics when configured open); no caller has it.
	ScopeNone Scope = iota
	// ScopeClient may list and read servers and tools, search, call tools and use the MCP endpoints.
	ScopeClient
	// ScopeAdmin may do everything, in particular manage servers and read the audit log.
	ScopeAdmin
)

func (s Scope) String() string {
	switch s {
	case ScopeNone:
		return "none"
	case ScopeClient:
		return "client"
	case ScopeAdmin:
		return "admin"
	}
	return fmt.Sprintf("scope(%d)", int(s))
}

// MinTokenLength is the shortest token accepted at start.
const MinTokenLength = 16

// AnonymousName is the actor of every request while auth is off.
const AnonymousName = "anonymous"

// Identity is who made a request: the token's name and scope, and the client address.
type Identity struct {
	Name  string
	Scope Scope
	// Anonymous is set while auth is off (no token configured): the caller is an admin known only by its IP.
	Anonymous bool
	IP        string
}

// Anonymous is the identity of every caller while auth is off.
func Anonymous(ip string) Identity {
	return Identity{Name: AnonymousName, Scope: ScopeAdmin, Anonymous: true, IP: ip}
}

// Allows reports whether the identity may do what needs scope s.
func (id Identity) Allows(s Scope) bool { return s <= id.Scope }

// RateKey names the caller's rate limit bucket: the token name, or the IP while auth is off.
func (id Identity) RateKey() string {
	if id.Anonymous || id.Name == "" {
		return "ip:" + id.IP
	}
	return "token:" + id.Name
}

type ctxKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	if seen, ok := ctx.Value(seenKey{}).(*Seen); ok {
		seen.set(id)
	}
	return context.WithValue(ctx, ctxKey{}, id)
}

// Seen receives the identity WithIdentity attaches further down a request's chain, so an access log wrapped
// outside the auth middleware can name the client. Safe for concurrent use.
type Seen struct {
	mu sync.Mutex
	id Identity
	ok bool
}

func (s *Seen) set(id Identity) {
	s.mu.Lock()
	s.id, s.ok = id, true
	s.mu.Unlock()
}

// Identity returns the identity recorded, if any.
func (s *Seen) Identity() (Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.ok
}

type seenKey struct{}

// WithSeen makes WithIdentity calls on ctx and the contexts derived from it record into seen.
func WithSeen(ctx context.Context, seen *Seen) context.Context {
	return context.WithValue(ctx, seenKey{}, seen)
}

// FromContext returns the identity WithIdentity put in ctx.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// token is one configured token; only its hash is kept.
type token struct {
	name  string
	scope Scope
	hash  [sha256.Size]byte
}

// Tokens is the set of configured tokens. The zero value and nil have no token: auth is off.
type Tokens struct {
	list []token
}

// Enabled reports whether any token is configured, i.e. whether requests must authenticate.
func (t *Tokens) Enabled() bool { return t != nil && len(t.list) > 0 }

// Count returns how many admin and client tokens are configured.
func (t *Tokens) Count() (admin, client int) {
	if t == nil {
		return 0, 0
	}
	for _, tok := range t.list {
		if tok.scope == ScopeAdmin {
			admin++
		} else {
			client++
		}
	}
	return admin, client
}

// Authenticate returns the identity of a presented token. The presented token is hashed and compared with every
// configured hash with crypto/subtle, without stopping at a match, so the time taken says nothing about which
// token (or how much of one) matched.
func (t *Tokens) Authenticate(presented string) (Identity, bool) {
	if !t.Enabled() || presented == "" {
		return Identity{}, false
	}
	h := sha256.Sum256([]byte(presented))
	found, idx := 0, 0
	for i := range t.list {
		eq := subtle.ConstantTimeCompare(h[:], t.list[i].hash[:])
		found |= eq
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	if found == 0 {
		return Identity{}, false
	}
	tok := t.list[idx]
	return Identity{Name: tok.name, Scope: tok.scope}, true
}

// BearerToken extracts the token of an "Authorization: Bearer <token>" header (scheme in any case).
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Parse builds the token set from the two comma-separated lists (entries "name:token" or "token") and the token
// file at path ("" for none; lines "scope name token", blank lines and # comments ignored). It reports every
// problem at once; messages name the variable, entry or line, never a token.
func Parse(admin, client, path string) (*Tokens, error) {
	t := &Tokens{}
	var errs []string
	seenName := map[string]string{}
	seenHash := map[[sha256.Size]byte]string{}
	add := func(where, name, value string, scope Scope) {
		if len(value) < MinTokenLength {
			errs = append(errs, fmt.Sprintf("%s: token shorter than %d characters", where, MinTokenLength))
			return
		}
		for i := 0; i < len(value); i++ {
			if value[i] <= ' ' || value[i] > '~' || value[i] == ',' {
				errs = append(errs, fmt.Sprintf("%s: token must be printable ASCII without spaces or commas", where))
				return
			}
		}
		h := sha256.Sum256([]byte(value))
		if name == "" {
			name = "token-" + hex.EncodeToString(h[:4])
		}
		if !nameRe.MatchString(name) {
			errs = append(errs, fmt.Sprintf("%s: token name must match %s", where, nameRe))
			return
		}
		if prev, ok := seenHash[h]; ok {
			errs = append(errs, fmt.Sprintf("%s: the same token is already configured (%s)", where, prev))
			return
		}
		if prev, ok := seenName[name]; ok {
			errs = append(errs, fmt.Sprintf("%s: token name %q is already used (%s)", where, name, prev))
			return
		}
		seenHash[h], seenName[name] = where, where
		t.list = append(t.list, token{name: name, scope: scope, hash: h})
	}
	errs = append(errs, walkEntries(admin, client, path, add)...)
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n  "))
	}
	return t, nil
}

// walkEntries calls fn with every token entry of the two comma-separated lists (entries "name:token" or "token")
// and of the token file at path ("" for none; lines "scope name token", blank lines and # comments ignored), in
// that order: where names the entry for messages (never the token), name is "" for an unnamed entry. It returns the
// problems of the entries' syntax.
func walkEntries(admin, client, path string, fn func(where, name, value string, scope Scope)) []string {
	var errs []string
	for _, v := range []struct {
		env   string
		raw   string
		scope Scope
	}{{"MCP_AGGREGATOR_ADMIN_TOKENS", admin, ScopeAdmin}, {"MCP_AGGREGATOR_CLIENT_TOKENS", client, ScopeClient}} {
		n := 0
		for _, entry := range strings.Split(v.raw, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			where := fmt.Sprintf("%s entry %d", v.env, n)
			name, value, named := strings.Cut(entry, ":")
			if !named {
				name, value = "", entry
			} else if name == "" {
				errs = append(errs, where+": empty token name before ':'")
				continue
			}
			fn(where, name, value, v.scope)
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_TOKENS_FILE: %v", err))
		}
		for i, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			where := fmt.Sprintf("MCP_AGGREGATOR_TOKENS_FILE %s line %d", path, i+1)
			f := strings.Fields(line)
			if len(f) != 3 {
				errs = append(errs, where+": want \"scope name token\"")
				continue
			}
			var scope Scope
			switch strings.ToLower(f[0]) {
			case "admin":
				scope = ScopeAdmin
			case "client":
				scope = ScopeClient
			default:
				errs = append(errs, where+": scope must be admin or client")
				continue
			}
			fn(where, f[1], f[2], scope)
		}
	}
	return errs
}

// FirstToken is the token a process of this daemon presents to another one (`aggregator stdio` relaying to
// `serve`): the first admin token of the configuration (the list, then the file), else the first client token, and
// where it was configured (for logs: never the token). Both empty when no token is configured.
func FirstToken(admin, client, path string) (token, where string, err error) {
	var first [2]struct{ token, where string }
	errs := walkEntries(admin, client, path, func(w, _, value string, scope Scope) {
		i := 1
		if scope == ScopeAdmin {
			i = 0
		}
		if first[i].token == "" {
			first[i].token, first[i].where = value, w
		}
	})
	if len(errs) > 0 {
		return "", "", errors.New(strings.Join(errs, "\n  "))
	}
	for _, f := range first {
		if f.token != "" {
			return f.token, f.where, nil
		}
	}
	return "", "", nil
}

// IsLoopback reports whether a listen address ("host:port") binds only loopback interfaces. An empty host (all
// interfaces) or a host name other than localhost is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckExposure refuses listen addresses beyond loopback while auth is off (READING.md, "Auth").
func CheckExposure(t *Tokens, addrs map[string]string) error {
	if t.Enabled() {
		return nil
	}
	var errs []string
	for name, addr := range addrs {
		if !IsLoopback(addr) {
			errs = append(errs, fmt.Sprintf("%s=%q is not a loopback address and no token is configured; "+
				"set MCP_AGGREGATOR_ADMIN_TOKENS, MCP_AGGREGATOR_CLIENT_TOKENS or MCP_AGGREGATOR_TOKENS_FILE, or listen on 127.0.0.1", name, addr))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return errors.New("refusing to start: " + strings.Join(errs, "\n  "))
	}
	return nil
}
