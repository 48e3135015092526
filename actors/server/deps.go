package server

import (
	"log/slog"
	"net/http"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/actors/placement"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/actors/settings"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// Deps is what a server actor and its proxy and per-user children use of the node: package actors builds it once
// from its own Deps, at start. It is read-only after that.
type Deps struct {
	Store  persistence.Store
	Logger *slog.Logger
	Config settings.Config
	// HealthClient makes health_check_url requests.
	HealthClient *http.Client
	// Env resolves ${VAR} references at connect time.
	Env connconfig.LookupEnv
	// Metrics records calls, health checks, reconnects and state changes (nil: nothing is recorded).
	Metrics *metrics.Metrics
	// Classifies: the node classifies tools (an owner in a cluster scans what an earlier owner left unclassified).
	Classifies bool
	// NodeID names this process as the owner of the servers it serves.
	NodeID string
	// Members is the cluster's membership as this node sees it (nil on a single node).
	Members *placement.Members
	// Owners is this process's leases: they fence the store writes about the servers it owns.
	Owners *placement.Leases
	// Outbound is the outbound policy (loop detection, allowed destinations).
	Outbound *backend.Outbound
	// Backend returns the options of one backend session (backend.Dial), with a fresh message guard.
	Backend func() backend.Options
}

// ErrShuttingDown is the error of an actor that is gone or a daemon that is stopping (gateway.ErrShuttingDown).
var ErrShuttingDown = gateway.ErrShuttingDown

// callable reports whether a server in this state executes tool calls (DEGRADED does, with a warning).
func callable(status string) bool { return routing.CallableStatus(status) }

// checkTransition returns lifecycle.ErrInvalidTransition when from -> to is not allowed.
func checkTransition(from, to string) error { return lifecycle.Check(from, to) }
