package backendauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// RevokeTimeout bounds the revocation of one caller's tokens at the authorization server.
const RevokeTimeout = 5 * time.Second

// Revoke revokes, best effort, the tokens of a caller's grant that was just removed (the caller deleted their
// credential, or an admin revoked it) at the authorization server's revocation endpoint (RFC 7009): the refresh
// token first (which ends the grant at most servers), then the access token. raw is the removed secret of srv; a
// secret that is not a grant, or a grant without a revocation endpoint, needs nothing. It takes at most
// RevokeTimeout, follows the outbound policy, and logs the outcome without any token.
func (f *Flows) Revoke(ctx context.Context, srv persistence.Server, raw []byte) {
	g, err := DecodeGrant(raw)
	if err != nil || g.RevocationURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RevokeTimeout)
	defer cancel()
	client := Client(f.cfg.Outbound, connconfig.AllowsInsecureHTTP(srv.ConnectionConfig))
	revoked := 0
	for _, t := range []struct{ token, hint string }{
		{g.Token.RefreshToken, "refresh_token"},
		{g.Token.AccessToken, "access_token"},
	} {
		if t.token == "" {
			continue
		}
		if err := revoke(ctx, client, g, t.token, t.hint); err != nil {
			f.log.Warn("could not revoke an OAuth token at the authorization server", "server_id", srv.ID,
				"token_type", t.hint, "error", err)
			continue
		}
		revoked++
	}
	if revoked > 0 {
		f.log.Info("revoked OAuth tokens at the authorization server", "server_id", srv.ID, "tokens", revoked)
	}
}

// revoke sends one RFC 7009 revocation request, authenticating as the grant's client as the token endpoint does.
func revoke(ctx context.Context, client *http.Client, g Grant, token, hint string) error {
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	basic := g.ClientSecret != "" && g.AuthStyle != oauth2.AuthStyleInParams
	if !basic {
		form.Set("client_id", g.ClientID)
		if g.ClientSecret != "" {
			form.Set("client_secret", g.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return errors.New("the revocation endpoint is not a URL")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic {
		req.SetBasicAuth(url.QueryEscape(g.ClientID), url.QueryEscape(g.ClientSecret))
	}
	res, err := client.Do(req)
	if err != nil {
		// The transport's error names the host, never the form.
		return fmt.Errorf("reach the revocation endpoint: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("the revocation endpoint answered %d", res.StatusCode)
	}
	return nil
}
