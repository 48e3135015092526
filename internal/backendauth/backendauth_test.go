package backendauth

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestClientFollowsOutboundPolicy: every OAuth request passes the outbound policy and the https rule, whatever
// the URL came from; a response body is read up to MaxResponseBytes.
func TestClientFollowsOutboundPolicy(t *testing.T) {
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat("x", MaxResponseBytes+100)))
	}))
	defer big.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	defer redirect.Close()
	deny := backend.NewOutbound(backend.OutboundConfig{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, "")
	for _, tc := range []struct {
		name string
		out  *backend.Outbound
		url  string
		want string // "" : allowed
	}{
		{"metadata address", nil, "http://169.254.169.254/latest/meta-data/", "refused"},
		{"metadata address, numeric spelling", nil, "https://2852039166/", "refused"},
		{"plain http off loopback", nil, "http://example.com/.well-known/oauth-authorization-server", "https"},
		{"redirect to the metadata address", nil, redirect.URL, "refused"},
		{"operator deny list", deny, big.URL, "refused"},
		{"loopback allowed", nil, big.URL, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Client(tc.out, false).Get(tc.url)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				n := 0
				buf := make([]byte, 64<<10)
				for {
					k, err := res.Body.Read(buf)
					n += k
					if err != nil {
						break
					}
				}
				if n != MaxResponseBytes {
					t.Fatalf("read %d bytes, want the bound %d", n, MaxResponseBytes)
				}
				return
			}
			if err == nil {
				res.Body.Close()
				t.Fatalf("%s allowed", tc.url)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestGrantRoundTrip(t *testing.T) {
	g := Grant{Token: &oauth2.Token{AccessToken: "at", RefreshToken: "rt", TokenType: "Bearer", Expiry: time.Unix(1e9, 0).UTC()},
		ClientID: "c", TokenURL: "https://as.example/token", AuthStyle: oauth2.AuthStyleInParams, Scopes: []string{"a"}}
	raw, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeGrant(raw)
	if err != nil || back.Token.AccessToken != "at" || back.Token.RefreshToken != "rt" || !back.Token.Expiry.Equal(g.Token.Expiry) ||
		back.ClientID != "c" || back.TokenURL != g.TokenURL || back.AuthStyle != g.AuthStyle {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for _, raw := range []string{"typed-secret", `{"token":{"access_token":"x"}}`, `{"kind":"mcpgw.oauth-grant.v1","token":{"access_token":""}}`} {
		if _, err := DecodeGrant([]byte(raw)); !errors.Is(err, ErrNotGrant) {
			t.Errorf("DecodeGrant(%q) = %v, want ErrNotGrant", raw, err)
		}
	}
	if _, err := (Grant{}).Encode(); err == nil {
		t.Error("a grant without a token encoded")
	}
}

// TestCallbackAndCompleteRefuseUnknownStates: without a pending flow, every state is unknown to both steps.
func TestCallbackAndCompleteRefuseUnknownStates(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := NewFlows(FlowsConfig{Store: st, RedirectURL: "http://127.0.0.1:1" + CallbackPath})
	for _, state := range []string{"", "nope", "running x y", strings.Repeat("s", 200)} {
		if err := f.Callback(t.Context(), state, "code", "", "", ""); !errors.Is(err, ErrUnknownFlow) {
			t.Errorf("Callback(%q) = %v", state, err)
		}
		if _, err := f.Complete(t.Context(), "token:a", state); !errors.Is(err, ErrUnknownFlow) {
			t.Errorf("Complete(%q) = %v", state, err)
		}
	}
}

// TestCheckIssuer: the authorization response's iss (RFC 9207) is required and must match when advertised, and
// refused when present but not advertised.
func TestCheckIssuer(t *testing.T) {
	for _, tc := range []struct {
		iss       string
		supported bool
		ok        bool
	}{
		{"https://as.example", true, true},
		{"", true, false},
		{"https://evil.example", true, false},
		{"", false, true},
		{"https://as.example", false, false},
	} {
		if err := checkIssuer(tc.iss, "https://as.example", tc.supported); (err == nil) != tc.ok {
			t.Errorf("checkIssuer(%q, advertised %v) = %v, want ok %v", tc.iss, tc.supported, err, tc.ok)
		}
	}
}

func ExampleRedirectURL() {
	fmt.Println(RedirectURL("https://agg.example.com/ui/"))
	fmt.Println(RedirectURL("") == "")
	// Output:
	// https://agg.example.com/api/v1/aggregator/oauth/callback
	// true
}
