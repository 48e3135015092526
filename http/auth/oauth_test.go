package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/internal/errcode"
)

const resource = "https://mcp.example.com/mcp"

// oauthFixture is an issuer of the tests (discovery and JWKS over HTTP, an ES256 key made here) and a token maker.
type oauthFixture struct {
	srv *httptest.Server
	key jose.JSONWebKey
}

func newOAuthFixture(t *testing.T) *oauthFixture {
	t.Helper()
	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &oauthFixture{key: jose.JSONWebKey{Key: pk, KeyID: "k1", Algorithm: string(jose.ES256)}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": f.srv.URL, "jwks_uri": f.srv.URL + "/jwks"})
		case "/jwks":
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{f.key.Public()}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *oauthFixture) verifier(t *testing.T) *oauth.Verifier {
	t.Helper()
	v, err := oauth.New(context.Background(), oauth.Config{Issuer: f.srv.URL, Audience: resource, Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// token is an access token for resource with sub and scope, plus extra claims.
func (f *oauthFixture) token(t *testing.T, sub, scope string, extra map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: f.key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]any{"iss": f.srv.URL, "aud": resource, "sub": sub, "scope": scope, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestMiddlewareOAuth: with an issuer, access tokens authenticate beside static tokens; the subject is the caller;
// scopes map onto roles; a 401 points at the RFC 9728 metadata, which is served without a token; a 403 names the
// OAuth scope needed.
func TestMiddlewareOAuth(t *testing.T) {
	f := newOAuthFixture(t)
	static, err := Parse("ops:"+adminTok, "", "")
	if err != nil {
		t.Fatal(err)
	}
	toks := static.WithOAuth(f.verifier(t))
	var seen Identity
	var info *sdkauth.TokenInfo
	h := Middleware(toks, Policy{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = FromContext(r.Context())
		info = sdkauth.TokenInfoFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	do := func(method, path, authz string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		seen, info = Identity{}, nil
		h.ServeHTTP(rec, req)
		return rec
	}
	metaURL := "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"

	expired := f.token(t, "alice", "aggregator:client", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	otherAud := f.token(t, "alice", "aggregator:client", map[string]any{"aud": "https://elsewhere.example.com/mcp"})
	for name, authz := range map[string]string{"none": "", "garbage": "Bearer a.b.c", "expired": "Bearer " + expired,
		"other audience": "Bearer " + otherAud, "alg none": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."} {
		rec := do("POST", "/mcp", authz)
		ch := rec.Header().Get("WWW-Authenticate")
		if rec.Code != http.StatusUnauthorized || !strings.Contains(ch, `resource_metadata="`+metaURL+`"`) {
			t.Fatalf("%s: %d, WWW-Authenticate %q", name, rec.Code, ch)
		}
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error_code"] != errcode.Unauthorized || len(body) != 2 ||
			strings.Contains(rec.Body.String(), "exp") || strings.Contains(rec.Body.String(), "aud") {
			t.Fatalf("%s: 401 body %s", name, rec.Body)
		}
		// The go-sdk's client parses the challenge: it must find the metadata URL.
		cs, err := oauthex.ParseWWWAuthenticate([]string{ch})
		if err != nil || len(cs) != 1 || cs[0].Params["resource_metadata"] != metaURL {
			t.Fatalf("%s: challenge %q parses to %+v, %v", name, ch, cs, err)
		}
	}

	// A client-scope token: the subject is the caller, client role, its own session key.
	tok := f.token(t, "alice", "openid aggregator:client", map[string]any{"email": "alice@example.com", "client_id": "ide"})
	if rec := do("POST", "/mcp", "Bearer "+tok); rec.Code != http.StatusTeapot || seen.Name != "alice" || !seen.OAuth ||
		seen.Scope != ScopeClient || seen.ClientID != "ide" || seen.Email != "alice@example.com" || seen.IP == "" ||
		seen.Claims["client_id"] != "ide" {
		t.Fatalf("client token: %d %+v", rec.Code, seen)
	}
	if id, ok := FromTokenInfo(info); !ok || id.Name != "alice" || info.UserID != "sub:alice" {
		t.Fatalf("TokenInfo %+v", info)
	}
	if seen.Actor() != "alice (alice@example.com)" || seen.RateKey() != "sub:alice" {
		t.Fatalf("actor %q, rate key %q", seen.Actor(), seen.RateKey())
	}
	// Too weak for an admin route: 403 naming the OAuth scope.
	rec := do("POST", "/other", "Bearer "+tok)
	ch := rec.Header().Get("WWW-Authenticate")
	if rec.Code != http.StatusForbidden || !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="aggregator:admin"`) ||
		!strings.Contains(ch, `resource_metadata="`+metaURL+`"`) || !strings.Contains(rec.Body.String(), errcode.Forbidden) {
		t.Fatalf("client token on an admin route: %d %q %s", rec.Code, ch, rec.Body)
	}
	// No scope of ours: authenticated, but every route is 403 naming the client scope.
	bare := f.token(t, "bob", "openid profile", nil)
	if rec := do("POST", "/mcp", "Bearer "+bare); rec.Code != http.StatusForbidden ||
		!strings.Contains(rec.Header().Get("WWW-Authenticate"), `scope="aggregator:client"`) {
		t.Fatalf("token without our scopes: %d %v", rec.Code, rec.Header())
	}
	// The admin scope: admin.
	if rec := do("POST", "/other", "Bearer "+f.token(t, "carol", "aggregator:admin", nil)); rec.Code != http.StatusTeapot || seen.Scope != ScopeAdmin {
		t.Fatalf("admin token: %d %+v", rec.Code, seen)
	}
	// Static tokens keep working beside the issuer.
	if rec := do("POST", "/other", "Bearer "+adminTok); rec.Code != http.StatusTeapot || seen.Name != "ops" || seen.OAuth {
		t.Fatalf("static admin token: %d %+v", rec.Code, seen)
	}
	// The metadata needs no token, at the root and in the path form.
	for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		rec := do("GET", p, "")
		var doc oauthex.ProtectedResourceMetadata
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || rec.Code != http.StatusOK || doc.Resource != resource ||
			len(doc.AuthorizationServers) != 1 || doc.AuthorizationServers[0] != f.srv.URL {
			t.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body)
		}
	}
}

// TestChallengeWithoutOAuth: without an issuer the challenges stay what they were.
func TestChallengeWithoutOAuth(t *testing.T) {
	var toks *Tokens
	if got := toks.Challenge(http.StatusUnauthorized, ScopeClient); got != `Bearer realm="mcp-aggregator"` {
		t.Fatalf("401: %q", got)
	}
	if got := toks.Challenge(http.StatusForbidden, ScopeAdmin); got != `Bearer realm="mcp-aggregator", error="insufficient_scope", scope="admin"` {
		t.Fatalf("403: %q", got)
	}
	if toks.Enabled() || toks.WithOAuth(nil).Enabled() {
		t.Fatal("enabled without tokens or issuer")
	}
}

// FuzzBearerToken: the Authorization header parser never panics, and what it returns is a non-empty token without
// blanks that the header contains.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  a.b.c ", "Basic x", "Bearer", "Bearer a b", "", "Bearer \t", "BEARER\tx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := BearerToken(header)
		if !ok {
			if tok != "" {
				t.Fatalf("refused %q but returned %q", header, tok)
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t") || !strings.Contains(header, tok) {
			t.Fatalf("BearerToken(%q) = %q", header, tok)
		}
	})
}
