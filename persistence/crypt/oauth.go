package crypt

import (
	"context"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// The callers' pending OAuth flows (their PKCE verifier and client) and the authorization codes that come back are
// sealed like the callers' secrets, bound to the flow's state (a sealed value copied onto another flow does not
// open); the clients registered at authorization servers are bound to their server and issuer. None is ever
// stored plain. RotateOAuth re-seals the pending flows and the clients under the current key with the other rows
// (rotate.go), so that dropping the previous key breaks neither a flow in progress nor a registered client.

func flowAAD(part, state string) []byte {
	return []byte("mcpgw/oauth_flows/" + part + "/v1\x00" + state)
}

func clientAAD(serverID, issuer string) []byte {
	return []byte("mcpgw/oauth_clients/data/v1\x00" + serverID + "\x00" + issuer)
}

// CreateOAuthFlow seals f.Data under the flow's state before it reaches the inner store.
func (s *Store) CreateOAuthFlow(ctx context.Context, f persistence.OAuthFlow, perSubject, total int, now time.Time) error {
	sealed, err := s.ring.seal(flowAAD("data", f.State), f.Data)
	if err != nil {
		return err
	}
	f.ServerID, f.Data = canonicalID(f.ServerID), sealed
	return s.Store.CreateOAuthFlow(ctx, f, perSubject, total, now)
}

// ReturnOAuthFlow seals the code under the flow's state.
func (s *Store) ReturnOAuthFlow(ctx context.Context, state string, code []byte, iss, errText string, now time.Time) error {
	if len(code) > 0 {
		sealed, err := s.ring.seal(flowAAD("code", state), code)
		if err != nil {
			return err
		}
		code = sealed
	}
	return s.Store.ReturnOAuthFlow(ctx, state, code, iss, errText, now)
}

// TakeOAuthFlow returns the flow with its data and code opened.
func (s *Store) TakeOAuthFlow(ctx context.Context, state, subject string, now time.Time) (persistence.OAuthFlow, error) {
	f, err := s.Store.TakeOAuthFlow(ctx, state, subject, now)
	if err != nil {
		return f, err
	}
	if f.Data, err = s.ring.openSealed(flowAAD("data", f.State), "OAuth flow data", f.Data); err != nil {
		return persistence.OAuthFlow{}, err
	}
	if len(f.Code) > 0 {
		if f.Code, err = s.ring.openSealed(flowAAD("code", f.State), "OAuth flow code", f.Code); err != nil {
			return persistence.OAuthFlow{}, err
		}
	}
	return f, nil
}

// PutOAuthClient seals c.Data under (server, issuer).
func (s *Store) PutOAuthClient(ctx context.Context, c persistence.OAuthClient) error {
	c.ServerID = canonicalID(c.ServerID)
	sealed, err := s.ring.seal(clientAAD(c.ServerID, c.Issuer), c.Data)
	if err != nil {
		return err
	}
	c.Data = sealed
	return s.Store.PutOAuthClient(ctx, c)
}

// GetOAuthClient returns the client with its data opened.
func (s *Store) GetOAuthClient(ctx context.Context, serverID, issuer string) (persistence.OAuthClient, error) {
	c, err := s.Store.GetOAuthClient(ctx, serverID, issuer)
	if err != nil {
		return c, err
	}
	if c.Data, err = s.ring.openSealed(clientAAD(c.ServerID, c.Issuer), "OAuth client", c.Data); err != nil {
		return persistence.OAuthClient{}, err
	}
	return c, nil
}
