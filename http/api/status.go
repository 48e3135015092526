package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/persistence"
)

// Health statuses of GET /health.
const (
	healthHealthy   = "healthy"
	healthDegraded  = "degraded"
	healthUnhealthy = "unhealthy"
)

// GET /state: server counts by status, tool classification totals, the last change seen and uptime.
func (s *server) state(c *fiber.Ctx) error {
	ctx, cancel := s.opContext(c)
	defer cancel()
	byStatus, err := s.store.CountServersByStatus(ctx)
	if err != nil {
		return mapError(fmt.Errorf("count servers: %w", err), subject{})
	}
	tools, err := s.store.CountTools(ctx, "")
	if err != nil {
		return mapError(fmt.Errorf("count tools: %w", err), subject{})
	}
	// last_sync is the latest updated_at of any server: every status change, health record and tool refresh
	// touches it. The server count is bounded (MCP_AGGREGATOR_MAX_SERVERS), so reading them all is cheap.
	servers, _, err := s.store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return mapError(fmt.Errorf("list servers: %w", err), subject{})
	}
	var lastSync *string
	if len(servers) > 0 {
		latest := servers[0].UpdatedAt
		for _, srv := range servers[1:] {
			if srv.UpdatedAt.After(latest) {
				latest = srv.UpdatedAt
			}
		}
		if !latest.IsZero() {
			t := view.Time(latest)
			lastSync = &t
		}
	}

	total := 0
	for _, n := range byStatus {
		total += n
	}
	uptime := int64(s.cfg.Now().Sub(s.cfg.StartedAt).Seconds())
	if uptime < 0 {
		uptime = 0
	}
	return c.JSON(stateView{
		TotalServers:               total,
		ConnectedServers:           byStatus[persistence.StatusConnected],
		DisconnectedServers:        byStatus[persistence.StatusDisconnected],
		ErrorServers:               byStatus[persistence.StatusError],
		ConnectingServers:          byStatus[persistence.StatusConnecting],
		DegradedServers:            byStatus[persistence.StatusDegraded],
		TotalTools:                 tools.Total,
		ClassifiedTools:            tools.Classified,
		UnclassifiedTools:          tools.Unclassified,
		LastSync:                   lastSync,
		HealthCheckIntervalSeconds: int64(s.cfg.HealthCheckInterval.Seconds()),
		UptimeSeconds:              uptime,
	})
}

// GET /health: healthy; degraded (200) when servers are in ERROR; unhealthy (503) when the database does not
// answer within HealthTimeout. Database errors are logged, and reported only as "error: timeout" or
// "error: unavailable" since this endpoint is for probes and must not reveal connection details.
func (s *server) health(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.HealthTimeout)
	defer cancel()
	out := healthView{Status: healthHealthy, Checks: healthChecks{Database: "ok", Qdrant: "not_configured", Sessions: "ok"}}

	byStatus, err := s.checkDatabase(ctx)
	if err != nil {
		s.log.LogAttrs(c.UserContext(), slog.LevelWarn, "health check: database failed",
			slog.String("request_id", requestIDOf(c)), slog.Any("error", err))
		out.Status = healthUnhealthy
		out.Checks.Database = "error: unavailable"
		if errors.Is(err, context.DeadlineExceeded) {
			out.Checks.Database = "error: timeout"
		}
		out.Checks.Sessions = "unknown"
		out.Issues = []string{"database unreachable"}
		return c.Status(fiber.StatusServiceUnavailable).JSON(out)
	}

	total := 0
	for _, n := range byStatus {
		total += n
	}
	out.Servers = &healthServers{
		Total:     total,
		Connected: byStatus[persistence.StatusConnected],
		Error:     byStatus[persistence.StatusError],
	}
	if s.cluster != nil {
		node, members, joined := s.cluster()
		out.Cluster = &healthCluster{Node: node, Members: members, Joined: joined}
		if !joined {
			out.Status = healthDegraded
			out.Issues = append(out.Issues, "this node has not joined its cluster")
		}
	}
	if s.vectors != nil {
		state, err := s.vectors(ctx)
		out.Checks.Qdrant = state
		if err != nil {
			// Search falls back to lexical ranking; calls are not affected.
			s.log.LogAttrs(c.UserContext(), slog.LevelWarn, "health check: vector index failed",
				slog.String("request_id", requestIDOf(c)), slog.Any("error", err))
			out.Status = healthDegraded
			out.Checks.Qdrant = "error: unavailable"
			out.Issues = append(out.Issues, "vector index unreachable: search ranks lexically only")
		}
	}
	if n := byStatus[persistence.StatusError]; n > 0 {
		out.Status = healthDegraded
		out.Checks.Sessions = "degraded"
		noun := "servers"
		if n == 1 {
			noun = "server"
		}
		out.Issues = append(out.Issues, fmt.Sprintf("%d %s in error state", n, noun))
	}
	return c.JSON(out)
}

// checkDatabase pings the store and counts servers by status. It returns when ctx ends even if the store ignores
// the context, so a wedged database cannot hang the probe; the abandoned call finishes in the background.
func (s *server) checkDatabase(ctx context.Context) (map[string]int, error) {
	type result struct {
		byStatus map[string]int
		err      error
	}
	done := make(chan result, 1)
	go func() {
		if err := s.store.Ping(ctx); err != nil {
			done <- result{err: fmt.Errorf("ping %s store: %w", s.store.Kind(), err)}
			return
		}
		byStatus, err := s.store.CountServersByStatus(ctx)
		if err != nil {
			err = fmt.Errorf("count servers: %w", err)
		}
		done <- result{byStatus: byStatus, err: err}
	}()
	select {
	case r := <-done:
		return r.byStatus, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("database check: %w", ctx.Err())
	}
}

func requestIDOf(c *fiber.Ctx) string {
	rid, _ := c.Locals(localRequestID).(string)
	return rid
}

// Probe paths, the same on both listeners and open without a token (auth.Policy): liveness says the process
// serves HTTP; readiness says it can do its work (the store answers and startup reconnection has settled). The
// contract's GET /api/v1/aggregator/health stays as it is (200 while degraded), for humans and dashboards.
const (
	LivePath  = "/livez"
	ReadyPath = "/readyz"
)

// ProbeView is the body of GET /livez and GET /readyz.
type ProbeView struct {
	Status string            `json:"status"` // "ok" or "not_ready"
	Checks map[string]string `json:"checks,omitempty"`
}

// GET /livez: 200 as long as the process answers. It reads nothing, so a slow store cannot fail it (a liveness
// failure restarts the process, which would not help the store).
func (s *server) live(c *fiber.Ctx) error {
	return c.JSON(ProbeView{Status: "ok"})
}

// GET /readyz: 200 when ready, else 503 (see Readiness).
func (s *server) ready(c *fiber.Ctx) error {
	ok, probe := Readiness(c.UserContext(), s.store, s.settled, s.cluster, s.cfg.HealthTimeout, s.log)
	if !ok {
		c.Set(fiber.HeaderRetryAfter, "1")
		return c.Status(fiber.StatusServiceUnavailable).JSON(probe)
	}
	return c.JSON(probe)
}

// ClusterProbe reports this node's cluster membership: its node id, how many members it sees, and whether it has
// joined (it sees itself among them). nil: not a cluster.
type ClusterProbe func() (node string, members int, joined bool)

// Readiness decides GET /readyz on either listener: ready when startup reconnection has settled (settled nil or
// true), the node has joined its cluster (cluster nil: not a cluster) and the store answers a ping within
// timeout. Store errors are logged, and reported only as "error: unavailable" or "error: timeout".
func Readiness(ctx context.Context, store persistence.Store, settled func() bool, cluster ClusterProbe, timeout time.Duration, log *slog.Logger) (bool, ProbeView) {
	probe := ProbeView{Status: "ok", Checks: map[string]string{"store": "ok", "startup": "settled"}}
	ready := true
	if settled != nil && !settled() {
		ready = false
		probe.Checks["startup"] = "reconnecting"
	}
	if cluster != nil {
		probe.Checks["cluster"] = "joined"
		if _, _, joined := cluster(); !joined {
			ready = false
			probe.Checks["cluster"] = "not_joined"
		}
	}
	if timeout <= 0 {
		timeout = DefaultHealthTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- store.Ping(pctx) }()
	var err error
	select {
	case err = <-done:
	case <-pctx.Done():
		err = fmt.Errorf("store ping: %w", pctx.Err())
	}
	if err != nil {
		ready = false
		probe.Checks["store"] = "error: unavailable"
		if errors.Is(err, context.DeadlineExceeded) {
			probe.Checks["store"] = "error: timeout"
		}
		if log != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "readiness: store check failed", slog.Any("error", err))
		}
	}
	if !ready {
		probe.Status = "not_ready"
	}
	return ready, probe
}

// ProbeHandler serves GET /livez and GET /readyz on a net/http listener (the MCP listener), with the answers of
// the REST listener.
func ProbeHandler(store persistence.Store, settled func() bool, cluster ClusterProbe, timeout time.Duration, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			apierror.Write(w, &apierror.Error{Status: http.StatusMethodNotAllowed, Code: apierror.CodeMethodNotAllowed, Detail: "Method not allowed"})
			return
		}
		switch r.URL.Path {
		case LivePath:
			writeJSON(w, http.StatusOK, ProbeView{Status: "ok"})
		case ReadyPath:
			ok, probe := Readiness(r.Context(), store, settled, cluster, timeout, log)
			status := http.StatusOK
			if !ok {
				w.Header().Set("Retry-After", "1")
				status = http.StatusServiceUnavailable
			}
			writeJSON(w, status, probe)
		default:
			apierror.Write(w, &apierror.Error{Status: http.StatusNotFound, Code: apierror.CodeNotFound, Detail: "Not found"})
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
