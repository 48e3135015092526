package actors_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// URLs that pass registration (their host is a ${VAR}) are judged at connect time on the resolved address: the
// metadata address and the daemon's own listener put the server in ERROR with a message naming the rule.
func TestConnectTimeOutboundRefusal(t *testing.T) {
	selfPort := peertest.FreePort(t)
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := testConfig()
	cfg.ListenAddrs = []string{"127.0.0.1:" + itoa(selfPort)}
	env := map[string]string{"META": "169.254.169.254", "SELF": "localhost:" + itoa(selfPort)}
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg,
		Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	}()
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	cases := []struct{ name, url, want string }{
		{"meta", "http://${META}/mcp", "169.254.0.0/16"},
		{"self", "http://${SELF}/mcp", errcode.LoopDetected},
	}
	// A host name that is not a loopback name but resolves to loopback is caught only by the dial guard, on the
	// resolved address.
	if h, err := os.Hostname(); err == nil {
		if addrs, err := net.LookupHost(h); err == nil && len(addrs) > 0 && net.ParseIP(addrs[0]).IsLoopback() {
			env["HOSTNAME_SELF"] = h + ":" + itoa(selfPort)
			cases = append(cases, struct{ name, url, want string }{"hostname", "http://${HOSTNAME_SELF}/mcp", errcode.LoopDetected})
		} else {
			t.Logf("host name %q does not resolve to loopback here; the dial-guard case is covered by TestDialGuardChecksResolvedAddress", h)
		}
	}
	for _, tc := range cases {
		srv := r.register(tc.name, persistence.TransportHTTP, map[string]any{"base_url": tc.url, "allow_insecure_http": true}, nil, true)
		got := r.waitServer(srv.ID, persistence.StatusError, 30*time.Second)
		if msg := ptr(got.ErrorMessage); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: error %q does not name %q", tc.name, msg, tc.want)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
