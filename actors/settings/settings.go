// Package settings holds the timings and limits of the actor tree (the MCP_AGGREGATOR_* environment of the
// README): Config, its defaults (Default) and the normalization of the values that must not be zero (Normalized).
// It exists so that the settings read in one place, apart from the actors that follow them; package actors names
// it actors.Config. It imports nothing of package actors nor protoactor.
package settings

import (
	"net/netip"
	"time"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/supervision"
)

// Config holds the timings and limits of the actor tree (the MCP_AGGREGATOR_* environment of the README).
type Config struct {
	ConnectionTimeout time.Duration // connect + initialize of one attempt (30 s)
	RequestTimeout    time.Duration // one tool call (60 s)
	HealthInterval    time.Duration // between health checks of one server (30 s)
	HealthTimeout     time.Duration // one health check (5 s)
	DrainTimeout      time.Duration // disconnect without force waits this long for calls in flight (30 s)
	KeepAlive         time.Duration // MCP ping interval on SSE and HTTP sessions, to notice a dead server (1 s; 0 off)
	TerminateDuration time.Duration // a stdio child gets this long after stdin closes, then SIGTERM (1 s)
	AskTimeout        time.Duration // how long Control waits for an actor's answer (5 s)
	MaxServers        int           // registrations beyond this are refused (50)
	Retry             supervision.RetrySchedule
	Restart           supervision.Backoff // crashed actors restart after this backoff
	AliasSeparator    string              // joins server and tool in the MCP endpoint's client-safe names ("__")
	MaxToolsPerServer int                 // discovery keeps at most this many tools of one server, in listing order (5000; 0 no cap)
	// MaxCallsPerServer bounds the tool calls in flight on one server (64; 0 no bound): one more is refused at once
	// with SERVER_BUSY instead of piling goroutines and requests onto a backend that serves them one by one.
	MaxCallsPerServer int
	// StableAfter is how long a session must last before its loss resets the reconnect backoff (30 s): a backend
	// that fails right after connecting is retried with growing delays, not every second forever.
	StableAfter time.Duration
	// The skills classifier pool (BR-004, EC-009); zero values take the defaults.
	ClassifyConcurrency   int           // classifications in flight at once (5)
	ClassifyRetryInterval time.Duration // while tools failed to classify, one is retried this often (30 s)
	ClassifyTimeout       time.Duration // one classification may take this long (2 min)
	// StdioEnvPassthrough names the daemon's variables a stdio server inherits beyond the minimal set
	// (MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH); the daemon's own settings are never passed, even when listed.
	StdioEnvPassthrough []string
	// Backend messages (msglimit): the largest message read from a backend on any transport, and the bytes of large
	// messages being read at once, across all servers and per server (0: no bound).
	MaxMessageBytes             int   // 16 MiB
	MessageBudgetBytes          int64 // 128 MiB
	MessageBudgetPerServerBytes int64 // 32 MiB
	// The outbound policy of SSE/HTTP sessions and health checks (README "Outbound targets").
	OutboundAllow []netip.Prefix // always allowed, even when a default rule or OutboundDeny refuses them
	OutboundDeny  []netip.Prefix // refused in addition to the default rules (metadata and link-local addresses)
	// ListenAddrs are the daemon's own listen addresses (host:port): a backend there would be the daemon itself.
	ListenAddrs []string
	// LeaseTTL is how long a server's lease lasts without renewal (MCP_AGGREGATOR_LEASE_TTL, 10 s): the longest a
	// server stays unserved after the process that owned it died without releasing it (see placement.Leases).
	LeaseTTL time.Duration
	// Notification floods (floodguard): the log messages, and the progress notifications, of one server relayed to
	// its callers per second (MCP_AGGREGATOR_NOTIFY_RATE, 100; beyond it they are dropped and counted; 0 no bound),
	// and the least time between two rediscoveries of a server caused by its list_changed notifications (1 s).
	NotifyRate          float64
	ListChangedInterval time.Duration
	// Per-user sessions of per_user servers (actors/server/proxy_user.go): one caller's session closes after
	// UserSessionIdle without a request (MCP_AGGREGATOR_USER_SESSION_IDLE, 10 min; 0: the default), and one server
	// runs at most MaxUserSessions of them (MCP_AGGREGATOR_MAX_USER_SESSIONS, 64; 0: the default).
	UserSessionIdle time.Duration
	MaxUserSessions int
	// NoFastHop sends every tool call through the go-sdk client session, never the fast backend hop of streamable
	// HTTP sessions (actors/server/fasthop.go), and every stdio tools/list through the go-sdk too, never the stdio
	// hop (actors/server/stdiolist.go): for tests and comparisons (false: the hops serve what they can).
	NoFastHop bool
}

// Default is the contract's defaults.
func Default() Config {
	return Config{
		ConnectionTimeout: 30 * time.Second,
		RequestTimeout:    60 * time.Second,
		HealthInterval:    30 * time.Second,
		HealthTimeout:     5 * time.Second,
		DrainTimeout:      30 * time.Second,
		KeepAlive:         time.Second,
		TerminateDuration: time.Second,
		AskTimeout:        5 * time.Second,
		MaxServers:        50,
		Retry:             supervision.DefaultRetrySchedule(),
		Restart:           supervision.Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2},
		AliasSeparator:    "__",
		MaxToolsPerServer: 5000,
		MaxCallsPerServer: 64,
		StableAfter:       30 * time.Second,
		LeaseTTL:          placement.DefaultLeaseTTL,

		ClassifyConcurrency:   5,
		ClassifyRetryInterval: 30 * time.Second,
		ClassifyTimeout:       2 * time.Minute,

		MaxMessageBytes:             msglimit.DefaultMaxMessageBytes,
		MessageBudgetBytes:          128 << 20,
		MessageBudgetPerServerBytes: 32 << 20,
		NotifyRate:                  floodguard.DefaultRate,
		ListChangedInterval:         floodguard.DefaultInterval,
		UserSessionIdle:             DefaultUserSessionIdle,
		MaxUserSessions:             DefaultMaxUserSessions,
	}
}

// Normalized is c with the values that must not be zero set to their defaults: the alias separator ("__"), how
// long a session must last before its loss resets the backoff (30 s), and the largest backend message (16 MiB).
func (c Config) Normalized() Config {
	if c.AliasSeparator == "" {
		c.AliasSeparator = "__"
	}
	if c.StableAfter <= 0 {
		c.StableAfter = 30 * time.Second
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = msglimit.DefaultMaxMessageBytes
	}
	return c
}

// Defaults of the per-user sessions (Config.UserSessionIdle, Config.MaxUserSessions).
const (
	DefaultUserSessionIdle = 10 * time.Minute
	DefaultMaxUserSessions = 64
)
