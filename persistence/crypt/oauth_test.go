package crypt

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestOAuthAtRest: a pending OAuth flow's data (the PKCE verifier) and returned code, and a registered client's
// data, are stored only as envelopes; they open through the wrapper, and a flow's envelope does not open as another
// flow's.
func TestOAuthAtRest(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			inner := st.open(t)
			s := Wrap(inner, mustRing(t, NewKey(), nil))
			srv := create(t, s, "oauthed", config("x"))
			now := time.Now()
			for _, state := range []string{"st-1", "st-2", "st-3"} {
				f := persistence.OAuthFlow{State: state, ServerID: srv.ID, Subject: "token:alice",
					Data: []byte(`{"verifier":"` + secret + `"}`), ExpiresAt: now.Add(time.Minute)}
				if err := s.CreateOAuthFlow(ctx, f, 0, 0, now); err != nil {
					t.Fatal(err)
				}
				if err := s.ReturnOAuthFlow(ctx, state, []byte(`"code-`+secret+`"`), "", "", now); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := inner.TakeOAuthFlow(ctx, "st-1", "token:alice", now)
			if err != nil {
				t.Fatal(err)
			}
			for what, v := range map[string][]byte{"data": raw.Data, "code": raw.Code} {
				if _, sealed := SealedKeyID(v); !sealed || bytes.Contains(v, []byte(secret)) {
					t.Fatalf("flow %s stored in the clear: %s", what, v)
				}
			}
			got, err := s.TakeOAuthFlow(ctx, "st-2", "token:alice", now)
			if err != nil || !bytes.Contains(got.Data, []byte(secret)) || string(got.Code) != `"code-`+secret+`"` {
				t.Fatalf("through the wrapper: %s %s, %v", got.Data, got.Code, err)
			}
			// st-1's envelopes stored under st-3's state do not open.
			if err := inner.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: "st-4", ServerID: srv.ID, Subject: "token:alice",
				Data: raw.Data, ExpiresAt: now.Add(time.Minute)}, 0, 0, now); err != nil {
				t.Fatal(err)
			}
			if err := inner.ReturnOAuthFlow(ctx, "st-4", raw.Code, "", "", now); err != nil {
				t.Fatal(err)
			}
			if _, err := s.TakeOAuthFlow(ctx, "st-4", "token:alice", now); !errors.Is(err, ErrAuthentication) {
				t.Fatalf("a copied flow: %v, want ErrAuthentication", err)
			}

			c := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://as.example", RedirectURL: "https://agg.example/cb",
				Data: []byte(`{"client_secret":"` + secret + `"}`)}
			if err := s.PutOAuthClient(ctx, c); err != nil {
				t.Fatal(err)
			}
			rc, err := inner.GetOAuthClient(ctx, srv.ID, c.Issuer)
			if _, sealed := SealedKeyID(rc.Data); err != nil || !sealed || bytes.Contains(rc.Data, []byte(secret)) {
				t.Fatalf("client stored as %s, %v", rc.Data, err)
			}
			if got, err := s.GetOAuthClient(ctx, srv.ID, c.Issuer); err != nil || !bytes.Contains(got.Data, []byte(secret)) {
				t.Fatalf("client through the wrapper: %s, %v", got.Data, err)
			}
		})
	}
}
