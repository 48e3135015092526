package api

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// OAuth to protected backends (issue 28): a per_user server with user_credential.oauth gets each caller's token
// through the OAuth 2.1 authorization code flow with PKCE that the daemon runs (internal/backendauth). The caller
// starts it (POST .../credentials/me/oauth: the authorization URL to open), the authorization server sends the
// browser back to GET /oauth/callback (no token: it only records the code and sends the browser on to the
// console), and the caller completes it (POST /oauth/complete with the state: the code is exchanged and the grant
// stored as the caller's credential). Only the caller who started a flow can complete it.

// oauthStartTimeout bounds POST .../oauth (discovery and registration at the backend's authorization server);
// oauthCompleteTimeout bounds POST /oauth/complete (the code exchange).
const (
	oauthStartTimeout    = 45 * time.Second
	oauthCompleteTimeout = 45 * time.Second
)

// oauthStartedView answers POST .../credentials/me/oauth.
type oauthStartedView struct {
	ServerID         string `json:"server_id"`
	AuthorizationURL string `json:"authorization_url"`
	ExpiresAt        string `json:"expires_at"`
}

// oauthCompletedView answers POST /oauth/complete.
type oauthCompletedView struct {
	ServerID   string `json:"server_id"`
	Server     string `json:"server"`
	Subject    string `json:"subject"`
	Authorized bool   `json:"authorized"`
}

func (s *server) routeOAuth(g fiber.Router) {
	g.Post("/servers/:id/credentials/me/oauth", s.startOAuth)
	g.Get("/oauth/callback", s.oauthCallback)
	g.Post("/oauth/complete", s.completeOAuth)
}

// flows is the flow runner, or 503 when the daemon runs none.
func (s *server) flows() (*backendauth.Flows, error) {
	if s.oauth == nil {
		return nil, &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
			Detail: "OAuth to backends is not available on this daemon"}
	}
	return s.oauth, nil
}

// pendingFlows is the flow runner for the steps of a flow already started: without one, no flow is pending (404).
func (s *server) pendingFlows() (*backendauth.Flows, error) {
	if s.oauth == nil {
		return nil, oauthError(backendauth.ErrUnknownFlow, "", "")
	}
	return s.oauth, nil
}

// POST /servers/{id}/credentials/me/oauth: starts the caller's authorization of the server's backend. 200 with the
// authorization URL the caller's browser opens and until when the flow waits.
func (s *server) startOAuth(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	if len(c.Body()) > 0 {
		if _, err := jsonBody(c, s.cfg.MaxBodyBytes); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), oauthStartTimeout)
	defer cancel()
	srv, err := s.perUserServer(ctx, c, id)
	if err != nil {
		return err
	}
	if srv.UserCredential == nil || srv.UserCredential.OAuth == nil {
		return oauthError(backendauth.ErrNotOAuth, srv.ID, srv.Name)
	}
	flows, err := s.flows()
	if err != nil {
		return err
	}
	if err := s.sealing(); err != nil {
		return err
	}
	sub := gateway.CredentialSubject(identityOf(c))
	started, err := flows.Start(ctx, srv, sub)
	if err != nil {
		return oauthError(err, srv.ID, srv.Name)
	}
	s.audit(c, audit.CredentialOAuthStarted, srv.ID, srv.Name, map[string]any{"subject": sub})
	return c.JSON(oauthStartedView{ServerID: srv.ID, AuthorizationURL: started.AuthorizationURL,
		ExpiresAt: started.ExpiresAt.UTC().Format(time.RFC3339)})
}

// GET /oauth/callback: the authorization server's redirect. It needs no token (a browser comes back from the
// authorization server), records the code for the flow of state, and sends the browser to the console's page
// that completes it as the signed-in caller (303 to <console>#oauth=<state>). An unknown, used or expired state is
// 404.
func (s *server) oauthCallback(c *fiber.Ctx) error {
	flows, err := s.pendingFlows()
	if err != nil {
		return err
	}
	state := c.Query("state")
	if len(state) > 512 {
		state = ""
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	if err := flows.Callback(ctx, state, c.Query("code"), c.Query("iss"), c.Query("error"), c.Query("error_description")); err != nil {
		return oauthError(err, "", "")
	}
	console := s.cfg.ConsoleURL
	if console == "" {
		console = "/ui/"
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("Referrer-Policy", "no-referrer")
	return c.Redirect(console+"#oauth="+url.QueryEscape(state), fiber.StatusSeeOther)
}

// POST /oauth/complete {"state": "..."}: the caller completes their flow: the code is exchanged (with the flow's
// PKCE verifier) and the grant stored as their credential for the server (201). A state that is not the caller's
// own pending flow is 404, and leaves the flow to its caller.
func (s *server) completeOAuth(c *fiber.Ctx) error {
	state, err := checkedBody(c, s.cfg.MaxBodyBytes, validate.OAuthState)
	if err != nil {
		return err
	}
	flows, err := s.pendingFlows()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), oauthCompleteTimeout)
	defer cancel()
	sub := gateway.CredentialSubject(identityOf(c))
	done, err := flows.Complete(ctx, sub, state)
	if err != nil {
		return oauthError(err, done.ServerID, done.ServerName)
	}
	s.audit(c, audit.CredentialStored, done.ServerID, done.ServerName, map[string]any{"subject": sub, "oauth": true})
	return c.Status(fiber.StatusCreated).JSON(oauthCompletedView{ServerID: done.ServerID, Server: done.ServerName, Subject: sub, Authorized: true})
}

// oauthError maps the flows' errors to answers.
func oauthError(err error, serverID, serverName string) error {
	ctx := map[string]any{}
	if serverID != "" {
		ctx["server_id"], ctx["server"] = serverID, serverName
	}
	switch {
	case errors.Is(err, backendauth.ErrNotOAuth):
		return &apierror.Error{Status: fiber.StatusConflict, Code: errcode.CredentialNotAccepted,
			Detail: fmt.Sprintf("Server %s takes no OAuth authorization (its user_credential has no oauth): store a secret with PUT %s",
				serverName, gateway.CredentialPath(serverID)), Context: ctx}
	case errors.Is(err, backendauth.ErrUnknownFlow):
		return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeNotFound,
			Detail: "No such authorization in progress (unknown, already used, expired, or started by someone else): start again"}
	case errors.Is(err, backendauth.ErrNotReturned):
		return &apierror.Error{Status: fiber.StatusConflict, Code: apierror.CodeCredentialRequired,
			Detail: "The authorization server has not sent you back yet: open the authorization URL first"}
	case errors.Is(err, backendauth.ErrTooManyFlows):
		return &apierror.Error{Status: fiber.StatusTooManyRequests, Code: apierror.CodeRateLimited, RetryAfter: 60,
			Detail: "Too many authorizations in progress: complete or let one expire first"}
	case errors.Is(err, backendauth.ErrNoRedirect):
		return &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
			Detail: "OAuth to backends needs the console's address: set MCP_AGGREGATOR_CONSOLE_URL"}
	case errors.Is(err, backendauth.ErrNotProtected), errors.Is(err, backendauth.ErrAuthorization):
		return &apierror.Error{Status: fiber.StatusBadGateway, Code: apierror.CodeServerUnavailable,
			Detail: fmt.Sprintf("Authorization with server %s failed: %v", serverName, err), Context: ctx}
	case errors.Is(err, context.DeadlineExceeded):
		return &apierror.Error{Status: fiber.StatusGatewayTimeout, Code: apierror.CodeRequestTimeout,
			Detail: "The backend or its authorization server did not answer in time", Context: ctx}
	}
	return err
}
