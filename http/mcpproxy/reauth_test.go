package mcpproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/oauthtest"
)

// TestProxyReauthorizeKeepsSession: a caller re-authorizes a per_user OAuth server (runs the authorization-code flow
// again, here as another user of the backend's authorization server) while their client's session of
// /mcp/servers/{name} runs. The client's session goes on, without initializing again: its next call reaches the
// backend as the new user, on a new backend session (the go-sdk backend refuses a session's requests from another
// user), which got the client's subscription again before that call; the backend runs each call once. Revoking the
// credential then ends the client's session, as before.
func TestProxyReauthorizeKeepsSession(t *testing.T) {
	x := startExchangeRig(t, 0)
	authorize := func(user string) {
		t.Helper()
		ctx := t.Context()
		started, err := x.flows.Start(ctx, x.srv, "token:ci")
		if err != nil {
			t.Fatal(err)
		}
		cb := oauthtest.Browse(t, started.AuthorizationURL+"&login_hint="+user, x.redirect)
		q := cb.Query()
		if err := x.flows.Callback(ctx, q.Get("state"), q.Get("code"), q.Get("iss"), q.Get("error"), q.Get("error_description")); err != nil {
			t.Fatal(err)
		}
		// Completing stores the grant and ends the caller's sessions on the old one (the daemon's wiring).
		if _, err := x.flows.Complete(ctx, "token:ci", q.Get("state")); err != nil {
			t.Fatal(err)
		}
	}
	authorize("alice")
	cs, err := connectAs(t, x.url, exchangeStatic)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if got, err := whoami(ctx, cs); err != nil || got != "user=alice" {
		t.Fatalf("whoami: %q, %v; want user=alice", got, err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "whoami://me"}); err != nil {
		t.Fatal(err)
	}
	sid := cs.ID()

	authorize("carol")
	ran := x.calls.Load()
	if got, err := whoami(ctx, cs); err != nil || got != "user=carol" {
		t.Fatalf("whoami on the same client session after re-authorizing: %q, %v; want user=carol", got, err)
	}
	// One whoami, and the subscription set again on the new backend session before it.
	if n := x.calls.Load() - ran; n != 2 {
		t.Fatalf("the backend ran %d requests, want 2 (the subscription again, then whoami once)", n)
	}
	if cs.ID() != sid {
		t.Fatalf("the client's session changed: %s -> %s", sid, cs.ID())
	}

	// Revocation (DELETE .../credentials/me): the client's session ends.
	if err := x.store.DeleteUserSecret(ctx, x.srv.ID, "token:ci"); err != nil {
		t.Fatal(err)
	}
	if err := x.sys.EndUserSession(ctx, x.srv.ID, "token:ci"); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, cs, 20*time.Second)
}
