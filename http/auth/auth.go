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
// hash in constant time. Beside them, an OAuth issuer (MCP_AGGREGATOR_OIDC_ISSUER, package oauth) may vouch for a
// caller with a JWT access token: its subject becomes the caller's name and its scopes map onto the two roles.
// With neither, auth is off: every caller is an anonymous admin, which the daemon only allows on loopback
// listeners.
package auth

import (
	"cmp"
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

	"github.com/mcpgw/aggregator/http/auth/oauth"
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

// Identity is who made a request: the token's name and scope, and the client address. For a caller with an access
// token of the OAuth issuer, Name is the token's subject (so a profile bound to that name binds the subject) and
// OAuth is set.
type Identity struct {
	Name  string
	Scope Scope
	// Anonymous is set while auth is off (no token configured): the caller is an admin known only by its IP.
	Anonymous bool
	IP        string
	// OAuth is set when an access token of the OAuth issuer authenticated the caller; ClientID (the OAuth client),
	// Email and FullName come from that token, when it says.
	OAuth                     bool
	ClientID, Email, FullName string
	// Claims are every claim of the OAuth access token (nil for static tokens and anonymous callers), which the
	// access policy's rules read. Shared, read only.
	Claims map[string]any
	// bearer is the OAuth access token itself (nil for static tokens): a per_user server may exchange it (RFC 8693)
	// for a backend token. A pointer, so that printing an Identity never prints the token.
	bearer *string
}

// AccessToken is the OAuth access token the caller authenticated with ("" for a static token or an anonymous
// caller). It is a credential: never log or answer it.
func (id Identity) AccessToken() string {
	if id.bearer == nil {
		return ""
	}
	return *id.bearer
}

// Anonymous is the identity of every caller while auth is off.
func Anonymous(ip string) Identity {
	return Identity{Name: AnonymousName, Scope: ScopeAdmin, Anonymous: true, IP: ip}
}

// Allows reports whether the identity may do what needs scope s.
func (id Identity) Allows(s Scope) bool { return s <= id.Scope }

// RateKey names the caller's rate limit bucket: the token name, the OAuth subject, or the IP while auth is off.
// A static token and an OAuth subject of the same name have separate buckets.
func (id Identity) RateKey() string {
	switch {
	case id.Anonymous || id.Name == "":
		return "ip:" + id.IP
	case id.OAuth:
		return "sub:" + id.Name
	}
	return "token:" + id.Name
}

// Actor names the caller in the audit log: the token's name, anonymous, or for an OAuth caller its subject
// followed by its email (else its name) in parentheses, when the token carries one: "8f1c... (jane@example.com)".
func (id Identity) Actor() string {
	if id.Anonymous || id.Name == "" {
		return AnonymousName
	}
	if id.OAuth {
		if who := cmp.Or(id.Email, id.FullName); who != "" && who != id.Name {
			return id.Name + " (" + who + ")"
		}
	}
	return id.Name
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

// Tokens is the set of configured tokens, and the OAuth issuer whose access tokens are accepted beside them
// (WithOAuth). The zero value and nil have no token and no issuer: auth is off.
type Tokens struct {
	list  []token
	oauth *oauth.Verifier
}

// Enabled reports whether any token or an issuer is configured, i.e. whether requests must authenticate.
func (t *Tokens) Enabled() bool { return t != nil && (len(t.list) > 0 || t.oauth != nil) }

// WithOAuth returns a copy of t that also accepts the access tokens v verifies (t may be nil).
func (t *Tokens) WithOAuth(v *oauth.Verifier) *Tokens {
	c := &Tokens{oauth: v}
	if t != nil {
		c.list = t.list
	}
	return c
}

// OAuth returns the issuer's verifier (nil when none is configured).
func (t *Tokens) OAuth() *oauth.Verifier {
	if t == nil {
		return nil
	}
	return t.oauth
}

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

// Verify returns the identity of a presented token: a configured static token, else an access token of the OAuth
// issuer, whose subject becomes the name and whose scopes map onto the roles (the admin scope gives admin, the
// client scope client, neither no scope at all: every route then answers 403). Why an access token was refused
// stays out of responses (the verifier logs it at debug level).
func (t *Tokens) Verify(ctx context.Context, presented string) (Identity, bool) {
	if id, ok := t.Authenticate(presented); ok {
		return id, true
	}
	v := t.OAuth()
	if v == nil || presented == "" {
		return Identity{}, false
	}
	c, err := v.Verify(ctx, presented)
	if err != nil {
		return Identity{}, false
	}
	id := Identity{Name: c.Subject, OAuth: true, ClientID: c.ClientID, Email: c.Email, FullName: c.Name, Claims: c.All, bearer: &presented}
	switch {
	case c.HasScope(v.AdminScope()):
		id.Scope = ScopeAdmin
	case c.HasScope(v.ClientScope()):
		id.Scope = ScopeClient
	}
	return id, true
}

// Authenticate returns the identity of a presented static token. The presented token is hashed and compared with every
// configured hash with crypto/subtle, without stopping at a match, so the time taken says nothing about which
// token (or how much of one) matched.
func (t *Tokens) Authenticate(presented string) (Identity, bool) {
	if t == nil || len(t.list) == 0 || presented == "" {
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

// CheckExposure refuses listen addresses beyond loopback while auth is off (READING.md, "Auth"): authOn says
// whether a token or an OAuth issuer is configured.
func CheckExposure(authOn bool, addrs map[string]string) error {
	if authOn {
		return nil
	}
	var errs []string
	for name, addr := range addrs {
		if !IsLoopback(addr) {
			errs = append(errs, fmt.Sprintf("%s=%q is not a loopback address and no token is configured; "+
				"set MCP_AGGREGATOR_ADMIN_TOKENS, MCP_AGGREGATOR_CLIENT_TOKENS, MCP_AGGREGATOR_TOKENS_FILE or MCP_AGGREGATOR_OIDC_ISSUER, or listen on 127.0.0.1", name, addr))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return errors.New("refusing to start: " + strings.Join(errs, "\n  "))
	}
	return nil
}
