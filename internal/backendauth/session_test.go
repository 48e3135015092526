package backendauth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestGrantStale: a token is renewed RefreshBefore its expiry, or a quarter of its lifetime when that is shorter
// (a token of seconds is not renewed on every request); one without an expiry never goes stale.
func TestGrantStale(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		left      time.Duration // until expiry; 0: no expiry
		expiresIn int64
		want      bool
	}{
		{"no expiry", 0, 0, false},
		{"hour-long token, 2 min left", 2 * time.Minute, 3600, false},
		{"hour-long token, 50 s left", 50 * time.Second, 3600, true},
		{"lifetime unknown, 50 s left", 50 * time.Second, 0, true},
		{"8 s token, 3 s left", 3 * time.Second, 8, false},
		{"8 s token, 2 s left", 2 * time.Second, 8, true},
		{"expired", -time.Second, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := &oauth2.Token{AccessToken: "a", ExpiresIn: tc.expiresIn}
			if tc.left != 0 {
				tok.Expiry = now.Add(tc.left)
			}
			if got := (Grant{Token: tok}).Stale(now); got != tc.want {
				t.Fatalf("Stale = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSessionTokenWithoutRefresh: a stale token without a refresh token (an exchanged one) is never sent: Token
// answers ErrReauthorize without asking the authorization server, so the request it was for is not sent, and a 401
// (the backend's clock ahead of ours) answers the same. A fresh one is sent as it is.
func TestSessionTokenWithoutRefresh(t *testing.T) {
	var asked atomic.Int32
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer as.Close()
	now := time.Now()
	g := Grant{Token: &oauth2.Token{AccessToken: "exchanged", Expiry: now.Add(4 * time.Second), ExpiresIn: 8},
		ClientID: "c", TokenURL: as.URL}
	h := NewSessionHandler(nil, as.Client(), "srv", "oauth:bot", g, nil)
	if tok, err := h.Token(); err != nil || tok.AccessToken != "exchanged" {
		t.Fatalf("fresh token: %v, %v", tok, err)
	}
	res := &http.Response{StatusCode: http.StatusUnauthorized, Body: http.NoBody}
	if err := h.Authorize(t.Context(), nil, res); !errors.Is(err, ErrReauthorize) {
		t.Fatalf("a 401 without a refresh token: %v, want ErrReauthorize", err)
	}
	h = NewSessionHandler(nil, as.Client(), "srv", "oauth:bot", g, nil)
	h.now = func() time.Time { return now.Add(3 * time.Second) }
	if _, err := h.Token(); !errors.Is(err, ErrReauthorize) {
		t.Fatalf("stale token: %v, want ErrReauthorize", err)
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the authorization server was asked %d times for a grant without a refresh token", n)
	}
}

// TestSessionTokenRenewed: a session whose grant can give no more tokens (an exchanged one, stale) takes the
// caller's stored grant when it is newer (a front end exchanged the caller's token again), else asks Renew and takes
// the grant Renew stored; a grant removed from the store (revoked) is never renewed, an older stored grant is never
// taken, and a failed renewal leaves the request unsent (ErrReauthorize). The authorization server is never asked:
// none of these grants has a refresh token.
func TestSessionTokenRenewed(t *testing.T) {
	var asked atomic.Int32
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer as.Close()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := persistence.Server{Name: "xo", TransportType: persistence.TransportHTTP, ConnectionConfig: json.RawMessage(`{"base_url":"http://127.0.0.1:1/mcp"}`)}
	if err := st.CreateServer(t.Context(), &srv, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	grant := func(token string, expiry time.Time) Grant {
		return Grant{Token: &oauth2.Token{AccessToken: token, Expiry: expiry, ExpiresIn: 8}, ClientID: "c", TokenURL: as.URL}
	}
	put := func(t *testing.T, g Grant) {
		t.Helper()
		raw, err := g.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.PutUserSecret(t.Context(), persistence.UserSecret{ServerID: srv.ID, Subject: "oauth:bot", Secret: raw}); err != nil {
			t.Fatal(err)
		}
	}
	held := grant("held", now.Add(time.Second)) // stale: within a quarter of its 8 s
	fresh := now.Add(8 * time.Second)
	for _, tc := range []struct {
		name    string
		stored  string    // the caller's stored token when the session renews ("": the grant was removed)
		expiry  time.Time // its expiry
		renew   string    // the token Renew stores ("": Renew fails)
		want    string    // the token sent ("": none, ErrReauthorize)
		renewed int       // times Renew is asked
	}{
		{"a newer stored grant is taken", "exchanged-meanwhile", fresh, "", "exchanged-meanwhile", 0},
		{"Renew's grant is taken", "held", held.Token.Expiry, "renewed", "renewed", 1},
		{"a failed renewal sends nothing", "held", held.Token.Expiry, "", "", 1},
		{"a removed grant is not renewed", "", time.Time{}, "renewed", "", 0},
		{"an older stored grant is not taken", "older", now.Add(-time.Second), "", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = st.DeleteUserSecret(t.Context(), srv.ID, "oauth:bot")
			if tc.stored != "" {
				put(t, grant(tc.stored, tc.expiry))
			}
			h := NewSessionHandler(st, as.Client(), srv.ID, "oauth:bot", held, nil)
			renewed := 0
			h.Renew = func(context.Context) error {
				renewed++
				if tc.renew == "" {
					return errors.New("the authorization server refused the exchange")
				}
				put(t, grant(tc.renew, fresh))
				return nil
			}
			tok, err := h.Token()
			switch {
			case tc.want == "" && !errors.Is(err, ErrReauthorize):
				t.Fatalf("Token = %v, %v; want ErrReauthorize", tok, err)
			case tc.want != "" && (err != nil || tok.AccessToken != tc.want):
				t.Fatalf("Token = %v, %v; want %q", tok, err, tc.want)
			}
			if renewed != tc.renewed {
				t.Fatalf("Renew asked %d times, want %d", renewed, tc.renewed)
			}
			if tc.want != "" {
				// The taken grant is the session's now: sent as it is, nothing renewed again.
				if again, err := h.Token(); err != nil || again.AccessToken != tc.want || renewed != tc.renewed {
					t.Fatalf("next Token = %v, %v (Renew asked %d times)", again, err, renewed)
				}
				// The secrets to scrub follow the renewal: the token sent now, and the one it replaced.
				if got := h.Secrets(); !slices.Contains(got, tc.want) || !slices.Contains(got, "held") {
					t.Fatalf("Secrets = %q; want %q and the replaced %q", got, tc.want, "held")
				}
			}
		})
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the authorization server was asked %d times for grants without a refresh token", n)
	}
}
