// Package oauth makes the aggregator an OAuth 2.1 protected resource (the MCP authorization specification): it
// verifies the JWT access tokens an organisation's OpenID provider issues, and describes the resource to clients
// with RFC 9728 protected-resource metadata and the WWW-Authenticate challenge that points at it.
//
// Why a package of its own: token verification is security-critical and self-contained (issuer discovery, a cached
// JWKS refetched on an unknown key id, claims checks with a small leeway), and it must not know about scopes of the
// aggregator, Fiber or the actors; package auth maps what it returns (subject, client, scopes) onto the
// aggregator's identities. All JOSE work (parsing, signature checks, key sets) is done by go-jose; this package only
// chooses what to accept: an allow-list of asymmetric algorithms (never "none", never HMAC, so a public key can never
// be used as an HMAC secret), the issuer, the audience (RFC 8707), exp and nbf.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// DefaultAlgorithms is the allow-list of signature algorithms: asymmetric only. "none" and the HMAC family are
// never accepted, whatever Config.Algorithms says.
var defaultAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// DefaultAlgorithms returns the default allow-list of signature algorithms.
func DefaultAlgorithms() []jose.SignatureAlgorithm {
	return append([]jose.SignatureAlgorithm(nil), defaultAlgorithms...)
}

// Defaults of Config.
const (
	DefaultLeeway          = 30 * time.Second
	DefaultRefreshInterval = 30 * time.Second
	DefaultMaxKeyAge       = time.Hour
	DefaultFetchTimeout    = 10 * time.Second
	DefaultAdminScope      = "aggregator:admin"
	DefaultClientScope     = "aggregator:client"
)

// MaxTokenBytes bounds a presented token: a longer one is refused before any parsing.
const MaxTokenBytes = 16 << 10

// maxDocumentBytes bounds a discovery document or a JWKS read from the issuer.
const maxDocumentBytes = 1 << 20

// minRSABits is the smallest RSA key of the JWKS that is used.
const minRSABits = 2048

// ErrInvalidToken is every refusal of a presented token. Its message says nothing about why (the reason is for the
// daemon's debug log only, through errors.Unwrap): a client learns only that the token was not accepted.
var ErrInvalidToken = errors.New("invalid access token")

// Config configures a Verifier.
type Config struct {
	// Issuer is the issuer URL of the authorization server (MCP_AGGREGATOR_OIDC_ISSUER): https, or http on a
	// loopback host (development and tests).
	Issuer string
	// Audience is the aud a token must carry (MCP_AGGREGATOR_OIDC_AUDIENCE; RFC 8707). A trailing slash is not
	// significant.
	Audience string
	// Resource is the protected resource's identifier clients see in the metadata: the public URL of /mcp.
	Resource string
	// AdminScope and ClientScope are the scope names that map to the aggregator's admin and client roles
	// (defaults aggregator:admin and aggregator:client).
	AdminScope, ClientScope string
	// Algorithms is the allow-list of signature algorithms (nil: DefaultAlgorithms). Symmetric algorithms and
	// "none" are refused by New.
	Algorithms []jose.SignatureAlgorithm
	// Leeway is the clock skew allowed on exp, nbf and iat (0: DefaultLeeway).
	Leeway time.Duration
	// RefreshInterval is the least time between two JWKS fetches (an unknown kid, or keys older than MaxKeyAge):
	// a flood of tokens with made-up key ids makes at most one fetch per interval (0: DefaultRefreshInterval).
	RefreshInterval time.Duration
	// MaxKeyAge is how long fetched keys are used before they are fetched again; a failed fetch keeps them
	// (0: DefaultMaxKeyAge).
	MaxKeyAge time.Duration
	// HTTPClient fetches the discovery document and the JWKS (nil: a client with FetchTimeout).
	HTTPClient *http.Client
	// FetchTimeout bounds one fetch from the issuer (0: DefaultFetchTimeout).
	FetchTimeout time.Duration
	// Logger receives key refreshes and outages (nil: discard).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Claims is what a verified token says about its caller.
type Claims struct {
	// Subject is the sub claim (for a token without sub, e.g. some client-credentials tokens, the client id).
	Subject string
	// ClientID is the OAuth client the token was issued to (client_id, azp, appid or cid), when the token says.
	ClientID string
	// Email and Name are the email and name (or preferred_username) claims, when present.
	Email, Name string
	// Scopes are the token's scopes (the scope claim, space-separated, or scp, a list or a string).
	Scopes []string
	// Expiry is the exp claim.
	Expiry time.Time
	// All is every claim of the token as JSON decoded it (numbers are float64), for the access policy's rules
	// (gateway/policy: claims.groups, say). Read only.
	All map[string]any
}

// HasScope reports whether the token carries scope s.
func (c Claims) HasScope(s string) bool {
	for _, x := range c.Scopes {
		if x == s {
			return true
		}
	}
	return false
}

// Verifier checks access tokens of one issuer. It is safe for concurrent use.
type Verifier struct {
	cfg      Config
	issuer   string // as the discovery document spells it: the iss a token must carry
	jwksURI  string
	meta     providerMeta
	algs     []jose.SignatureAlgorithm
	client   *http.Client
	log      *slog.Logger
	now      func() time.Time
	keys     atomic.Pointer[keySet]
	fetchMu  sync.Mutex // one fetch at a time; guards lastTry
	lastTry  time.Time
	fetchCnt atomic.Int64
}

// keySet is the usable keys of one JWKS fetch.
type keySet struct {
	keys    []jose.JSONWebKey
	fetched time.Time
}

// New discovers the issuer's metadata and fetches its keys. An issuer that cannot be reached, or whose documents
// are malformed, is an error naming the issuer: the daemon refuses to start rather than reject every token.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if err := CheckURL(cfg.Issuer); err != nil {
		return nil, fmt.Errorf("issuer %q: %w", cfg.Issuer, err)
	}
	if strings.TrimSpace(cfg.Audience) == "" {
		return nil, errors.New("an audience is required")
	}
	if cfg.AdminScope == "" {
		cfg.AdminScope = DefaultAdminScope
	}
	if cfg.ClientScope == "" {
		cfg.ClientScope = DefaultClientScope
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.MaxKeyAge <= 0 {
		cfg.MaxKeyAge = DefaultMaxKeyAge
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms()
	}
	for _, a := range algs {
		if !isAsymmetric(a) {
			return nil, fmt.Errorf("signature algorithm %q is not allowed: only asymmetric algorithms (%v)", a, defaultAlgorithms)
		}
	}
	v := &Verifier{cfg: cfg, algs: algs, client: cfg.HTTPClient, log: cfg.Logger, now: cfg.Now}
	if v.client == nil {
		v.client = &http.Client{Timeout: cfg.FetchTimeout}
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	if v.now == nil {
		v.now = time.Now
	}
	meta, err := v.discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("issuer %s unreachable or not an OAuth authorization server: %w", cfg.Issuer, err)
	}
	v.meta, v.issuer, v.jwksURI = meta, meta.Issuer, meta.JWKSURI
	set, err := v.fetchKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("issuer %s: keys (%s): %w", cfg.Issuer, v.jwksURI, err)
	}
	v.lastTry = v.now()
	v.keys.Store(set)
	return v, nil
}

// Issuer is the issuer identifier tokens must carry in iss.
func (v *Verifier) Issuer() string { return v.issuer }

// AdminScope and ClientScope are the scope names of the aggregator's two roles.
func (v *Verifier) AdminScope() string  { return v.cfg.AdminScope }
func (v *Verifier) ClientScope() string { return v.cfg.ClientScope }

// Resource is the protected resource's identifier (the public URL of /mcp).
func (v *Verifier) Resource() string { return v.cfg.Resource }

// KeyFetches counts the JWKS fetches made, the first one included (for tests and metrics).
func (v *Verifier) KeyFetches() int64 { return v.fetchCnt.Load() }

// Verify checks a presented access token: its syntax, its signature by a key of the issuer's JWKS with an allowed
// algorithm, iss, aud, exp (required) and nbf. A refusal is ErrInvalidToken, wrapping the reason, which is logged
// at debug level (never the token) so an operator can see why a provider's tokens do not fit.
func (v *Verifier) Verify(ctx context.Context, raw string) (Claims, error) {
	c, err := v.verify(ctx, raw)
	if err != nil {
		v.log.LogAttrs(ctx, slog.LevelDebug, "access token refused", slog.String("issuer", v.issuer), slog.String("reason", err.Error()))
	}
	return c, err
}

func (v *Verifier) verify(ctx context.Context, raw string) (Claims, error) {
	if raw == "" || len(raw) > MaxTokenBytes || strings.Count(raw, ".") != 2 {
		return Claims{}, invalid("not a compact JWS")
	}
	tok, err := jwt.ParseSigned(raw, v.algs)
	if err != nil {
		return Claims{}, invalid("parse: %v", err)
	}
	if len(tok.Headers) != 1 {
		return Claims{}, invalid("want one signature")
	}
	h := tok.Headers[0]
	set := v.currentKeys(ctx)
	cands := candidates(set, h)
	if len(cands) == 0 && h.KeyID != "" && !hasKeyID(set, h.KeyID) {
		// An unknown kid: the issuer may have rotated its keys. Refetch (at most once per interval).
		set = v.refresh(ctx, "unknown key id", true)
		cands = candidates(set, h)
	}
	if len(cands) == 0 {
		return Claims{}, invalid("no key for kid %q alg %s", h.KeyID, h.Algorithm)
	}
	var std jwt.Claims
	var ext extraClaims
	var all map[string]any
	verified := false
	for _, k := range cands {
		if err = tok.Claims(k.Key, &std, &ext, &all); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Claims{}, invalid("signature: %v", err)
	}
	if std.Expiry == nil {
		return Claims{}, invalid("no exp")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: v.issuer, Time: v.now()}, v.cfg.Leeway); err != nil {
		return Claims{}, invalid("claims: %v", err)
	}
	if !oauthex.MatchesResource(std.Audience, v.cfg.Audience) {
		return Claims{}, invalid("audience %q does not include %q", []string(std.Audience), v.cfg.Audience)
	}
	c := Claims{Subject: std.Subject, ClientID: ext.clientID(), Email: string(ext.Email), Name: string(ext.Name),
		Scopes: ext.scopes(), Expiry: std.Expiry.Time(), All: all}
	if c.Name == "" {
		c.Name = string(ext.PreferredUsername)
	}
	if c.Subject == "" {
		c.Subject = c.ClientID
	}
	if c.Subject == "" {
		return Claims{}, invalid("neither sub nor a client id")
	}
	return c, nil
}

// invalid is ErrInvalidToken with a reason for logs.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// candidates are the keys of set that may have signed a token with header h: its kid (when it has one) and a
// key algorithm, if the key names one, equal to the token's.
func candidates(set *keySet, h jose.Header) []jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range set.keys {
		if h.KeyID != "" && k.KeyID != h.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		out = append(out, k)
	}
	return out
}

// hasKeyID reports whether set has a key with id kid.
func hasKeyID(set *keySet, kid string) bool {
	if set == nil {
		return false
	}
	for _, k := range set.keys {
		if k.KeyID == kid {
			return true
		}
	}
	return false
}

// currentKeys returns the cached keys, refetching them first when they are older than MaxKeyAge, unless a fetch
// is under way: then the cached keys serve (a slow or hanging issuer never holds up tokens of known keys).
func (v *Verifier) currentKeys(ctx context.Context) *keySet {
	set := v.keys.Load()
	if set != nil && v.now().Sub(set.fetched) < v.cfg.MaxKeyAge {
		return set
	}
	return v.refresh(ctx, "keys older than their maximum age", false)
}

// refresh fetches the JWKS again unless a fetch was tried less than RefreshInterval ago, and returns the keys to
// use: the new ones, or the cached ones when the issuer cannot be reached (an outage keeps the keys it has). With
// wait false it does not wait for a fetch under way and returns the cached keys.
func (v *Verifier) refresh(ctx context.Context, why string, wait bool) *keySet {
	if wait {
		v.fetchMu.Lock()
	} else if !v.fetchMu.TryLock() {
		return v.keys.Load()
	}
	defer v.fetchMu.Unlock()
	now := v.now()
	if now.Sub(v.lastTry) < v.cfg.RefreshInterval {
		return v.keys.Load()
	}
	v.lastTry = now
	// The fetch serves every waiting request: a caller hanging up must not cancel it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.cfg.FetchTimeout)
	defer cancel()
	set, err := v.fetchKeys(fctx)
	if err != nil {
		v.log.LogAttrs(ctx, slog.LevelWarn, "OAuth issuer keys not refreshed; keeping the cached keys",
			slog.String("issuer", v.issuer), slog.String("reason", why), slog.Any("error", err))
		return v.keys.Load()
	}
	v.log.LogAttrs(ctx, slog.LevelInfo, "OAuth issuer keys refreshed", slog.String("issuer", v.issuer),
		slog.String("reason", why), slog.Int("keys", len(set.keys)))
	v.keys.Store(set)
	return set
}

// isAsymmetric reports whether a is a signature algorithm of the default allow-list.
func isAsymmetric(a jose.SignatureAlgorithm) bool {
	for _, x := range defaultAlgorithms {
		if a == x {
			return true
		}
	}
	return false
}

// CheckURL accepts an https URL, or an http URL whose host is loopback, without query or fragment.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("want an absolute URL without query, fragment or user info")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopbackHost(u.Hostname()) {
			return nil
		}
		return errors.New("http is only allowed on a loopback host; use https")
	}
	return errors.New("want an https URL")
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
