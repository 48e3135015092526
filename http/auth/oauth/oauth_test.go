package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testIssuer is an authorization server of the tests: discovery and JWKS over HTTP, with keys made in the test.
type testIssuer struct {
	srv *httptest.Server
	// oauthOnly serves only RFC 8414 metadata (no OpenID discovery).
	oauthOnly bool

	mu      sync.Mutex
	public  []jose.JSONWebKey
	down    bool
	onJWKS  func() // called before a JWKS answer, outside mu (nil: none)
	fetches atomic.Int64
}

func newTestIssuer(t *testing.T, oauthOnly bool) *testIssuer {
	t.Helper()
	ti := &testIssuer{oauthOnly: oauthOnly}
	ti.srv = httptest.NewServer(http.HandlerFunc(ti.serve))
	t.Cleanup(ti.srv.Close)
	return ti
}

func (ti *testIssuer) serve(w http.ResponseWriter, r *http.Request) {
	ti.mu.Lock()
	down, keys, onJWKS := ti.down, append([]jose.JSONWebKey(nil), ti.public...), ti.onJWKS
	ti.mu.Unlock()
	if onJWKS != nil && r.URL.Path == "/jwks" {
		onJWKS()
	}
	if down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	meta := map[string]any{"issuer": ti.srv.URL, "jwks_uri": ti.srv.URL + "/jwks", "token_endpoint": ti.srv.URL + "/token"}
	switch {
	case r.URL.Path == "/.well-known/openid-configuration" && !ti.oauthOnly, r.URL.Path == "/.well-known/oauth-authorization-server":
		_ = json.NewEncoder(w).Encode(meta)
	case r.URL.Path == "/jwks":
		ti.fetches.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
	default:
		http.NotFound(w, r)
	}
}

func (ti *testIssuer) setKeys(keys ...jose.JSONWebKey) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.public = nil
	for _, k := range keys {
		ti.public = append(ti.public, k.Public())
	}
}

func (ti *testIssuer) setDown(down bool) {
	ti.mu.Lock()
	ti.down = down
	ti.mu.Unlock()
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

const audience = "https://mcp.example.com/mcp"

func rsaKey(t *testing.T, kid string) jose.JSONWebKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}
}

func ecKey(t *testing.T, kid string) jose.JSONWebKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.ES256)}
}

func edKey(t *testing.T, kid string) jose.JSONWebKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.EdDSA)}
}

// sign makes a JWT with key (its kid in the header unless noKid) and claims.
func sign(t *testing.T, key jose.JSONWebKey, alg jose.SignatureAlgorithm, claims map[string]any, noKid bool) string {
	t.Helper()
	var sk jose.SigningKey
	if noKid {
		sk = jose.SigningKey{Algorithm: alg, Key: key.Key}
	} else {
		sk = jose.SigningKey{Algorithm: alg, Key: key}
	}
	s, err := jose.NewSigner(sk, (&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func newVerifier(t *testing.T, ti *testIssuer, c *clock, mod func(*Config)) *Verifier {
	t.Helper()
	cfg := Config{Issuer: ti.srv.URL, Audience: audience, Resource: audience, Now: c.Now}
	if mod != nil {
		mod(&cfg)
	}
	v, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func TestVerify(t *testing.T) {
	ti := newTestIssuer(t, false)
	rk, ek, dk := rsaKey(t, "r1"), ecKey(t, "e1"), edKey(t, "d1")
	ti.setKeys(rk, ek, dk)
	c := newClock()
	v := newVerifier(t, ti, c, nil)
	now := c.Now().Unix()
	good := func() map[string]any {
		return map[string]any{"iss": ti.srv.URL, "aud": audience, "sub": "alice", "exp": now + 300, "iat": now,
			"scope": "openid aggregator:client", "client_id": "cli", "email": "alice@example.com"}
	}
	with := func(k string, val any) map[string]any {
		m := good()
		if val == nil {
			delete(m, k)
		} else {
			m[k] = val
		}
		return m
	}
	without := func(keys ...string) map[string]any {
		m := good()
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&rk.Key.(*rsa.PrivateKey).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	hmacWithPublicKey := func() string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pubDER}, (&jose.SignerOptions{}).WithHeader("kid", "r1"))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := jwt.Signed(s).Claims(good()).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	tampered := func() string {
		parts := strings.Split(sign(t, rk, jose.RS256, good(), false), ".")
		m := good()
		m["scope"] = "aggregator:admin"
		parts[1] = b64(m)
		return strings.Join(parts, ".")
	}
	stranger := rsaKey(t, "r1") // same kid, another key: a forged signature

	cases := []struct {
		name  string
		token string
		ok    bool
		sub   string
	}{
		{"RS256", sign(t, rk, jose.RS256, good(), false), true, "alice"},
		{"ES256", sign(t, ek, jose.ES256, good(), false), true, "alice"},
		{"EdDSA", sign(t, dk, jose.EdDSA, good(), false), true, "alice"},
		{"no kid tries every key", sign(t, ek, jose.ES256, good(), true), true, "alice"},
		{"aud list with a trailing slash", sign(t, rk, jose.RS256, with("aud", []string{"other", audience + "/"}), false), true, "alice"},
		{"no sub: the client id", sign(t, rk, jose.RS256, with("sub", nil), false), true, "cli"},
		{"expired within leeway", sign(t, rk, jose.RS256, with("exp", now-10), false), true, "alice"},
		{"alg none", b64(map[string]string{"alg": "none", "kid": "r1"}) + "." + b64(good()) + ".", false, ""},
		{"alg none with signature", b64(map[string]string{"alg": "none"}) + "." + b64(good()) + ".c2ln", false, ""},
		{"HMAC with the public key as secret", hmacWithPublicKey(), false, ""},
		{"PS256 with an RS256 key", sign(t, rk, jose.PS256, good(), false), false, ""},
		{"tampered payload", tampered(), false, ""},
		{"signed by another key", sign(t, stranger, jose.RS256, good(), false), false, ""},
		{"wrong issuer", sign(t, rk, jose.RS256, with("iss", "https://evil.example.com"), false), false, ""},
		{"no issuer", sign(t, rk, jose.RS256, with("iss", nil), false), false, ""},
		{"wrong audience", sign(t, rk, jose.RS256, with("aud", "https://other.example.com/mcp"), false), false, ""},
		{"audience prefix", sign(t, rk, jose.RS256, with("aud", "https://mcp.example.com"), false), false, ""},
		{"no audience", sign(t, rk, jose.RS256, with("aud", nil), false), false, ""},
		{"expired", sign(t, rk, jose.RS256, with("exp", now-3600), false), false, ""},
		{"no exp", sign(t, rk, jose.RS256, with("exp", nil), false), false, ""},
		{"not yet valid", sign(t, rk, jose.RS256, with("nbf", now+3600), false), false, ""},
		{"issued in the future", sign(t, rk, jose.RS256, with("iat", now+3600), false), false, ""},
		{"neither sub nor client", sign(t, rk, jose.RS256, without("sub", "client_id"), false), false, ""},
		{"empty", "", false, ""},
		{"not a JWT", "abcdefghijklmnopqrstuvwxyz", false, ""},
		{"garbage segments", "a.b.c", false, ""},
		{"JWE shape", "a.b.c.d.e", false, ""},
		{"oversized", strings.Repeat("a", MaxTokenBytes) + ".b.c", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claims, err := v.Verify(context.Background(), tc.token)
			if tc.ok {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if claims.Subject != tc.sub {
					t.Fatalf("subject %q, want %q", claims.Subject, tc.sub)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", claims)
			}
			t.Logf("refused: %v", err)
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v is not ErrInvalidToken", err)
			}
			if ErrInvalidToken.Error() != "invalid access token" {
				t.Fatalf("the public message changed: %q", ErrInvalidToken)
			}
		})
	}
}

func TestVerifyClaims(t *testing.T) {
	ti := newTestIssuer(t, true) // RFC 8414 discovery only
	rk := rsaKey(t, "r1")
	ti.setKeys(rk)
	c := newClock()
	v := newVerifier(t, ti, c, nil)
	now := c.Now().Unix()
	cases := []struct {
		name   string
		claims map[string]any
		want   Claims
	}{
		{"scope string", map[string]any{"sub": "s", "scope": "a b  c", "azp": "kc", "preferred_username": "al"},
			Claims{Subject: "s", ClientID: "kc", Name: "al", Scopes: []string{"a", "b", "c"}}},
		{"scp list (Okta)", map[string]any{"sub": "s", "scp": []any{"a", 1, "b"}, "cid": "okta"},
			Claims{Subject: "s", ClientID: "okta", Scopes: []string{"a", "b"}}},
		{"scp string (Entra) and appid", map[string]any{"sub": "s", "scp": "x y", "appid": "app", "name": "N", "email": "e@x"},
			Claims{Subject: "s", ClientID: "app", Name: "N", Email: "e@x", Scopes: []string{"x", "y"}}},
		{"claims of other types are ignored", map[string]any{"sub": "s", "scope": 42, "email": map[string]any{}, "client_id": true},
			Claims{Subject: "s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.claims
			m["iss"], m["aud"], m["exp"] = ti.srv.URL, audience, now+60
			got, err := v.Verify(context.Background(), sign(t, rk, jose.RS256, m, false))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			tc.want.Expiry = time.Unix(now+60, 0)
			if got.Subject != tc.want.Subject || got.ClientID != tc.want.ClientID || got.Name != tc.want.Name ||
				got.Email != tc.want.Email || strings.Join(got.Scopes, " ") != strings.Join(tc.want.Scopes, " ") || !got.Expiry.Equal(tc.want.Expiry) {
				t.Fatalf("claims %+v, want %+v", got, tc.want)
			}
			if got.All["sub"] != "s" || got.All["iss"] != ti.srv.URL || len(got.All) != len(m) {
				t.Fatalf("All = %v, want every claim of %v", got.All, m)
			}
		})
	}
}

// TestKeyRotation: an unknown kid refetches the JWKS, at most once per refresh interval however many tokens ask;
// an issuer that goes down after the start keeps the cached keys working.
func TestKeyRotation(t *testing.T) {
	ti := newTestIssuer(t, false)
	k1, k2, k3 := rsaKey(t, "k1"), ecKey(t, "k2"), ecKey(t, "k3")
	ti.setKeys(k1)
	c := newClock()
	v := newVerifier(t, ti, c, func(cfg *Config) { cfg.RefreshInterval = time.Minute; cfg.MaxKeyAge = time.Hour })
	claims := func() map[string]any {
		return map[string]any{"iss": ti.srv.URL, "aud": audience, "sub": "bob", "exp": c.Now().Unix() + 300}
	}
	verify := func(tok string) error { _, err := v.Verify(context.Background(), tok); return err }
	if n := ti.fetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times at start, want 1", n)
	}
	if err := verify(sign(t, k1, jose.RS256, claims(), false)); err != nil {
		t.Fatalf("k1: %v", err)
	}
	// Rotation: k2 appears. The first fetch happened "now", so the refetch waits for the interval.
	ti.setKeys(k1, k2)
	if err := verify(sign(t, k2, jose.ES256, claims(), false)); err == nil {
		t.Fatal("k2 accepted before the refresh interval passed since the start's fetch")
	}
	c.Advance(time.Minute)
	if err := verify(sign(t, k2, jose.ES256, claims(), false)); err != nil {
		t.Fatalf("k2 after the interval: %v", err)
	}
	if n := ti.fetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times, want 2", n)
	}
	// A flood of made-up kids within the interval makes no fetch at all.
	for i := 0; i < 50; i++ {
		junk := ecKey(t, "junk")
		junk.KeyID = "junk-" + string(rune('a'+i%26))
		if err := verify(sign(t, junk, jose.ES256, claims(), false)); err == nil {
			t.Fatal("a token signed by an unknown key was accepted")
		}
	}
	if n := ti.fetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times after a flood of unknown kids, want still 2", n)
	}
	// The issuer goes down: known keys keep working, a new one cannot be learned, and nothing is lost.
	ti.setDown(true)
	c.Advance(2 * time.Minute)
	if err := verify(sign(t, k3, jose.ES256, claims(), false)); err == nil {
		t.Fatal("k3 accepted while the issuer is down")
	}
	if err := verify(sign(t, k1, jose.RS256, claims(), false)); err != nil {
		t.Fatalf("k1 while the issuer is down: %v", err)
	}
	c.Advance(2 * time.Hour) // past MaxKeyAge: the refresh fails, the keys stay
	if err := verify(sign(t, k2, jose.ES256, claims(), false)); err != nil {
		t.Fatalf("k2 past the keys' max age while the issuer is down: %v", err)
	}
	// Back up, with k1 revoked: the next refresh drops it.
	ti.setDown(false)
	ti.setKeys(k2, k3)
	c.Advance(2 * time.Minute)
	if err := verify(sign(t, k3, jose.ES256, claims(), false)); err != nil {
		t.Fatalf("k3 once the issuer is back: %v", err)
	}
	if err := verify(sign(t, k1, jose.RS256, claims(), false)); err == nil {
		t.Fatal("k1 accepted after the issuer dropped it")
	}
}

func TestNew(t *testing.T) {
	ti := newTestIssuer(t, false)
	ti.setKeys(rsaKey(t, "k"))
	hmacOnly := newTestIssuer(t, false)
	hmacOnly.mu.Lock()
	hmacOnly.public = []jose.JSONWebKey{{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "h", Algorithm: "HS256"}}
	hmacOnly.mu.Unlock()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak := newTestIssuer(t, false)
	weak.setKeys(jose.JSONWebKey{Key: small, KeyID: "w"})
	down := newTestIssuer(t, false)
	down.setKeys(rsaKey(t, "k"))
	down.setDown(true)
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()

	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Issuer: ti.srv.URL, Audience: audience}, ""},
		{"issuer trailing slash", Config{Issuer: ti.srv.URL + "/", Audience: audience}, ""},
		{"issuer down", Config{Issuer: down.srv.URL, Audience: audience}, "unreachable"},
		{"nothing listens", Config{Issuer: goneURL, Audience: audience}, "unreachable"},
		{"http beyond loopback", Config{Issuer: "http://idp.example.com", Audience: audience}, "https"},
		{"not a URL", Config{Issuer: "idp", Audience: audience}, "absolute URL"},
		{"no audience", Config{Issuer: ti.srv.URL}, "audience"},
		{"HMAC allowed", Config{Issuer: ti.srv.URL, Audience: audience, Algorithms: []jose.SignatureAlgorithm{jose.HS256}}, "not allowed"},
		{"none allowed", Config{Issuer: ti.srv.URL, Audience: audience, Algorithms: []jose.SignatureAlgorithm{"none"}}, "not allowed"},
		{"JWKS of symmetric keys only", Config{Issuer: hmacOnly.srv.URL, Audience: audience}, "no public signing key"},
		{"JWKS of a weak RSA key only", Config{Issuer: weak.srv.URL, Audience: audience}, "no public signing key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.FetchTimeout = 2 * time.Second
			_, err := New(context.Background(), tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestAllowList(t *testing.T) {
	ti := newTestIssuer(t, false)
	rk, ek := rsaKey(t, "r"), ecKey(t, "e")
	ti.setKeys(rk, ek)
	c := newClock()
	v := newVerifier(t, ti, c, func(cfg *Config) { cfg.Algorithms = []jose.SignatureAlgorithm{jose.ES256} })
	m := map[string]any{"iss": ti.srv.URL, "aud": audience, "sub": "s", "exp": c.Now().Unix() + 60}
	if _, err := v.Verify(context.Background(), sign(t, ek, jose.ES256, m, false)); err != nil {
		t.Fatalf("ES256: %v", err)
	}
	if _, err := v.Verify(context.Background(), sign(t, rk, jose.RS256, m, false)); err == nil {
		t.Fatal("RS256 accepted with an allow-list of ES256 only")
	}
}

func TestMetadata(t *testing.T) {
	ti := newTestIssuer(t, false)
	ti.setKeys(rsaKey(t, "k"))
	v := newVerifier(t, ti, newClock(), nil)
	if got, want := v.MetadataURL(), "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"; got != want {
		t.Fatalf("MetadataURL %q, want %q", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"https://h.example/", "https://h.example/.well-known/oauth-protected-resource"},
		{"http://127.0.0.1:8082/mcp/", "http://127.0.0.1:8082/.well-known/oauth-protected-resource/mcp"},
		{"api://aggregator", ""},
	} {
		if got := MetadataURL(tc.in); got != tc.want {
			t.Errorf("MetadataURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	h := v.MetadataHandler()
	for _, p := range []string{WellKnownPath, WellKnownPath + "/mcp"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body)
		}
		if doc["resource"] != audience || doc["authorization_servers"].([]any)[0] != ti.srv.URL ||
			strings.Join(toStrings(doc["scopes_supported"]), " ") != "aggregator:client aggregator:admin" {
			t.Fatalf("GET %s: %v", p, doc)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, WellKnownPath, nil))
	if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(rec.Body.String(), `"error_code":"METHOD_NOT_ALLOWED"`) {
		t.Fatalf("POST: %d %s", rec.Code, rec.Body)
	}
}

func toStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// FuzzVerify: no input makes Verify panic or accept a token not signed by the issuer's key.
func FuzzVerify(f *testing.F) {
	ti := newTestIssuerF(f)
	rk := jose.JSONWebKey{KeyID: "k", Algorithm: string(jose.ES256)}
	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	rk.Key = pk
	ti.setKeys(rk)
	v, err := New(context.Background(), Config{Issuer: ti.srv.URL, Audience: audience, RefreshInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: rk}, nil)
	good, _ := jwt.Signed(s).Claims(map[string]any{"iss": ti.srv.URL, "aud": audience, "sub": "s", "exp": time.Now().Add(time.Hour).Unix()}).Serialize()
	f.Add(good)
	f.Add(b64(map[string]string{"alg": "none"}) + "." + b64(map[string]any{"sub": "x"}) + ".")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(context.Background(), tok)
		if err == nil && tok != good {
			// Only the good token's signature verifies; any other accepted input is a forgery.
			parts := strings.Split(tok, ".")
			gparts := strings.Split(good, ".")
			if len(parts) != 3 || parts[2] != gparts[2] {
				t.Fatalf("accepted a token not signed by the issuer: %q -> %+v", tok, c)
			}
		}
	})
}

// newTestIssuerF is newTestIssuer for a fuzz test.
func newTestIssuerF(f *testing.F) *testIssuer {
	ti := &testIssuer{}
	ti.srv = httptest.NewServer(http.HandlerFunc(ti.serve))
	f.Cleanup(ti.srv.Close)
	return ti
}

// TestHangingIssuer: while a key fetch hangs on the issuer, tokens of known keys are verified with the cached keys
// instead of waiting behind it.
func TestHangingIssuer(t *testing.T) {
	ti := newTestIssuer(t, false)
	k1 := rsaKey(t, "k1")
	ti.setKeys(k1)
	c := newClock()
	v := newVerifier(t, ti, c, func(cfg *Config) { cfg.FetchTimeout = time.Minute })
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ti.mu.Lock()
	ti.onJWKS = func() {
		once.Do(func() { close(entered) })
		<-release
	}
	ti.mu.Unlock()
	defer close(release)
	claims := func() map[string]any {
		return map[string]any{"iss": ti.srv.URL, "aud": audience, "sub": "s", "exp": c.Now().Unix() + 300}
	}
	c.Advance(2 * DefaultMaxKeyAge)
	stranger := ecKey(t, "k9")
	go func() { _, _ = v.Verify(context.Background(), sign(t, stranger, jose.ES256, claims(), false)) }() // hangs in the fetch
	<-entered
	done := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), sign(t, k1, jose.RS256, claims(), false))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("known key while a fetch hangs: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a token of a known key waited behind the hanging key fetch")
	}
}
