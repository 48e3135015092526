package crypt

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestRotateOAuth: the pending OAuth flows' data and code and the registered OAuth clients sealed under an old key
// are re-sealed under the new key by RotateOAuth (counted, idempotent, reported by PendingOAuth before), and open
// with the new key alone afterwards: a flow in progress completes and the client keeps its data. A row that
// neither key opens stops the rotation with an error naming it and its key, and stays stored.
func TestRotateOAuth(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			inner := st.open(t)
			oldKey, newKey := NewKey(), NewKey()
			old := Wrap(inner, mustRing(t, oldKey, nil))
			srv := create(t, old, "oauthed", config("x"))
			now := time.Now()
			for _, state := range []string{"waiting", "returned"} {
				if err := old.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: state, ServerID: srv.ID, Subject: "token:alice",
					Data: []byte(`{"verifier":"` + state + secret + `"}`), ExpiresAt: now.Add(time.Hour)}, 0, 0, now); err != nil {
					t.Fatal(err)
				}
			}
			if err := old.ReturnOAuthFlow(ctx, "returned", []byte(`"code-`+secret+`"`), "https://as.example", "", now); err != nil {
				t.Fatal(err)
			}
			client := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://as.example", RedirectURL: "https://agg.example/cb",
				Data: []byte(`{"client_secret":"` + secret + `"}`)}
			if err := old.PutOAuthClient(ctx, client); err != nil {
				t.Fatal(err)
			}

			s := Wrap(inner, mustRing(t, newKey, oldKey))
			if f, c, err := PendingOAuth(ctx, s); err != nil || f != 2 || c != 1 {
				t.Fatalf("PendingOAuth = %d, %d, %v; want 2, 1", f, c, err)
			}
			if f, c, err := RotateOAuth(ctx, s); err != nil || f != 2 || c != 1 {
				t.Fatalf("RotateOAuth = %d, %d, %v; want 2, 1", f, c, err)
			}
			if f, c, err := RotateOAuth(ctx, s); err != nil || f != 0 || c != 0 {
				t.Fatalf("second RotateOAuth = %d, %d, %v; want 0, 0", f, c, err)
			}
			if f, c, err := PendingOAuth(ctx, s); err != nil || f != 0 || c != 0 {
				t.Fatalf("PendingOAuth after rotation = %d, %d, %v", f, c, err)
			}
			flows, err := inner.ListOAuthFlows(ctx, time.Now())
			if err != nil || len(flows) != 2 {
				t.Fatalf("stored flows: %d, %v", len(flows), err)
			}
			for _, f := range flows {
				for _, v := range [][]byte{f.Data, f.Code} {
					if kid, _ := SealedKeyID(v); len(v) > 0 && kid != KeyID(newKey) {
						t.Errorf("flow %s: a value under %q after rotation, want %s", f.State, kid, KeyID(newKey))
					}
				}
				if f.State == "returned" && (!f.Returned || len(f.Code) == 0 || f.Iss != "https://as.example") {
					t.Errorf("returned flow lost its return: %+v", f)
				}
			}

			// The new key alone: the returned flow completes, the waiting one returns and completes, the client opens.
			only := Wrap(inner, mustRing(t, newKey, nil))
			got, err := only.TakeOAuthFlow(ctx, "returned", "token:alice", time.Now())
			if err != nil || !bytes.Contains(got.Data, []byte("returned"+secret)) || string(got.Code) != `"code-`+secret+`"` {
				t.Fatalf("returned flow with the new key: %s %s, %v", got.Data, got.Code, err)
			}
			if err := only.ReturnOAuthFlow(ctx, "waiting", []byte(`"code-2"`), "", "", time.Now()); err != nil {
				t.Fatal(err)
			}
			if got, err := only.TakeOAuthFlow(ctx, "waiting", "token:alice", time.Now()); err != nil ||
				!bytes.Contains(got.Data, []byte("waiting"+secret)) || string(got.Code) != `"code-2"` {
				t.Fatalf("waiting flow with the new key: %s %s, %v", got.Data, got.Code, err)
			}
			gc, err := only.GetOAuthClient(ctx, srv.ID, client.Issuer)
			if err != nil || !bytes.Equal(gc.Data, client.Data) || gc.RedirectURL != client.RedirectURL {
				t.Fatalf("client with the new key: %+v, %v", gc, err)
			}

			// A client and a flow sealed under a key neither configured key is: reported, not dropped.
			strangerKey := NewKey()
			stranger := Wrap(inner, mustRing(t, strangerKey, nil))
			if err := stranger.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: "foreign", ServerID: srv.ID, Subject: "token:bob",
				Data: []byte(`{"verifier":"v"}`), ExpiresAt: time.Now().Add(time.Hour)}, 0, 0, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := RotateOAuth(ctx, only); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), KeyID(strangerKey)) ||
				!strings.Contains(err.Error(), "token:bob") {
				t.Fatalf("rotate a foreign flow: %v", err)
			}
			if flows, err := inner.ListOAuthFlows(ctx, time.Now()); err != nil || len(flows) != 1 || flows[0].State != "foreign" {
				t.Fatalf("the foreign flow must stay: %+v, %v", flows, err)
			}
			// The flow ends (its error comes back); a foreign client is reported the same way.
			if err := inner.ReturnOAuthFlow(ctx, "foreign", nil, "", "access_denied", time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := inner.TakeOAuthFlow(ctx, "foreign", "token:bob", time.Now()); err != nil {
				t.Fatal(err)
			}
			foreign := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://other.example", Data: []byte(`{"client_id":"c"}`)}
			if err := stranger.PutOAuthClient(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			if f, c, err := PendingOAuth(ctx, only); err != nil || f != 0 || c != 1 {
				t.Fatalf("PendingOAuth with a foreign client = %d, %d, %v; want 0, 1", f, c, err)
			}
			if _, _, err := RotateOAuth(ctx, only); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), KeyID(strangerKey)) ||
				!strings.Contains(err.Error(), foreign.Issuer) {
				t.Fatalf("rotate a foreign client: %v", err)
			}
			if got, err := stranger.GetOAuthClient(ctx, srv.ID, foreign.Issuer); err != nil || !bytes.Equal(got.Data, foreign.Data) {
				t.Fatalf("the foreign client must stay as it was: %+v, %v", got, err)
			}
			if err := inner.ResealOAuthFlow(ctx, "foreign", []byte(`{"x":1}`), nil, time.Now().Add(2*time.Hour)); !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("reseal a flow no longer pending: %v", err)
			}
			if err := inner.ResealOAuthClient(ctx, srv.ID, "https://nowhere.example", []byte(`{"x":1}`)); !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("reseal an unknown client: %v", err)
			}
			if _, _, err := RotateOAuth(ctx, inner); err == nil {
				t.Fatal("RotateOAuth on an unwrapped store succeeded")
			}
			clients, err := inner.ListOAuthClients(ctx)
			if err != nil || len(clients) != 2 {
				t.Fatalf("stored clients: %+v, %v", clients, err)
			}
		})
	}
}
