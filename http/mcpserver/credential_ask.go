package mcpserver

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// Asking a caller for their own credential in-band (issue 28): a call of a per_user server's tool by a caller who
// has not stored a credential for it would fail with CREDENTIAL_REQUIRED. When the client supports URL-mode
// elicitation (2025-11-25) and the endpoint knows the console's address (Options.ConsoleURL), the call instead asks
// the user to open the console's page for that server, waits until the credential is stored (by that page, or by
// any other way: the store is polled, so it works on a cluster too), tells the client the elicitation is complete
// and runs the call again. A client that cannot be asked, a user who declines, or no credential within
// credentialWait (bounded by the call's own deadline) gets the CREDENTIAL_REQUIRED error as before.
const (
	credentialWait = 5 * time.Minute
	credentialPoll = 500 * time.Millisecond
)

// urlAsker is how a call reaches its client with a URL-mode elicitation: the session of a 2025-11-25 client
// (sessionRelay), or the round trips of a 2026-07-28 client's call (roundTripRelay).
type urlAsker interface {
	Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	canOpenURL() bool
	elicitationComplete(ctx context.Context, id string)
}

// credentialAsk is what a call needs to ask its caller for a credential.
type credentialAsk struct {
	asker urlAsker
	id    auth.Identity
}

type credentialAskKey struct{}

// withCredentialAsk lets the call in ctx ask its caller for a missing credential through a, when the client can.
func (s *Server) withCredentialAsk(ctx context.Context, a urlAsker, id auth.Identity) context.Context {
	if s.opts.ConsoleURL == "" || a == nil || !a.canOpenURL() {
		return ctx
	}
	return context.WithValue(ctx, credentialAskKey{}, credentialAsk{asker: a, id: id})
}

func (r sessionRelay) canOpenURL() bool {
	p := r.ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil && p.Capabilities.Elicitation.URL != nil
}

func (r sessionRelay) elicitationComplete(ctx context.Context, id string) {
	_ = r.ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: id})
}

func (r *roundTripRelay) canOpenURL() bool {
	return r.caps != nil && r.caps.Elicitation != nil && r.caps.Elicitation.URL != nil
}

// elicitationComplete has nothing to notify: a 2026-07-28 client's next round trip is the call's result.
func (r *roundTripRelay) elicitationComplete(context.Context, string) {}

// credentialURL is the console page where the caller stores their credential for a server, naming the elicitation.
func (s *Server) credentialURL(serverID, elicitation string) string {
	return gateway.CredentialPageURL(s.opts.ConsoleURL, serverID, elicitation)
}

// askCredential handles a call that failed: when it failed for want of the caller's credential and the caller can
// be asked, it asks, waits for the credential and reports true (run the call again).
func (s *Server) askCredential(ctx context.Context, err error) bool {
	var ce *gateway.CallError
	if !errors.As(err, &ce) || ce.Info == nil || ce.Info.Code != errcode.CredentialRequired {
		return false
	}
	ask, ok := ctx.Value(credentialAskKey{}).(credentialAsk)
	if !ok {
		return false
	}
	serverID, serverName := ce.Call.Route.ServerID, ce.Call.Route.ServerName
	subject := gateway.CredentialSubject(ask.id)
	elicitation := uuid.NewString()
	wctx, cancel := context.WithTimeout(ctx, credentialWait)
	defer cancel()
	// A caller may have a credential stored that no longer works (an OAuth grant whose refresh was refused, an
	// exchanged token that expired): the call goes on once one is stored after this one, not at once.
	stale, known := s.storedAt(wctx, serverID, subject)
	if !known {
		return false
	}
	msg := "Server " + serverName + " works with your own credential. Open the page to store it; the call goes on once it is stored."
	if ce.Info.CredentialOauth {
		// The same console page starts the caller's OAuth authorization of the backend for such a server.
		msg = "Server " + serverName + " works with your own authorization of its backend. Open the page to authorize it; the call goes on once you are back."
	}
	res, eerr := ask.asker.Elicit(wctx, &mcp.ElicitParams{Mode: "url", ElicitationID: elicitation,
		URL: s.credentialURL(serverID, elicitation), Message: msg})
	if eerr != nil || res == nil || res.Action != "accept" {
		return false
	}
	tick := time.NewTicker(credentialPoll)
	defer tick.Stop()
	for {
		if at, ok := s.storedAt(wctx, serverID, subject); ok && !at.IsZero() && !at.Equal(stale) {
			ask.asker.elicitationComplete(wctx, elicitation)
			return true
		}
		select {
		case <-wctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// storedAt is when subject's credential for serverID was last stored (zero: none is); false when the store did not
// answer.
func (s *Server) storedAt(ctx context.Context, serverID, subject string) (time.Time, bool) {
	list, err := s.store.ListUserSecrets(ctx, serverID)
	if err != nil {
		return time.Time{}, false
	}
	for _, u := range list {
		if u.Subject == subject {
			return u.UpdatedAt, true
		}
	}
	return time.Time{}, true
}
