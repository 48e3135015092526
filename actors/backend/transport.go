package backend

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/notifyorder"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// stderrTail keeps the last bytes a child process wrote to stderr, to explain why it failed.
type stderrTail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (s *stderrTail) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	if len(s.buf) > s.max {
		s.buf = append([]byte(nil), s.buf[len(s.buf)-s.max:]...)
	}
	return len(p), nil
}

func (s *stderrTail) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}

// headerTransport adds the configured headers to the requests of an SSE or HTTP session that go to the
// configured endpoint's origin (scheme, host and port) and to no other: a redirect to another origin, or an SSE
// message endpoint elsewhere, never receives the credentials. Every request carries the hop header with this
// daemon's instance id (loop detection) and, when it has them, the request id and the W3C trace context. A
// literal IP host is checked against the outbound policy here too, for requests that go through an HTTP proxy
// (whose dial the policy cannot see).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	origin  string // origin of the configured endpoint; "" sends the headers nowhere
	out     *Outbound
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if ip, ok := ParseHostIP(r.URL.Hostname()); ok {
		if port, err := urlPort(r.URL); err == nil {
			if err := h.out.CheckAddr(ip, port); err != nil {
				closeBody(r)
				return nil, err
			}
		}
	}
	rid := requestid.From(r.Context())
	id := h.out.InstanceID()
	send := len(h.headers) > 0 && h.origin != "" && origin(r.URL) == h.origin
	traced := trace.SpanContextFromContext(r.Context()).IsValid()
	// A request that already carries the request id and hop header it would get (the fast hop's: fasthop.go, with
	// HopID) is sent as it is: the copy the RoundTripper contract asks for before changing a request is not needed.
	if send || traced || rid != "" && r.Header.Get(requestid.Header) != rid || id != "" && r.Header.Get(HopHeader) != id {
		r = r.Clone(r.Context())
		if traced {
			// The W3C trace context of the request's span (telemetry.ClientMiddleware's), as traceparent and
			// tracestate; a configured header of the same name wins below.
			otel.GetTextMapPropagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
		}
		if rid != "" {
			r.Header.Set(requestid.Header, rid) // a configured header of the same name wins below
		}
		if send {
			for k, v := range h.headers {
				r.Header.Set(k, v)
			}
		}
		if id != "" {
			r.Header.Set(HopHeader, id)
		}
	}
	return h.base.RoundTrip(r)
}

// closeBody closes a request body a RoundTripper refuses to send, as the RoundTripper contract asks.
func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// Options are what opening a backend session takes besides its registration. The zero value works: ${VAR}
// references read the process environment, the default outbound rules apply, no process group is recorded, a
// stdio child gets no grace period on close and messages get the default limit with no budget.
type Options struct {
	// Env resolves ${VAR} references (nil: os.LookupEnv).
	Env connconfig.LookupEnv
	// Outbound is the policy SSE and HTTP sessions follow (README "Outbound targets"; nil: the default rules).
	Outbound *Outbound
	// Groups records a stdio child's process group while it runs (nil: not recorded).
	Groups *ProcGroups
	// StdioEnvPassthrough names the daemon's variables a stdio child inherits beyond the minimal set (childenv.go).
	StdioEnvPassthrough []string
	// TerminateDuration is how long closing a stdio session waits after closing stdin, and after SIGTERM.
	TerminateDuration time.Duration
	// Guard bounds every message read from the server (nil: the defaults, no budget); its budget share is given
	// back when the session is released.
	Guard *msglimit.Guard
	// OAuth authorizes every request of a streamable HTTP session (a caller's own session of an OAuth backend,
	// internal/backendauth): the go-sdk transport sends its token and calls it on a 401 (nil: none).
	OAuth auth.OAuthHandler
}

// Conn is the transport of one backend session, ready to connect, plus what must be cleaned up after it.
type Conn struct {
	transport mcp.Transport
	proc      *stdioTransport // STDIO only
	stderr    *stderrTail     // STDIO only
	client    *http.Client
	conns     *sessionConns   // SSE/HTTP only: every connection of the session, closed with it
	guard     *msglimit.Guard // its budget share is given back when the session is released
	hopID     string          // SSE/HTTP only: what the client's requests carry in HopHeader ("" none)
}

// HopID is the value the session's HTTP requests carry in HopHeader ("" none): a request made with it (and the
// request id of its context in X-Request-ID) is sent without a copy (headerTransport).
func (b *Conn) HopID() string { return b.hopID }

// Dial makes the go-sdk transport of a server's session from its registration, resolving its configuration
// (${VAR} references) now: a stdio child with a minimal environment in its own recorded process group, or an
// SSE/HTTP client that follows the outbound policy, sends the configured headers to the endpoint's origin only
// and carries the hop header. Every message read is bounded by o.Guard. Nothing is started or dialled until the
// go-sdk connects the transport; Release frees what the session holds.
func Dial(rec persistence.Server, o Options) (*Conn, error) {
	env := o.Env
	if env == nil {
		env = os.LookupEnv
	}
	cfg, err := connconfig.Resolve(rec.ConnectionConfig, env)
	out := o.Outbound
	guard := o.Guard
	if err != nil {
		return nil, err
	}
	switch rec.TransportType {
	case persistence.TransportSTDIO:
		if cfg.Command == "" {
			return nil, fmt.Errorf("connection_config.command is empty")
		}
		cmd := exec.Command(cfg.Command, cfg.Args...)
		// A minimal environment, never the daemon's own (childenv.go), plus the process-group marker the reaper
		// recognises the child's tree by (procgroups.go).
		own := maps.Clone(cfg.Env)
		group := o.Groups.child()
		if group != nil {
			if own == nil {
				own = map[string]string{}
			}
			own[groupMarkerVar] = group.marker
		}
		cmd.Env = childEnv(os.Environ(), o.StdioEnvPassthrough, own)
		cmd.Dir = cfg.Cwd
		// Own process group so that the whole tree (npx -> node ...) can be killed, and SIGKILL if the daemon dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		tail := &stderrTail{max: 4096}
		cmd.Stderr = tail
		if guard == nil {
			guard = &msglimit.Guard{}
		}
		proc := newStdioTransport(cmd, o.TerminateDuration, guard)
		proc.group = group
		return &Conn{transport: proc, proc: proc, stderr: tail, guard: guard}, nil
	case persistence.TransportSSE, persistence.TransportHTTP:
		endpoint := cfg.Endpoint(rec.TransportType)
		if endpoint == "" {
			return nil, fmt.Errorf("connection_config has no endpoint URL")
		}
		if problem := connconfig.PlainHTTPProblem(endpoint, cfg.AllowInsecureHTTP); problem != "" {
			return nil, fmt.Errorf("connection_config endpoint refused: %s", problem)
		}
		if problem := out.URLProblem(endpoint); problem != "" {
			return nil, fmt.Errorf("connection_config endpoint refused: %s", problem)
		}
		eu, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("connection_config endpoint is not a valid URL")
		}
		// Dials pass the outbound policy on the resolved address (metadata, link-local, our own listeners).
		base := out.Transport()
		// Calls to one backend run concurrently over its session: keep enough idle connections that they are
		// reused rather than re-dialled (the default keeps 2 per host).
		base.MaxIdleConnsPerHost = 128
		if guard == nil {
			guard = &msglimit.Guard{}
		}
		if guard.Pace == nil {
			// Notifications beyond floodguard.ReadRate wait, on all of the session's streams together.
			pace := floodguard.NewPacer(floodguard.ReadRate)
			guard.Pace = func() { pace.Wait(nil) }
		}
		conns := newSessionConns(newFastTransport(base, eu))
		client := &http.Client{Transport: &headerTransport{base: guard.RoundTripper(conns), headers: cfg.Headers, origin: origin(eu), out: out},
			CheckRedirect: connconfig.CheckRedirect(cfg.AllowInsecureHTTP)}
		// The guard hands the go-sdk events of at most the limit; the go-sdk's own event cap is only a backstop.
		backstop := 2*guard.Max() + 1<<20
		b := &Conn{client: client, conns: conns, guard: guard, hopID: out.InstanceID()}
		if rec.TransportType == persistence.TransportSSE {
			b.transport = &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: client, MaxEventSize: backstop}
		} else {
			b.transport = &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, MaxRetries: 1, MaxEventSize: backstop,
				OAuthHandler: o.OAuth}
		}
		return b, nil
	default:
		return nil, fmt.Errorf("unknown transport_type %q", rec.TransportType)
	}
}

// Transport is the go-sdk transport to connect.
func (b *Conn) Transport() mcp.Transport { return b.transport }

// Gate puts the ordering gate under the transport and returns the transport to connect: around the connection for
// stdio, around the HTTP bodies for SSE and streamable HTTP (the go-sdk must see a streamable HTTP connection
// unwrapped; see notifyorder).
func (b *Conn) Gate(g *notifyorder.Gate) mcp.Transport {
	if b.client != nil {
		b.client.Transport = g.RoundTripper(b.client.Transport)
		return b.transport
	}
	return g.Transport(b.transport)
}

// Release frees what the session holds besides the go-sdk session itself: it ends a stdio server's whole process
// group (grandchildren included), then closes every connection of an SSE/HTTP session and gives the session's
// share of the message budget back.
func (b *Conn) Release() {
	b.kill()
	b.closeIdle()
}

// WaitExit waits until a stdio server's process has exited, at most d; it returns at once for other transports.
func (b *Conn) WaitExit(d time.Duration) {
	if b == nil || b.proc == nil {
		return
	}
	select {
	case <-b.proc.exited:
	case <-time.After(d):
	}
}

// Stderr is the last bytes a stdio server's process wrote to stderr ("" for other transports).
func (b *Conn) Stderr() string {
	if b == nil || b.stderr == nil {
		return ""
	}
	return b.stderr.String()
}

// kill ends a stdio server's whole process group (grandchildren included); a no-op for other transports.
func (b *Conn) kill() {
	if b != nil && b.proc != nil {
		b.proc.kill()
	}
}

// ExitReason describes how a stdio server's process ended, or "" while it runs (or for other transports).
func (b *Conn) ExitReason() string {
	if b == nil || b.proc == nil {
		return ""
	}
	if done, err := b.proc.exitStatus(); done {
		return "process exited: " + err.Error()
	}
	return ""
}

// closeIdle releases what a session holds beyond its process: every connection of an SSE/HTTP session (pooled
// ones and ones still in use, so nothing waits for the idle timeout) and the session's share of the message budget.
func (b *Conn) closeIdle() {
	if b == nil {
		return
	}
	if b.conns != nil {
		b.conns.close()
	}
	if b.client != nil {
		b.client.CloseIdleConnections()
	}
	if b.guard != nil {
		b.guard.Account.Close()
	}
}
