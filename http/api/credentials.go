package api

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
)

// Callers' own credentials of per_user servers (issue 28). A caller stores and removes only their own (the
// subject is always the authenticated caller's, gateway.CredentialSubject; no route takes a subject from a client
// token's request); an admin lists who has one and revokes any. No route ever answers a secret.

// sessionEnder ends a caller's per-user backend session (actors.System does): a revoked or replaced secret must
// not stay in use.
type sessionEnder interface {
	EndUserSession(ctx context.Context, serverID, subject string) error
}

// credentialView is one stored credential as listed: who and when, never the secret.
type credentialView struct {
	ServerID  string `json:"server_id"`
	Subject   string `json:"subject"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

// credentialListView answers GET /servers/{id}/credentials.
type credentialListView struct {
	Credentials []credentialView `json:"credentials"`
	Total       int              `json:"total"`
}

func newCredentialView(v persistence.UserSecret) credentialView {
	return credentialView{ServerID: v.ServerID, Subject: v.Subject, CreatedAt: view.Time(v.CreatedAt), UpdatedAt: view.Time(v.UpdatedAt)}
}

func (s *server) routeCredentials(g fiber.Router) {
	g.Put("/servers/:id/credentials/me", s.putMyCredential)
	g.Delete("/servers/:id/credentials/me", s.deleteMyCredential)
	g.Get("/servers/:id/credentials", s.listCredentials)
	g.Delete("/servers/:id/credentials/:subject", s.revokeCredential)
}

// sealing reports whether the store encrypts what it keeps (persistence/crypt, as the daemon's always does): a
// caller's secret is never handed to a store that would keep it in the clear.
func (s *server) sealing() error {
	if _, ok := s.store.(interface{ Keyring() *crypt.Keyring }); ok {
		return nil
	}
	return &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
		Detail: "The credential store is not encrypted: callers' credentials cannot be kept"}
}

// perUserServer reads the server and refuses one that takes no caller's credential (409).
func (s *server) perUserServer(ctx context.Context, c *fiber.Ctx, id string) (persistence.Server, error) {
	srv, err := s.storedServer(ctx, c, id)
	if err != nil {
		return srv, err
	}
	if srv.CredentialMode != persistence.CredentialPerUser {
		return srv, &apierror.Error{Status: fiber.StatusConflict, Code: errcode.CredentialNotAccepted,
			Detail:  fmt.Sprintf("Server %s is shared (credential_mode %q): every caller uses its connection_config", srv.Name, srv.CredentialMode),
			Context: map[string]any{"server": srv.Name, "server_id": srv.ID}}
	}
	return srv, nil
}

// endSession ends the subject's per-user session, if the control plane runs any; a failure is logged (the secret
// is already changed in the store, which the next session reads).
func (s *server) endSession(ctx context.Context, serverID, subject string) {
	e, ok := s.control.(sessionEnder)
	if !ok {
		return
	}
	if err := e.EndUserSession(ctx, serverID, subject); err != nil {
		s.log.Warn("could not end a per-user session", "server_id", serverID, "subject", subject, "error", err)
	}
}

// PUT /servers/{id}/credentials/me: stores (or replaces) the caller's own secret. 201 when new, 200 when replaced;
// the answer never holds the secret. A live session of the caller on the server ends, so the next call uses the new
// secret.
func (s *server) putMyCredential(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	secret, err := checkedBody(c, s.cfg.MaxBodyBytes, validate.Secret)
	if err != nil {
		return err
	}
	if err := s.sealing(); err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	srv, err := s.perUserServer(ctx, c, id)
	if err != nil {
		return err
	}
	if srv.UserCredential != nil && srv.UserCredential.OAuth != nil {
		// The caller's credential is the grant the daemon obtains for them (http/api/oauth.go).
		return &apierror.Error{Status: fiber.StatusConflict, Code: errcode.CredentialNotAccepted,
			Detail:  fmt.Sprintf("Server %s takes OAuth authorization, not a secret: start it with POST %s", srv.Name, gateway.OAuthStartPath(srv.ID)),
			Context: map[string]any{"server": srv.Name, "server_id": srv.ID, "oauth_url": gateway.OAuthStartPath(srv.ID), "method": "POST"}}
	}
	sub := gateway.CredentialSubject(identityOf(c))
	stored, created, err := s.store.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: sub, Secret: []byte(secret)})
	if err != nil {
		return mapError(fmt.Errorf("store credential: %w", err), subject{id: c.Params("id")})
	}
	s.endSession(ctx, srv.ID, sub)
	s.audit(c, audit.CredentialStored, srv.ID, srv.Name, map[string]any{"subject": sub, "created": created})
	status := fiber.StatusOK
	if created {
		status = fiber.StatusCreated
	}
	return c.Status(status).JSON(newCredentialView(stored))
}

// DELETE /servers/{id}/credentials/me: removes the caller's own secret and ends their session. 204; 404 when they
// had none.
func (s *server) deleteMyCredential(c *fiber.Ctx) error {
	return s.removeCredential(c, gateway.CredentialSubject(identityOf(c)), audit.CredentialRemoved)
}

// DELETE /servers/{id}/credentials/{subject} (admin): revokes a caller's secret and ends their session.
func (s *server) revokeCredential(c *fiber.Ctx) error {
	sub, err := url.PathUnescape(c.Params("subject"))
	if err != nil || sub == "" || len(sub) > persistence.MaxSubjectLength {
		return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeNotFound, Detail: "No such credential"}
	}
	return s.removeCredential(c, sub, audit.CredentialRevoked)
}

func (s *server) removeCredential(c *fiber.Ctx, sub, event string) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	srv, err := s.perUserServer(ctx, c, id)
	if err != nil {
		return err
	}
	// An OAuth grant's tokens are revoked at the authorization server once the credential is gone: read it first.
	var removed []byte
	if s.oauth != nil && srv.UserCredential != nil && srv.UserCredential.OAuth != nil {
		if v, err := s.store.GetUserSecret(ctx, srv.ID, sub); err == nil {
			removed = v.Secret
		}
	}
	if err := s.store.DeleteUserSecret(ctx, srv.ID, sub); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return &apierror.Error{Status: fiber.StatusNotFound, Code: apierror.CodeNotFound,
				Detail: fmt.Sprintf("No credential of %s on server %s", sub, srv.Name)}
		}
		return mapError(fmt.Errorf("delete credential: %w", err), subject{id: c.Params("id")})
	}
	s.endSession(ctx, srv.ID, sub)
	if removed != nil {
		s.oauth.Revoke(ctx, srv, removed) // best effort, bounded (backendauth.RevokeTimeout)
	}
	s.audit(c, event, srv.ID, srv.Name, map[string]any{"subject": sub})
	return c.SendStatus(fiber.StatusNoContent)
}

// GET /servers/{id}/credentials (admin): who has a credential for the server, and since when; never a secret.
func (s *server) listCredentials(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	srv, err := s.perUserServer(ctx, c, id)
	if err != nil {
		return err
	}
	list, err := s.store.ListUserSecrets(ctx, srv.ID)
	if err != nil {
		return mapError(fmt.Errorf("list credentials: %w", err), subject{id: c.Params("id")})
	}
	out := credentialListView{Credentials: make([]credentialView, 0, len(list)), Total: len(list)}
	for _, v := range list {
		out.Credentials = append(out.Credentials, newCredentialView(v))
	}
	return c.JSON(out)
}
