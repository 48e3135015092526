// Package backendauth runs OAuth 2.1 for the callers of per_user servers whose backend is an OAuth protected
// resource (MCP authorization): the authorization code flow with PKCE each caller completes through a browser
// (Flows), and the token source a caller's own backend session sends and refreshes (SessionHandler). The client
// side is the go-sdk's (auth.AuthorizationCodeHandler: protected resource metadata, authorization server metadata,
// dynamic client registration, PKCE, the code exchange) and golang.org/x/oauth2 (refresh); this package only keeps
// the flows between the browser's steps, stores the grants sealed like callers' secrets, and sends every request
// through the daemon's outbound policy (Client).
package backendauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/oauth2"
)

// grantKind marks a stored caller's secret that is an OAuth grant rather than a secret the caller typed.
const grantKind = "mcpgw.oauth-grant.v1"

// Grant is what the aggregator keeps for one caller of one OAuth backend: the token (access, refresh, expiry) and
// the client it was issued to, enough to refresh it. It is stored as the caller's secret (persistence.UserSecret),
// sealed by the encrypting store; it is never logged or answered.
type Grant struct {
	Token        *oauth2.Token    `json:"token"`
	ClientID     string           `json:"client_id"`
	ClientSecret string           `json:"client_secret,omitempty"`
	TokenURL     string           `json:"token_url"`
	AuthStyle    oauth2.AuthStyle `json:"auth_style,omitempty"`
	Scopes       []string         `json:"scopes,omitempty"`
	// RevocationURL is the authorization server's revocation endpoint (RFC 7009), where the tokens are revoked
	// when the caller's credential is removed ("" none advertised).
	RevocationURL string `json:"revocation_url,omitempty"`
}

// storedGrant is the stored form: the kind first, so that a secret of another kind is never mistaken for a grant.
type storedGrant struct {
	Kind string `json:"kind"`
	Grant
}

// ErrNotGrant means a stored secret is not an OAuth grant (a server switched to OAuth after callers stored keys).
var ErrNotGrant = errors.New("the stored credential is not an OAuth grant")

// Encode is the stored form of g.
func (g Grant) Encode() ([]byte, error) {
	if g.Token == nil || g.Token.AccessToken == "" {
		return nil, errors.New("a grant needs an access token")
	}
	return json.Marshal(storedGrant{Kind: grantKind, Grant: g})
}

// DecodeGrant reads a stored grant.
func DecodeGrant(raw []byte) (Grant, error) {
	var s storedGrant
	if err := json.Unmarshal(raw, &s); err != nil || s.Kind != grantKind {
		return Grant{}, ErrNotGrant
	}
	if s.Token == nil || s.Token.AccessToken == "" || s.TokenURL == "" || s.ClientID == "" {
		return Grant{}, fmt.Errorf("%w: incomplete", ErrNotGrant)
	}
	return s.Grant, nil
}

// Expired reports whether nothing can renew g at now: its access token is Stale and it has no refresh token.
func (g Grant) Expired(now time.Time) bool {
	return g.Token.RefreshToken == "" && g.Stale(now)
}

// Stale reports whether g's access token is no longer to be sent at now: it expires within its margin
// (RefreshBefore, or a quarter of the token's lifetime when that is shorter, so that a token of a few seconds is
// not renewed on every request). A token without an expiry is never stale: the backend's 401 says when it is.
func (g Grant) Stale(now time.Time) bool {
	return !g.Token.Expiry.IsZero() && !g.Token.Expiry.After(now.Add(g.margin()))
}

// margin is how long before its expiry g's access token is renewed.
func (g Grant) margin() time.Duration {
	if life := time.Duration(g.Token.ExpiresIn) * time.Second; life > 0 && life/4 < RefreshBefore {
		return life / 4
	}
	return RefreshBefore
}

// config is the oauth2 client the grant's tokens were issued to.
func (g Grant) config() *oauth2.Config {
	return &oauth2.Config{ClientID: g.ClientID, ClientSecret: g.ClientSecret, Scopes: g.Scopes,
		Endpoint: oauth2.Endpoint{TokenURL: g.TokenURL, AuthStyle: g.AuthStyle}}
}

func grantFrom(cfg *oauth2.Config, tok *oauth2.Token) Grant {
	return Grant{Token: tok, ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, TokenURL: cfg.Endpoint.TokenURL,
		AuthStyle: cfg.Endpoint.AuthStyle, Scopes: cfg.Scopes}
}
