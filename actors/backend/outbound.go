package backend

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// Loop detection between aggregators (one daemon registered as a backend of itself, directly or through others).
const (
	// HopHeader carries the instance ids of the aggregators an HTTP request passed through; every outbound request
	// of an SSE/HTTP session and every health check carries this daemon's id in it, and the MCP listener refuses
	// a request that already names its own id (508 LOOP_DETECTED).
	HopHeader = "Mcp-Aggregator-Via"
	// MaxHops is the longest hop chain the MCP listener accepts.
	MaxHops = 8
	// InstanceMetaKey is the _meta key of the initialize result under which the MCP endpoint reports this
	// daemon's instance id, so that a connect to ourselves (through any address or proxy) is refused.
	InstanceMetaKey = "io.mcpgw.aggregator/instance_id"
	// ViaMetaKey is the _meta key of an exposed tool listing the instance ids of the aggregators it passed
	// through (its provenance path); discovery drops tools whose path contains our own id.
	ViaMetaKey = "io.mcpgw.aggregator/via"
)

// Outbound is the policy for the addresses the daemon connects to over HTTP (SSE and streamable HTTP sessions,
// their redirects, health checks): cloud metadata and link-local addresses are refused unless the operator
// allows them, operator deny lists are honoured, and the daemon's own listeners are never a backend. It is
// checked on the literal host at registration and on the resolved address at connect time, so DNS cannot route
// around it. A nil *Outbound applies the default rules only. It is immutable after NewOutbound.
type Outbound struct {
	allow, deny []netip.Prefix
	self        []selfAddr
	instanceID  string
}

// selfAddr is one of the daemon's listen addresses: a port on every address (wildcard), on every loopback
// address (a loopback listen address), or on one address.
type selfAddr struct {
	addr     netip.Addr // invalid for wildcard and loopback
	wildcard bool
	loopback bool
	port     uint16
	listen   string
}

// denyRule is one default refusal.
type denyRule struct {
	prefix netip.Prefix
	why    string
}

// defaultDeny is what the daemon refuses to connect to unless MCP_AGGREGATOR_OUTBOUND_ALLOW names it: the cloud
// metadata services and link-local networks, which hand out instance credentials to whoever asks from the host.
// Made once: CheckAddr runs on every request of an HTTP session (headerTransport), and parsing the prefixes there
// cost a slice and four parses a call (issue 26). Never written after initialisation.
var defaultDeny = [...]denyRule{
	{netip.MustParsePrefix("169.254.0.0/16"), "is link-local (169.254.0.0/16, which holds the cloud metadata address 169.254.169.254)"},
	{netip.MustParsePrefix("fe80::/10"), "is IPv6 link-local (fe80::/10)"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "is the AWS IPv6 metadata address (fd00:ec2::254)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "is the Alibaba Cloud metadata address (100.100.100.200)"},
}

// OutboundRefusedError says why the daemon will not connect to an address. Loop is true when the address is
// the daemon's own listener (code LOOP_DETECTED).
type OutboundRefusedError struct {
	Addr string
	Rule string
	Loop bool
}

func (e *OutboundRefusedError) Error() string {
	if e.Loop {
		return errcode.LoopDetected + ": outbound target " + e.Addr + " " + e.Rule
	}
	return "outbound target refused: " + e.Addr + " " + e.Rule
}

// OutboundConfig is the operator's part of the outbound policy.
type OutboundConfig struct {
	Allow []netip.Prefix // always allowed, even when a default rule or Deny refuses them (MCP_AGGREGATOR_OUTBOUND_ALLOW)
	Deny  []netip.Prefix // refused in addition to the default rules (MCP_AGGREGATOR_OUTBOUND_DENY)
	// ListenAddrs are the daemon's own listen addresses (host:port): a backend there would be the daemon itself.
	ListenAddrs []string
}

// NewOutbound builds the policy from the configuration and the daemon's instance id. A listen address that does
// not parse, or has port 0, is ignored.
func NewOutbound(cfg OutboundConfig, instanceID string) *Outbound {
	o := &Outbound{allow: cfg.Allow, deny: cfg.Deny, instanceID: instanceID}
	for _, l := range cfg.ListenAddrs {
		host, portStr, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 {
			continue
		}
		s := selfAddr{port: uint16(port), listen: l}
		switch ip, isIP := ParseHostIP(host); {
		case host == "" || isIP && ip.IsUnspecified():
			s.wildcard = true
		case isLoopbackName(host) || isIP && ip.IsLoopback():
			s.loopback = true
		case isIP:
			s.addr = ip
		default:
			continue // a listen name: net.Listen resolved it; we cannot tell its address reliably here
		}
		o.self = append(o.self, s)
	}
	return o
}

// InstanceID is the daemon process's id sent in the hop header and reported in initialize.
func (o *Outbound) InstanceID() string {
	if o == nil {
		return ""
	}
	return o.instanceID
}

// CheckAddr returns an *OutboundRefusedError when the daemon must not connect to ip:port, else nil.
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
func (o *Outbound) CheckAddr(ip netip.Addr, port uint16) error {
	if o == nil {
		o = &Outbound{}
	}
	ip = ip.Unmap().WithZone("")
	// The address as shown in a refusal, made only for one (an allowed request pays no string).
	shown := func() string { return netip.AddrPortFrom(ip, port).String() }
	if s, ok := o.isSelf(ip, port); ok {
		return &OutboundRefusedError{Addr: shown(), Loop: true,
			Rule: "is this aggregator's own listener (" + s.listen + "): an aggregator cannot be its own backend"}
	}
	for _, p := range o.allow {
		if p.Contains(ip) {
			return nil
		}
	}
	for _, p := range o.deny {
		if p.Contains(ip) {
			return &OutboundRefusedError{Addr: shown(), Rule: "is in MCP_AGGREGATOR_OUTBOUND_DENY (" + p.String() + ")"}
		}
	}
	for _, r := range defaultDeny {
		if r.prefix.Contains(ip) {
			return &OutboundRefusedError{Addr: shown(), Rule: r.why + ", refused by default; MCP_AGGREGATOR_OUTBOUND_ALLOW can allow it"}
		}
	}
	return nil
}

func (o *Outbound) isSelf(ip netip.Addr, port uint16) (selfAddr, bool) {
	var locals []netip.Addr
	localsRead := false
	for _, s := range o.self {
		if s.port != port {
			continue
		}
		// Dialling 0.0.0.0 or :: reaches the local host.
		local := ip.IsLoopback() || ip.IsUnspecified()
		switch {
		case s.loopback && local, s.wildcard && local, s.addr.IsValid() && s.addr == ip:
			return s, true
		case s.wildcard:
			if !localsRead {
				locals, localsRead = interfaceAddrs(), true
			}
			for _, l := range locals {
				if l == ip {
					return s, true
				}
			}
		}
	}
	return selfAddr{}, false
}

// interfaceAddrs lists the host's own addresses (a wildcard listener answers on every one of them).
func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out
}

// URLProblem judges a backend or health URL by its literal host, for registration: "" when it may be used (or
// can only be judged at connect time: a DNS name, a ${VAR} reference), else why not. Numeric IPv4 spellings
// (decimal 2852039166, hex 0xA9FEA9FE, octal 0251.0376.0251.0376, short forms) are read as inet_aton reads them,
// and loopback names count as loopback for the self check. The answer never contains userinfo.
func (o *Outbound) URLProblem(rawURL string) string {
	u, ok := judgeableURL(rawURL)
	if !ok {
		return ""
	}
	port, err := urlPort(u)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	ip, isIP := ParseHostIP(host)
	if !isIP {
		if !isLoopbackName(host) {
			return "" // resolved and checked at connect time
		}
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if err := o.CheckAddr(ip, port); err != nil {
		return err.Error()
	}
	return ""
}

// judgeableURL parses rawURL unless its scheme or host is still a ${VAR} reference.
func judgeableURL(rawURL string) (*url.URL, bool) {
	if connconfig.HostIsRef(rawURL) {
		return nil, false
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, false
	}
	return u, true
}

// urlPort is the URL's port, or its scheme's default.
func urlPort(u *url.URL) (uint16, error) {
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		return uint16(n), err
	}
	if strings.EqualFold(u.Scheme, "https") {
		return 443, nil
	}
	return 80, nil
}

// isLoopbackName is a name that always means the local host (RFC 6761: localhost and *.localhost).
func isLoopbackName(h string) bool {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// ParseHostIP reads a URL host as an IP address the way resolvers do: IPv6 literals (a zone is dropped), and IPv4
// in inet_aton's forms: one to four parts, each decimal, hex (0x) or octal (leading 0), the last part filling the
// remaining bytes (2852039166, 0xA9FEA9FE, 0251.0376.0251.0376, 169.254.43518). One trailing dot is ignored.
// IPv4-mapped IPv6 addresses are returned as IPv4. ok is false for a name.
func ParseHostIP(host string) (netip.Addr, bool) {
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false
		}
		return a.Unmap().WithZone(""), true
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return netip.Addr{}, false
	}
	// At most four parts, read without splitting the host into a slice (this runs on every request of an HTTP
	// session, headerTransport).
	var vals [4]uint64
	n := 0
	for rest, more := host, true; more; n++ {
		var p string
		p, rest, more = strings.Cut(rest, ".")
		if n == len(vals) {
			return netip.Addr{}, false
		}
		v, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[n] = v
	}
	var out uint64
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		out |= vals[i] << (24 - 8*uint(i))
	}
	if vals[n-1] > uint64(0xffffffff)>>(8*uint(n-1)) {
		return netip.Addr{}, false
	}
	out |= vals[n-1]
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}

// atonPart parses one inet_aton part: 0x hex, leading-0 octal or decimal, at most 32 bits.
func atonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // inet_aton reads a bare 0x as 0
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	case p == "":
		return 0, false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		ok := c >= '0' && c <= '9' || base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		if !ok {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}

// control is the dialer's last word: it runs on the resolved address right before connect, for every address
// the dialer tries (so a name resolving to a denied address, or a redirect to one, is refused too).
func (o *Outbound) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("outbound target refused: cannot read the address %q", address)
	}
	return o.CheckAddr(ap.Addr(), ap.Port())
}

// Transport is an http.Transport whose dials pass the policy (TLS 1.2 at least).
func (o *Outbound) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: o.control}
	t.DialContext = d.DialContext
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return t
}

// HealthClient is the default client of health_check_url requests: guarded dials, the hop header, and the
// redirect policy of MCP sessions (see healthClientFor).
func (o *Outbound) HealthClient() *http.Client {
	return &http.Client{Transport: &headerTransport{base: o.Transport(), out: o}, CheckRedirect: connconfig.CheckRedirect(false)}
}

// HealthClientFor is client with the redirect policy of one server: plain http only to loopback unless the
// server allows insecure http, at most 10 redirects. (Health checks send no configured headers.)
func HealthClientFor(client *http.Client, allowInsecure bool) *http.Client {
	c := *client
	c.CheckRedirect = connconfig.CheckRedirect(allowInsecure)
	return &c
}

// origin is scheme://host:port of a URL, with the scheme's default port, lower-cased: two URLs are the same
// origin when their origins are equal (the rule browsers and net/http apply to credentials on redirects).
func origin(u *url.URL) string {
	if u == nil {
		return ""
	}
	port, err := urlPort(u)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), strconv.Itoa(int(port)))
}

// LoopInInitialize returns an error (code LOOP_DETECTED) when a backend's initialize result reports this
// daemon's own instance id: the backend is this aggregator, reached through an address the dial check could not
// recognise (a proxy, a tunnel, another host name).
func (o *Outbound) LoopInInitialize(res *mcp.InitializeResult) error {
	if o == nil || o.instanceID == "" || res == nil {
		return nil
	}
	if id, _ := res.Meta[InstanceMetaKey].(string); id == o.instanceID {
		return fmt.Errorf("%s: the backend is this aggregator itself (its initialize reports our instance id %s): "+
			"an aggregator cannot be its own backend", errcode.LoopDetected, id)
	}
	return nil
}

// ViaPath reads a tool definition's provenance path (ViaMetaKey in its _meta).
func ViaPath(meta map[string]any) []string {
	raw, _ := meta[ViaMetaKey].([]any)
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
