package actors

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/lifecycle"
)

// redirectTo is a loopback server that answers every request with a 302 to target.
func redirectTo(t *testing.T, target string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, target, http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The health client follows the plain-http rule on redirects and stops after 10 of them; its dials pass the
// outbound policy.
func TestHealthClientRedirectPolicy(t *testing.T) {
	d := (&Deps{}).withDefaults()
	plain := redirectTo(t, "http://192.0.2.1/health") // TEST-NET-1: refused before any dial
	ok, counted, msg := lifecycle.HTTPHealth(context.Background(), backend.HealthClientFor(d.HealthClient, false), plain.URL)
	if ok || !counted || !strings.Contains(msg, "redirect refused") {
		t.Errorf("redirect to plain http non-loopback: ok=%v counted=%v msg=%q", ok, counted, msg)
	}
	var loop *httptest.Server
	loop = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+"/again", http.StatusFound)
	}))
	defer loop.Close()
	ok, _, msg = lifecycle.HTTPHealth(context.Background(), backend.HealthClientFor(d.HealthClient, false), loop.URL)
	if ok || !strings.Contains(msg, "10 redirects") {
		t.Errorf("endless redirects: ok=%v msg=%q", ok, msg)
	}
	meta := redirectTo(t, "http://169.254.169.254/latest/meta-data/")
	ok, _, msg = lifecycle.HTTPHealth(context.Background(), backend.HealthClientFor(d.HealthClient, true), meta.URL)
	if ok || !strings.Contains(msg, "169.254.0.0/16") {
		t.Errorf("redirect to the metadata address: ok=%v msg=%q", ok, msg)
	}
}
