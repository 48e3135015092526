package backend

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

// recorder is a loopback server that records the headers of every request it gets.
type recorder struct {
	mu   sync.Mutex
	seen []http.Header
	srv  *httptest.Server
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.seen...)
}

// redirector answers every request with a 302 to target (and records what it got).
func redirector(t *testing.T, target string) (*httptest.Server, *recorder) {
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, req.Header.Clone())
		rec.mu.Unlock()
		http.Redirect(w, req, target, http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// A backend that redirects to another origin (127.0.0.1 on another port is another origin) must not receive the
// configured credentials there; the first, same-origin request carries them.
func TestConfiguredHeadersStayWithTheirOrigin(t *testing.T) {
	target := newRecorder(t)
	redir, first := redirector(t, target.srv.URL+"/stolen")
	for _, transport := range []string{persistence.TransportHTTP, persistence.TransportSSE} {
		t.Run(transport, func(t *testing.T) {
			key := "base_url"
			if transport == persistence.TransportSSE {
				key = "url"
			}
			cfg, _ := json.Marshal(map[string]any{key: redir.URL + "/mcp",
				"headers": map[string]string{"Authorization": "Bearer s3cret-token", "X-Api-Key": "k3y"}})
			o := Options{Env: func(string) (string, bool) { return "", false }, Outbound: NewOutbound(OutboundConfig{}, "instance-a")}
			b, err := Dial(persistence.Server{TransportType: transport, ConnectionConfig: cfg}, o)
			if err != nil {
				t.Fatal(err)
			}
			before := len(target.headers())
			resp, err := b.client.Get(redir.URL + "/mcp")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := target.headers()
			if len(got) != before+1 {
				t.Fatalf("target saw %d requests, want %d", len(got), before+1)
			}
			h := got[len(got)-1]
			if h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
				t.Errorf("cross-origin redirect target received configured headers: %v", h)
			}
			if h.Get(HopHeader) != "instance-a" {
				t.Errorf("hop header at target = %q, want instance-a", h.Get(HopHeader))
			}
			f := first.headers()
			if last := f[len(f)-1]; last.Get("Authorization") != "Bearer s3cret-token" || last.Get(HopHeader) != "instance-a" {
				t.Errorf("the configured origin did not get the headers: %v", last)
			}
		})
	}
}

func TestParseHostIP(t *testing.T) {
	for _, tc := range []struct {
		host string
		want string // "" for not an IP
	}{
		{"169.254.169.254", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"0xA9FEA9FE", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"169.254.43518", "169.254.169.254"},
		{"169.16689662", "169.254.169.254"},
		{"0xA9.0xFE.0xA9.0xFE", "169.254.169.254"},
		{"169.254.169.254.", "169.254.169.254"},
		{"127.1", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"::ffff:169.254.169.254", "169.254.169.254"},
		{"::ffff:a9fe:a9fe", "169.254.169.254"},
		{"fe80::1%eth0", "fe80::1"},
		{"fd00:ec2::254", "fd00:ec2::254"},
		{"4294967295", "255.255.255.255"},
		{"4294967296", ""},
		{"256.1.1.1", ""},
		{"1.2.3.4.5", ""},
		{"08", ""},
		{"1..2", ""},
		{"", ""},
		{".", ""},
		{"example.com", ""},
		{"169.254.169.254.nip.io", ""},
		{"0x", "0.0.0.0"},
		{"1.2.65536", ""},
	} {
		got, ok := ParseHostIP(tc.host)
		if (tc.want == "") != !ok || ok && got.String() != tc.want {
			t.Errorf("ParseHostIP(%q) = %v, %v; want %q", tc.host, got, ok, tc.want)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	cfg := OutboundConfig{
		Allow:       []netip.Prefix{netip.MustParsePrefix("169.254.10.0/24")},
		Deny:        []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
		ListenAddrs: []string{"127.0.0.1:8082", ":8081", "10.1.2.3:9000", "127.0.0.1:0", "bogus"},
	}
	o := NewOutbound(cfg, "me")
	for _, tc := range []struct {
		addr string
		want string // substring of the refusal, "" for allowed
	}{
		{"169.254.169.254:80", "169.254.0.0/16"},
		{"[::ffff:169.254.169.254]:80", "169.254.0.0/16"},
		{"[fe80::1]:443", "fe80::/10"},
		{"[fd00:ec2::254]:80", "fd00:ec2::254"},
		{"100.100.100.200:80", "100.100.100.200"},
		{"169.254.10.7:80", ""}, // allowed by the operator
		{"10.9.1.1:80", "MCP_AGGREGATOR_OUTBOUND_DENY"},
		{"10.0.0.1:80", ""},
		{"192.168.1.1:443", ""},
		{"127.0.0.1:3001", ""},
		{"127.0.0.1:8082", "LOOP_DETECTED"},
		{"127.0.0.2:8082", "LOOP_DETECTED"},
		{"[::1]:8082", "LOOP_DETECTED"},
		{"0.0.0.0:8082", "LOOP_DETECTED"},
		{"127.0.0.1:8081", "LOOP_DETECTED"}, // wildcard listener
		{"10.1.2.3:9000", "LOOP_DETECTED"},
		{"10.1.2.4:9000", ""},
		{"127.0.0.1:0", ""},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		err := o.CheckAddr(ap.Addr(), ap.Port())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", tc.addr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a refusal naming %q", tc.addr, err, tc.want)
		}
	}
	// Nil policy: the default rules.
	if err := (*Outbound)(nil).CheckAddr(netip.MustParseAddr("169.254.169.254"), 80); err == nil {
		t.Error("nil policy allowed the metadata address")
	}
}

func TestURLProblem(t *testing.T) {
	o := NewOutbound(OutboundConfig{ListenAddrs: []string{"127.0.0.1:8082"}}, "me")
	for _, tc := range []struct {
		url, want string
	}{
		{"http://169.254.169.254/latest/meta-data/", "169.254.0.0/16"},
		{"http://2852039166/", "169.254.0.0/16"},
		{"http://0xA9FEA9FE/", "169.254.0.0/16"},
		{"http://0251.0376.0251.0376/", "169.254.0.0/16"},
		{"https://[::ffff:169.254.169.254]/mcp", "169.254.0.0/16"},
		{"https://[fe80::1%25eth0]:8443/mcp", "fe80::/10"},
		{"http://127.0.0.1:8082/mcp", "LOOP_DETECTED"},
		{"http://localhost:8082/mcp", "LOOP_DETECTED"},
		{"http://LOCALHOST.:8082/mcp", "LOOP_DETECTED"},
		{"http://2130706433:8082/mcp", "LOOP_DETECTED"},
		{"http://[::1]:8082/sse", "LOOP_DETECTED"},
		{"http://127.0.0.1:8083/mcp", ""},
		{"http://169.254.169.254.nip.io/", ""}, // a name: judged on its resolved address at connect time
		{"http://${HOST}/mcp", ""},
		{"https://example.com/mcp", ""},
	} {
		got := o.URLProblem(tc.url)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("URLProblem(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// The guard runs on the resolved address: a name (localhost) that resolves to a denied address is refused.
func TestDialGuardChecksResolvedAddress(t *testing.T) {
	srv := newRecorder(t)
	port := srv.srv.Listener.Addr().(*net.TCPAddr).Port
	o := NewOutbound(OutboundConfig{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, "")
	c := &http.Client{Transport: o.Transport()}
	_, err := c.Get("http://localhost:" + strconv.Itoa(port) + "/")
	var refused *OutboundRefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "MCP_AGGREGATOR_OUTBOUND_DENY") {
		t.Fatalf("dial of a denied resolved address: %v", err)
	}
	if n := len(srv.headers()); n != 0 {
		t.Errorf("the denied server got %d requests", n)
	}
	// The same server without the deny list answers.
	resp, err := (&http.Client{Transport: NewOutbound(OutboundConfig{}, "").Transport()}).Get("http://localhost:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestLoopInInitialize(t *testing.T) {
	o := NewOutbound(OutboundConfig{}, "me")
	if err := o.LoopInInitialize(&mcp.InitializeResult{Meta: mcp.Meta{InstanceMetaKey: "me"}}); err == nil || !strings.HasPrefix(err.Error(), errcode.LoopDetected) {
		t.Errorf("own instance id: %v", err)
	}
	if err := o.LoopInInitialize(&mcp.InitializeResult{Meta: mcp.Meta{InstanceMetaKey: "other"}}); err != nil {
		t.Errorf("another instance: %v", err)
	}
	if err := o.LoopInInitialize(&mcp.InitializeResult{}); err != nil {
		t.Errorf("no meta: %v", err)
	}
}

// FuzzParseHostIP: never panics; anything it accepts prints back to an address it reads the same way, and a
// dotted quad it accepts agrees with netip.
func FuzzParseHostIP(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "169.254.43518",
		"::ffff:169.254.169.254", "fe80::1%eth0", "1.2.3", "0x", "08", "example.com", "1..2", "4294967296", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		ip, ok := ParseHostIP(host)
		if !ok {
			return
		}
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			t.Fatalf("ParseHostIP(%q) = %v: not a plain address", host, ip)
		}
		again, ok := ParseHostIP(ip.String())
		if !ok || again != ip {
			t.Fatalf("ParseHostIP(%q) = %v, which reads back as %v, %v", host, ip, again, ok)
		}
		if std, err := netip.ParseAddr(host); err == nil && std.Is4() && std != ip {
			t.Fatalf("ParseHostIP(%q) = %v, netip says %v", host, ip, std)
		}
	})
}
