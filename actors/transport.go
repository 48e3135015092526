package actors

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/persistence"
)

// ConnectionConfig is the union of the transport-specific connection_config fields (BR-001).
type ConnectionConfig struct {
	Command           string            `json:"command,omitempty"`
	Args              []string          `json:"args,omitempty"`
	Env               map[string]string `json:"env,omitempty"`
	Cwd               string            `json:"cwd,omitempty"`
	URL               string            `json:"url,omitempty"`
	BaseURL           string            `json:"base_url,omitempty"`
	Headers           map[string]string `json:"headers,omitempty"`
	AllowInsecureHTTP bool              `json:"allow_insecure_http,omitempty"`
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LookupEnv resolves a ${VAR} reference; os.LookupEnv in production, a map in tests.
type LookupEnv func(string) (string, bool)

// expand replaces every ${VAR} in s from lookup; an unset variable is an error naming it (never its value). A
// reference to one of the daemon's own settings (IsDaemonSetting) is an error too, and is never looked up:
// registration refuses such references, and this refuses them in configurations stored before that rule.
func expand(s string, lookup LookupEnv) (string, error) {
	if name := DaemonSettingReference(s); name != "" {
		return "", fmt.Errorf("connection_config references %s, a setting of the aggregator itself: "+
			"the aggregator's settings (MCP_AGGREGATOR_*, MCP_CREDENTIAL_KEY*, DATABASE_URL, QDRANT_*) are never given to servers", name)
	}
	var missing string
	out := envRef.ReplaceAllStringFunc(s, func(m string) string {
		name := envRef.FindStringSubmatch(m)[1]
		v, ok := lookup(name)
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("environment variable %s referenced in connection_config is not set", missing)
	}
	return out, nil
}

// resolveConfig parses raw and resolves ${VAR} references in every string the transport uses. The stored config
// keeps the references; only this in-memory copy holds resolved values.
func resolveConfig(raw json.RawMessage, lookup LookupEnv) (ConnectionConfig, error) {
	var c ConnectionConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("parse connection_config: %w", err)
	}
	var err error
	one := func(s *string) {
		if err == nil {
			*s, err = expand(*s, lookup)
		}
	}
	one(&c.Command)
	one(&c.Cwd)
	one(&c.URL)
	one(&c.BaseURL)
	for i := range c.Args {
		one(&c.Args[i])
	}
	for k, v := range c.Env {
		v := v
		one(&v)
		c.Env[k] = v
	}
	for k, v := range c.Headers {
		v := v
		one(&v)
		c.Headers[k] = v
	}
	return c, err
}

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
// daemon's instance id (loop detection) and, when it has one, the request id. A literal IP host is checked
// against the outbound policy here too, for requests that go through an HTTP proxy (whose dial the policy
// cannot see).
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
	if send || rid != "" || id != "" {
		r = r.Clone(r.Context())
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

// built is a transport ready to connect plus what the actor must clean up after it.
type built struct {
	transport mcp.Transport
	proc      *stdioTransport // STDIO only
	stderr    *stderrTail     // STDIO only
	client    *http.Client
	conns     *sessionConns   // SSE/HTTP only: every connection of the session, closed with it
	guard     *msglimit.Guard // its budget share is given back when the session is released
}

// buildTransport makes the go-sdk transport for a server from its resolved configuration. d gives the ${VAR}
// lookup (Env), the stdio settings (Config) and the process-group records (groups); d must have its defaults.
// guard bounds every message read from the server (nil: the defaults, no budget). SSE and HTTP sessions follow
// d's outbound policy (README "Outbound targets").
func buildTransport(rec persistence.Server, d *Deps, guard *msglimit.Guard) (*built, error) {
	cfg, err := resolveConfig(rec.ConnectionConfig, d.Env)
	out := d.outbound
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
		group := d.groups.child()
		if group != nil {
			if own == nil {
				own = map[string]string{}
			}
			own[groupMarkerVar] = group.marker
		}
		cmd.Env = childEnv(os.Environ(), d.Config.StdioEnvPassthrough, own)
		cmd.Dir = cfg.Cwd
		// Own process group so that the whole tree (npx -> node ...) can be killed, and SIGKILL if the daemon dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		tail := &stderrTail{max: 4096}
		cmd.Stderr = tail
		if guard == nil {
			guard = &msglimit.Guard{}
		}
		proc := newStdioTransport(cmd, d.Config.TerminateDuration, guard)
		proc.group = group
		return &built{transport: proc, proc: proc, stderr: tail, guard: guard}, nil
	case persistence.TransportSSE, persistence.TransportHTTP:
		endpoint := cfg.URL
		if rec.TransportType == persistence.TransportHTTP {
			endpoint = cfg.BaseURL
		}
		if endpoint == "" {
			return nil, fmt.Errorf("connection_config has no endpoint URL")
		}
		if problem := PlainHTTPProblem(endpoint, cfg.AllowInsecureHTTP); problem != "" {
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
		conns := newSessionConns(base)
		client := &http.Client{Transport: &headerTransport{base: guard.RoundTripper(conns), headers: cfg.Headers, origin: origin(eu), out: out},
			CheckRedirect: checkRedirect(cfg.AllowInsecureHTTP)}
		// The guard hands the go-sdk events of at most the limit; the go-sdk's own event cap is only a backstop.
		backstop := 2*guard.Max() + 1<<20
		b := &built{client: client, conns: conns, guard: guard}
		if rec.TransportType == persistence.TransportSSE {
			b.transport = &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: client, MaxEventSize: backstop}
		} else {
			b.transport = &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, MaxRetries: 1, MaxEventSize: backstop}
		}
		return b, nil
	default:
		return nil, fmt.Errorf("unknown transport_type %q", rec.TransportType)
	}
}

// kill ends a stdio server's whole process group (grandchildren included); a no-op for other transports.
func (b *built) kill() {
	if b != nil && b.proc != nil {
		b.proc.kill()
	}
}

// exitReason describes how a stdio server's process ended, or "" while it runs (or for other transports).
func (b *built) exitReason() string {
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
func (b *built) closeIdle() {
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
