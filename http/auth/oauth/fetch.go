package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// providerMeta is what the aggregator reads of the issuer's discovery document (OpenID Connect Discovery or
// RFC 8414).
type providerMeta struct {
	Issuer                string   `json:"issuer"`
	JWKSURI               string   `json:"jwks_uri"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	ScopesSupported       []string `json:"scopes_supported"`
}

// discoveryURLs are where the metadata of issuer may be: OpenID Connect Discovery (issuer +
// /.well-known/openid-configuration) first, then RFC 8414 (the well-known path inserted before the issuer's path),
// then the OpenID form with the path inserted the same way.
func discoveryURLs(issuer string) []string {
	u, _ := url.Parse(issuer) // checked by New
	path := strings.TrimSuffix(u.Path, "/")
	origin := u.Scheme + "://" + u.Host
	out := []string{origin + path + "/.well-known/openid-configuration",
		origin + "/.well-known/oauth-authorization-server" + path}
	if path != "" {
		out = append(out, origin+"/.well-known/openid-configuration"+path)
	}
	return out
}

// discover reads the issuer's metadata from the first discovery URL that answers 200. The document's issuer must be
// the configured one (a trailing slash aside) and its jwks_uri an https (or loopback http) URL.
func (v *Verifier) discover(ctx context.Context) (providerMeta, error) {
	var errs []error
	for _, u := range discoveryURLs(v.cfg.Issuer) {
		var m providerMeta
		if err := v.getJSON(ctx, u, &m); err != nil {
			errs = append(errs, err)
			continue
		}
		if strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(v.cfg.Issuer, "/") {
			return providerMeta{}, fmt.Errorf("%s names issuer %q, not %q", u, m.Issuer, v.cfg.Issuer)
		}
		if m.JWKSURI == "" {
			return providerMeta{}, fmt.Errorf("%s has no jwks_uri", u)
		}
		if err := CheckURL(m.JWKSURI); err != nil {
			return providerMeta{}, fmt.Errorf("%s: jwks_uri %q: %w", u, m.JWKSURI, err)
		}
		return m, nil
	}
	return providerMeta{}, errors.Join(errs...)
}

// maxKeys bounds the keys kept of one JWKS: a token without kid is tried against each.
const maxKeys = 32

// fetchKeys reads the JWKS and keeps the keys that can verify a signature: public, asymmetric (RSA of at least
// 2048 bits, ECDSA, Ed25519), not marked for encryption only; at most maxKeys of them. A JWKS without such a key
// is an error.
func (v *Verifier) fetchKeys(ctx context.Context) (*keySet, error) {
	v.fetchCnt.Add(1)
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := v.getJSON(ctx, v.jwksURI, &raw); err != nil {
		return nil, err
	}
	set := &keySet{fetched: v.now()}
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil {
			continue // a key of a type go-jose does not know (or malformed) is skipped, not fatal
		}
		if usable(k) && len(set.keys) < maxKeys {
			set.keys = append(set.keys, k)
		}
	}
	if len(set.keys) == 0 {
		return nil, errors.New("the JWKS has no public signing key")
	}
	return set, nil
}

// usable reports whether k can verify a token signature.
func usable(k jose.JSONWebKey) bool {
	if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
		return false
	}
	if k.Algorithm != "" && !isAsymmetric(jose.SignatureAlgorithm(k.Algorithm)) {
		return false
	}
	switch pk := k.Key.(type) {
	case *rsa.PublicKey:
		return pk.N.BitLen() >= minRSABits
	case *ecdsa.PublicKey, ed25519.PublicKey:
		return true
	}
	return false
}

// getJSON GETs url and decodes its JSON body (at most maxDocumentBytes) into dst.
func (v *Verifier) getJSON(ctx context.Context, url string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocumentBytes))
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: document larger than %d bytes", url, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
