package backendauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
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
