package actors

import (
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
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
	// Per-user sessions of per_user servers (proxy_user.go): one caller's session closes after UserSessionIdle
	// without a request (MCP_AGGREGATOR_USER_SESSION_IDLE, 10 min; 0: the default), and one server runs at most
	// MaxUserSessions of them (MCP_AGGREGATOR_MAX_USER_SESSIONS, 64; 0: the default).
	UserSessionIdle time.Duration
	MaxUserSessions int
}

// DefaultConfig is the contract's defaults.
func DefaultConfig() Config {
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

// Deps is what every actor of the tree shares. It is read-only after start.
type Deps struct {
	Store  persistence.Store
	Logger *slog.Logger
	Config Config
	// HealthClient makes health_check_url requests.
	HealthClient *http.Client
	// Env resolves ${VAR} references at connect time.
	Env connconfig.LookupEnv
	// Metrics records calls, health checks, reconnects and state changes (nil: nothing is recorded).
	Metrics *metrics.Metrics
	// MeterProvider receives protoactor's own instruments (nil: none).
	MeterProvider metric.MeterProvider
	// Search configures tool search (nil: the embedded defaults).
	Search *SearchDeps
	// Classifier assigns skills to discovered tools (nil: tools are not classified).
	Classifier classify.Classifier
	// DataDir is the node's data directory (MCP_AGGREGATOR_DATA_DIR): every stdio server's process group is
	// recorded under DataDir/stdio-groups while it runs, so that backend.ReapProcessGroups can kill what a daemon
	// that died left behind. Empty: nothing is recorded.
	DataDir string

	groups *backend.ProcGroups // the records under DataDir (nil: none); set by withDefaults

	// budget is the memory budget of backend messages shared by every session of the tree (set by withDefaults).
	budget *msglimit.Budget
	// InstanceID identifies this daemon process in the hop header, in initialize and in tools' provenance path,
	// to detect loops between aggregators (empty: a new random id).
	InstanceID string

	// outbound is the policy built from Config and InstanceID by withDefaults.
	outbound *backend.Outbound

	// NodeID names this process as the owner of the servers it serves (persistence.Lease.Owner). A process that
	// restarts on the same data directory should keep its NodeID, so that it takes its servers back at once
	// instead of after the lease TTL (see cmd/aggregator). Empty: InstanceID.
	NodeID string
	// NodeAddress is where this process's MCP endpoint answers (its streamable HTTP URL), recorded with its
	// heartbeat so that another process on the store (`aggregator stdio`) can serve through it. Empty: none.
	NodeAddress string
	// owners is this process's leases (set by withDefaults).
	owners ownership
	// Cluster makes this process a node of a cluster (nil: a single node).
	Cluster *ClusterConfig
	// MembersChanged is told how many members the cluster has after every change of its membership (nil:
	// nobody), e.g. to share a cluster-wide rate limit among the nodes.
	MembersChanged func(members int)
	// members is the cluster's membership as this node sees it (nil on a single node; set at start).
	members *placement.Members
}

func (d *Deps) withDefaults() *Deps {
	out := *d
	if out.Cluster != nil {
		cc := *out.Cluster // the node settles its port in its own copy
		out.Cluster = &cc
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.InstanceID == "" {
		out.InstanceID = uuid.NewString()
	}
	out.outbound = backend.NewOutbound(backend.OutboundConfig{Allow: out.Config.OutboundAllow, Deny: out.Config.OutboundDeny,
		ListenAddrs: out.Config.ListenAddrs}, out.InstanceID)
	if out.NodeID == "" {
		out.NodeID = out.InstanceID
	}
	out.owners = ownership{placement.NewLeases(out.Store, out.NodeID, out.Config.LeaseTTL)}
	if out.HealthClient == nil {
		out.HealthClient = out.outbound.HealthClient()
	}
	if out.Config.AliasSeparator == "" {
		out.Config.AliasSeparator = "__"
	}
	if out.Config.StableAfter <= 0 {
		out.Config.StableAfter = 30 * time.Second
	}
	if out.Env == nil {
		out.Env = os.LookupEnv
	}
	if out.groups == nil && out.DataDir != "" {
		out.groups = backend.NewProcGroups(out.DataDir, out.Logger)
	}
	if out.Config.MaxMessageBytes <= 0 {
		out.Config.MaxMessageBytes = msglimit.DefaultMaxMessageBytes
	}
	out.budget = msglimit.NewBudget(out.Config.MessageBudgetBytes, out.Config.MessageBudgetPerServerBytes)
	return &out
}

// backendOptions are the options of one backend session (backend.Dial), with a fresh message guard.
func (d *Deps) backendOptions() backend.Options {
	return backend.Options{Env: d.Env, Outbound: d.outbound, Groups: d.groups, StdioEnvPassthrough: d.Config.StdioEnvPassthrough,
		TerminateDuration: d.Config.TerminateDuration, Guard: d.newGuard()}
}

// newGuard is the message guard of one backend session: the message limit and a fresh share of the budget, closed
// with the session.
func (d *Deps) newGuard() *msglimit.Guard {
	return &msglimit.Guard{Limit: d.Config.MaxMessageBytes, Account: d.budget.Account()}
}

// ownership is this process's leases (placement.Leases). fence is Fence under the name discovery uses.
type ownership struct{ *placement.Leases }

// fence returns the lease that fences writes about server id, or nil when this process does not own it.
func (o ownership) fence(id string) *persistence.Lease { return o.Fence(id) }
