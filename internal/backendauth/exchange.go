package backendauth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/persistence"
)

// Token types of RFC 8693.
const tokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"

// ErrNoExchange means the server's callers cannot get a backend token by exchange: the registration does not opt
// in (user_credential.oauth.token_exchange), or the backend's authorization server does not offer the grant.
var ErrNoExchange = errors.New("token exchange is not available for this server")

// Exchange gets subject a backend grant for srv without asking them (RFC 8693): the caller's own access token of
// the organisation's issuer (subjectToken, which authenticated them to the aggregator) is exchanged at the
// backend's authorization server, as the server's client, for an access token of the backend's resource; the grant
// is stored as the caller's credential like a completed flow's, without ending the caller's sessions (they take
// it from the store when the token they hold can no longer be sent: SessionHandler). ErrNoExchange when the
// server does not exchange; ErrAuthorization when the authorization server refuses (the caller is then asked as
// before). The subject token is sent only to the token endpoint of the authorization server the backend names,
// through the outbound policy, and never logged.
func (f *Flows) Exchange(ctx context.Context, srv persistence.Server, subject, subjectToken string) error {
	if subjectToken == "" || srv.UserCredential == nil || srv.UserCredential.OAuth == nil || !srv.UserCredential.OAuth.TokenExchange {
		return ErrNoExchange
	}
	d, err := f.discover(ctx, srv)
	if err != nil {
		return err
	}
	if !d.exchanges() {
		return ErrNoExchange
	}
	data := flowData{TokenURL: d.asm.TokenEndpoint, RevocationURL: d.asm.RevocationEndpoint, Issuer: d.asm.Issuer,
		Resource: d.prm.Resource, AllowInsecure: d.allowInsecure}
	if err := f.client(ctx, d, srv, &data); err != nil {
		return err
	}
	creds := &oauthex.ClientCredentials{ClientID: data.ClientID}
	if data.ClientSecret != "" {
		creds.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: data.ClientSecret}
	}
	sc := scopes(d.slot, d.challenges, d.prm, d.asm)
	tok, err := oauthex.ExchangeToken(ctx, data.TokenURL, &oauthex.TokenExchangeRequest{
		RequestedTokenType: tokenTypeAccessToken, Audience: d.asm.Issuer, Resource: data.Resource, Scope: sc,
		SubjectToken: subjectToken, SubjectTokenType: tokenTypeAccessToken}, creds, d.client)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client") && data.Registered {
			// The stored client cannot exchange: the next attempt registers a new one.
			_ = f.cfg.Store.DeleteOAuthClient(ctx, srv.ID, data.Issuer)
		}
		return fmt.Errorf("%w: token exchange: %w", ErrAuthorization, scrubExchange(err))
	}
	if issued, _ := tok.Extra("issued_token_type").(string); issued != tokenTypeAccessToken || tok.AccessToken == "" {
		return fmt.Errorf("%w: the token exchange issued no access token", ErrAuthorization)
	}
	g := Grant{Token: tok, ClientID: data.ClientID, ClientSecret: data.ClientSecret, TokenURL: data.TokenURL,
		AuthStyle: data.AuthStyle, Scopes: sc, RevocationURL: data.RevocationURL}
	if err := f.store(ctx, srv.ID, subject, g, false); err != nil {
		return fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	f.log.Info("exchanged a caller's token for a backend token", "server_id", srv.ID)
	return nil
}

// ExchangeTimeout bounds one exchange (discovery, registration, the token request) on a call's path.
const ExchangeTimeout = 30 * time.Second

// CallExchanger is gateway.Options.ExchangeCredential over f: it reads the server with get and exchanges the
// caller's token (Exchange), within ExchangeTimeout; a refusal is logged (never the token) and returned.
func (f *Flows) CallExchanger(get func(ctx context.Context, id string) (persistence.Server, error)) func(ctx context.Context, serverID, subject, accessToken string) error {
	return func(ctx context.Context, serverID, subject, accessToken string) error {
		ctx, cancel := context.WithTimeout(ctx, ExchangeTimeout)
		defer cancel()
		srv, err := get(ctx, serverID)
		if err != nil {
			return err
		}
		err = f.Exchange(ctx, srv, subject, accessToken)
		if err != nil && !errors.Is(err, ErrNoExchange) {
			f.log.Info("could not exchange a caller's token for a backend token", "server_id", serverID, "error", err)
		}
		return err
	}
}
