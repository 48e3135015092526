package backendauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/persistence"
)

// RefreshBefore is how long before its expiry an access token is refreshed (a quarter of its lifetime when that
// is shorter: Grant.Stale).
const RefreshBefore = time.Minute

// ErrReauthorize means the caller's grant no longer works (the refresh was refused, or an exchanged token expired
// and nothing here can renew it): they must authorize again, or the front end exchanges their token again. The
// request that met it was not run: either it was never sent (no token to send), or the backend refused it (401).
var ErrReauthorize = errors.New("your OAuth authorization of the backend expired or was revoked: authorize again")

// SessionHandler is the go-sdk auth.OAuthHandler of one caller's own backend session: the transport asks it for
// the token of every request (Authorization: Bearer), renewed RefreshBefore its expiry, and on a 401 it renews at
// once and lets the transport retry. Renewing takes, in order: the caller's grant as stored, when it holds another
// token (another session of the caller refreshed it, or a front end exchanged the caller's token again); the
// refresh token (golang.org/x/oauth2); Renew, when set. A refreshed grant is stored again (sealed) so that the
// next session, on any node, starts from it. It never runs the interactive flow: a caller whose grant cannot be
// renewed gets ErrReauthorize.
//
// The session renews by itself, not only the request a front end retries: every request of the session needs a
// token, the go-sdk's keep-alive pings and the standalone stream's reconnects included, and a keep-alive ping that
// cannot be sent closes the session (the go-sdk's rule).
type SessionHandler struct {
	store             persistence.CredentialStore
	client            *http.Client
	serverID, subject string
	log               *slog.Logger
	now               func() time.Time

	mu    sync.Mutex
	grant Grant
	// forced makes the next Token renew whatever the expiry says (after a 401).
	forced bool
	// held are the tokens the session held before its current grant, newest last (at most maxHeld), so that a
	// backend echoing one it was sent earlier is scrubbed too (Secrets).
	held []string

	// Renew, when set (before the session uses the handler), gets the caller a new grant when theirs can give no
	// more tokens (no refresh token, as an exchanged token has none, or a refused refresh) and stores it: the
	// per-server endpoint exchanges the caller's OAuth token again (gateway.Gateway.ExchangeCredential). The
	// handler then takes the stored grant. It is never asked for a grant that was removed (revoked).
	Renew func(ctx context.Context) error
}

var _ auth.OAuthHandler = (*SessionHandler)(nil)

// maxHeld bounds the earlier tokens a session keeps to scrub (a long session renews often; the oldest have long
// expired, and a backend echoes the token of the request it answers).
const maxHeld = 8

// NewSessionHandler returns the handler of subject's session on serverID, starting from the stored grant g; client
// is Client's.
func NewSessionHandler(store persistence.CredentialStore, client *http.Client, serverID, subject string, g Grant, log *slog.Logger) *SessionHandler {
	if log == nil {
		log = slog.Default()
	}
	return &SessionHandler{store: store, client: client, serverID: serverID, subject: subject, grant: g, log: log, now: time.Now}
}

// TokenSource is the handler itself.
func (h *SessionHandler) TokenSource(context.Context) (oauth2.TokenSource, error) { return h, nil }

// Token returns the access token to send, renewing it first when it is stale (Grant.Stale) or after a 401. A
// grant that cannot be renewed (no refresh token, as an exchanged token has none, and no newer grant) is never
// sent stale: Token answers ErrReauthorize and the request is not sent.
func (h *SessionHandler) Token() (*oauth2.Token, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.grant.Token
	if !h.forced && !h.grant.Stale(h.now()) {
		return t, nil
	}
	if err := h.renew(); err != nil {
		return nil, err
	}
	return h.grant.Token, nil
}

// renew gives the session a token it can send (h.mu held): the stored grant when it is newer, else a refresh,
// else Renew and the grant it stored.
func (h *SessionHandler) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	if fresh, err := h.takeStored(ctx); fresh || err != nil {
		return err
	}
	err := h.refresh()
	if err == nil || !errors.Is(err, ErrReauthorize) || h.Renew == nil {
		return err
	}
	if rerr := h.Renew(ctx); rerr != nil {
		return err // the renewal's own failure is logged where it is known (never a token)
	}
	if fresh, serr := h.takeStored(ctx); fresh || serr != nil {
		return serr
	}
	return err
}

// takeStored takes the caller's stored grant (h.mu held) when it holds a newer token than the session's, and
// reports whether that token can be sent as it is. A grant removed from the store (revoked) is ErrReauthorize: the
// session ends with it. A store that cannot be read leaves the session's grant as it was.
func (h *SessionHandler) takeStored(ctx context.Context) (fresh bool, _ error) {
	if h.store == nil {
		return false, nil
	}
	v, err := h.store.GetUserSecret(ctx, h.serverID, h.subject)
	if errors.Is(err, persistence.ErrNotFound) {
		return false, fmt.Errorf("%w: your credential was removed", ErrReauthorize)
	}
	if err != nil {
		h.log.Warn("could not read a stored OAuth grant", "server_id", h.serverID, "error", err)
		return false, nil
	}
	g, err := DecodeGrant(v.Secret)
	// Only a newer grant: one that expires before the session's is an older one (a refresh of this session that
	// could not be stored).
	if err != nil || g.Token.AccessToken == h.grant.Token.AccessToken || g.Token.Expiry.Before(h.grant.Token.Expiry) {
		return false, nil
	}
	h.setGrant(g)
	if g.Stale(h.now()) {
		return false, nil // refreshed with its own refresh token, the newest one
	}
	h.forced = false
	return true, nil
}

// refresh redeems the refresh token (h.mu held) and stores the new grant.
func (h *SessionHandler) refresh() error {
	old := h.grant.Token
	if old.RefreshToken == "" {
		return fmt.Errorf("%w (no refresh token)", ErrReauthorize)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, h.client), RequestTimeout)
	defer cancel()
	// A token without an access token makes the oauth2 source refresh at once.
	tok, err := h.grant.config().TokenSource(ctx, &oauth2.Token{RefreshToken: old.RefreshToken}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return fmt.Errorf("%w: the authorization server answered %d %s", ErrReauthorize, re.Response.StatusCode, re.ErrorCode)
		}
		return fmt.Errorf("refresh the OAuth token: %w", err)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = old.RefreshToken // kept unless the authorization server rotates it
	}
	h.forced = false
	g := h.grant
	g.Token = tok
	h.setGrant(g)
	// A grant revoked meanwhile (the row is gone) is not written back: the revocation also ends this session.
	if _, err := h.store.GetUserSecret(ctx, h.serverID, h.subject); err != nil {
		return fmt.Errorf("%w: your credential was removed", ErrReauthorize)
	}
	raw, err := h.grant.Encode()
	if err == nil {
		_, _, err = h.store.PutUserSecret(ctx, persistence.UserSecret{ServerID: h.serverID, Subject: h.subject, Secret: raw})
	}
	if err != nil {
		// The session goes on with the new token; the next session refreshes again from the stored one (unless the
		// authorization server rotated the refresh token, then the caller authorizes again).
		h.log.Warn("could not store a refreshed OAuth grant", "server_id", h.serverID, "error", err)
	}
	return nil
}

// Authorize is called by the transport on a 401 or 403: a 401 renews the token at once (the backend no longer
// takes the one sent) and the transport retries; anything else is the backend's answer.
func (h *SessionHandler) Authorize(_ context.Context, _ *http.Request, res *http.Response) error {
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("the backend refused the request (%d)", res.StatusCode)
	}
	h.mu.Lock()
	h.forced = true
	h.mu.Unlock()
	_, err := h.Token()
	return err
}

// setGrant makes g the session's grant (h.mu held), keeping the tokens of the one it replaces for Secrets.
func (h *SessionHandler) setGrant(g Grant) {
	for _, t := range []string{h.grant.Token.AccessToken, h.grant.Token.RefreshToken} {
		if t != "" && t != g.Token.AccessToken && t != g.Token.RefreshToken && !slices.Contains(h.held, t) {
			h.held = append(h.held, t)
		}
	}
	if n := len(h.held) - maxHeld; n > 0 {
		h.held = slices.Delete(h.held, 0, n)
	}
	h.grant = g
}

// Secrets are the tokens to scrub from error texts: the current ones and the last ones the session renewed away
// from. It changes with every renewal, so a scrubber asks again each time (never a copy taken at connect).
func (h *SessionHandler) Secrets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.held)+2)
	for _, t := range append([]string{h.grant.Token.AccessToken, h.grant.Token.RefreshToken}, h.held...) {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}
