package actors

import (
	"log/slog"
	"net/http"
	"os"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/server"
	"github.com/mcpgw/aggregator/actors/settings"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
)

// Config holds the timings and limits of the actor tree (settings.Config).
type Config = settings.Config

// DefaultConfig is the contract's defaults (settings.Default).
func DefaultConfig() Config { return settings.Default() }

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
	// server is what the server actors use of these Deps (set at start, once members is known).
	server *server.Deps
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
	out.Config = out.Config.Normalized()
	if out.Env == nil {
		out.Env = os.LookupEnv
	}
	if out.groups == nil && out.DataDir != "" {
		out.groups = backend.NewProcGroups(out.DataDir, out.Logger)
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

// serverDeps is what the server actors and their children use of d (server.Deps).
func (d *Deps) serverDeps() *server.Deps {
	return &server.Deps{Store: d.Store, Logger: d.Logger, Config: d.Config, HealthClient: d.HealthClient, Env: d.Env,
		Metrics: d.Metrics, Classifies: d.Classifier != nil, NodeID: d.NodeID, Members: d.members, Owners: d.owners.Leases,
		Outbound: d.outbound, Backend: d.backendOptions}
}

// ownership is this process's leases (placement.Leases). fence is Fence under the name discovery uses.
type ownership struct{ *placement.Leases }

// fence returns the lease that fences writes about server id, or nil when this process does not own it.
func (o ownership) fence(id string) *persistence.Lease { return o.Fence(id) }
