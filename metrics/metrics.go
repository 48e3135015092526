// Package metrics is the aggregator's Prometheus instrumentation: one registry per daemon holding the metrics of
// the Monitoring Contract, what operators need beside them, the actor runtime's OpenTelemetry instruments, and the
// Go runtime and process collectors. It is a top-level package because the actors, both HTTP front ends and the
// daemon all record into it, so it can live inside none of them.
//
// Label cardinality stays bounded: the only free labels are server names (at most MCP_AGGREGATOR_MAX_SERVERS,
// and a removed server's series are deleted), route patterns, outcomes and causes from fixed sets. Tool names,
// arguments, request ids and raw paths are never labels.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// Outcomes of a tool call (label outcome).
const (
	OutcomeOK          = "ok"           // the backend answered a result
	OutcomeToolError   = "tool_error"   // a result with isError
	OutcomeFailed      = "failed"       // a JSON-RPC error from the backend (502)
	OutcomeUnavailable = "unavailable"  // the server was not connected or the session was lost (503)
	OutcomeTimeout     = "timeout"      // the request timeout (504)
	OutcomeCancelled   = "cancelled"    // the caller left
	OutcomeRateLimited = "rate_limited" // refused by the per-client rate limit (429)
)

// Causes of a lost session (label cause).
const (
	CauseProcessExit  = "process_exit"
	CauseClosed       = "connection_closed"
	CauseHealthChecks = "health_checks"
)

// Snapshot is the state the scrape-time gauges read (servers by status, tool counts), so they can never drift
// from the truth the way incremented gauges can.
type Snapshot struct {
	ServersByStatus map[string]int
	Tools           int
	Classified      int
	// ClusterMembers is how many nodes this one sees in its cluster (0: not a cluster; no series).
	ClusterMembers int
	// Mailboxes is how many user messages wait in the mailbox of each server actor this node runs, by server name
	// (read without a message: actors.System.Snapshot).
	Mailboxes map[string]int
}

// Metrics holds every collector. A nil *Metrics is valid and records nothing, so packages can be used without it.
type Metrics struct {
	Registry *prometheus.Registry

	RoutingDuration     prometheus.Histogram
	ExecutionDuration   *prometheus.HistogramVec
	HealthCheckDuration *prometheus.GaugeVec
	HealthCheckFailures *prometheus.CounterVec
	ToolCalls           *prometheus.CounterVec
	CallsInFlight       *prometheus.GaugeVec
	SearchDuration      prometheus.Histogram
	Classifications     *prometheus.CounterVec
	ReconnectAttempts   *prometheus.CounterVec
	SessionLosses       *prometheus.CounterVec
	StateTransitions    *prometheus.CounterVec
	HTTPRequests        *prometheus.CounterVec
	HTTPDuration        *prometheus.HistogramVec
	ActorRestarts       *prometheus.CounterVec
	BackendSessions     *prometheus.GaugeVec
	ToolChangesPending  *prometheus.GaugeVec
	ToolChangesHeld     *prometheus.CounterVec
	NotifyDropped       *prometheus.CounterVec
	ReservedURIsDropped *prometheus.CounterVec

	// Series keeps every server's recent calls for the console (timeseries.go).
	Series *Recorder
}

// latencyBuckets span 100 µs to 60 s: the aggregator adds well under a millisecond, backends take up to the
// request timeout.
var latencyBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New builds the registry with every metric; snapshot (may be nil) feeds the scrape-time gauges.
func New(snapshot func() Snapshot) *Metrics { return NewForNode(snapshot, "") }

// NewForNode is New for one node of a cluster: every series carries the label node (the node id), so that the
// nodes' series stay apart when one Prometheus scrapes them all. node empty: no such label (a single node).
func NewForNode(snapshot func() Snapshot, node string) *Metrics {
	r := prometheus.NewRegistry()
	var reg prometheus.Registerer = r
	if node != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, r)
	}
	m := &Metrics{
		Registry: r,
		Series:   NewRecorder(0, 0, nil),
		RoutingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcp_aggregator_routing_duration_seconds", Buckets: latencyBuckets[:],
			Help: "Time the aggregator adds to a tool call: resolution, dispatch and answer, without the backend's own time.",
		}),
		ExecutionDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcp_aggregator_execution_duration_seconds", Buckets: latencyBuckets[:],
			Help: "Time a backend took to answer a tool call.",
		}, []string{"server"}),
		HealthCheckDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcp_aggregator_health_check_duration_seconds",
			Help: "Duration of the last health check of a server.",
		}, []string{"server"}),
		HealthCheckFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_health_check_failures_total",
			Help: "Health checks that failed (5xx, timeout, connection error or failed ping).",
		}, []string{"server"}),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_tool_calls_total",
			Help: "Tool calls by server and outcome (ok, tool_error, failed, unavailable, timeout, cancelled, rate_limited).",
		}, []string{"server", "outcome"}),
		CallsInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcp_aggregator_tool_calls_in_flight",
			Help: "Tool calls running on a server now.",
		}, []string{"server"}),
		SearchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcp_aggregator_search_duration_seconds", Buckets: latencyBuckets[:],
			Help: "Duration of tool searches.",
		}),
		Classifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_classifications_total",
			Help: "Tool classifications by classifier and outcome (classified, unclassified, failed).",
		}, []string{"classifier", "outcome"}),
		ReconnectAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_reconnect_attempts_total",
			Help: "Connection attempts made by the retry schedule after a failure.",
		}, []string{"server"}),
		SessionLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_session_losses_total",
			Help: "Sessions lost without being closed by the aggregator, by cause (process_exit, connection_closed, health_checks).",
		}, []string{"server", "cause"}),
		StateTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_state_transitions_total",
			Help: "Server state changes by the state entered.",
		}, []string{"to"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_http_requests_total",
			Help: "HTTP requests by listener, route pattern, method and status code.",
		}, []string{"listener", "route", "method", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcp_aggregator_http_request_duration_seconds", Buckets: latencyBuckets[:],
			Help: "HTTP request duration by listener and route pattern.",
		}, []string{"listener", "route"}),
		ActorRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_actor_restarts_total",
			Help: "Actors restarted by their supervisor after a crash, by actor kind.",
		}, []string{"kind"}),
		BackendSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcp_aggregator_backend_sessions",
			Help: "1 while this process holds the server's MCP session (in a cluster, on the node that owns the server).",
		}, []string{"server"}),
		ToolChangesPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcp_aggregator_tool_changes_pending",
			Help: "Tool definition changes held for an admin's approval (definition pinning), set by the server's owner.",
		}, []string{"server"}),
		ToolChangesHeld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_tool_changes_held_total",
			Help: "Tool definition changes put on hold by definition pinning, by kind (changed: an approved tool changed; new: a tool never approved).",
		}, []string{"server", "kind"}),
		NotifyDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_notifications_dropped_total",
			Help: "A backend's notifications dropped by the flood bounds, by kind (log, progress: beyond MCP_AGGREGATOR_NOTIFY_RATE; list_changed: merged into a rediscovery already on its way).",
		}, []string{"server", "kind"}),
		ReservedURIsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_aggregator_reserved_uris_dropped_total",
			Help: "Resources and resource templates a backend listed under the aggregator's reserved mcp-aggregator:// scheme, dropped at discovery, by kind (resource, resource_template).",
		}, []string{"server", "kind"}),
	}
	reg.MustRegister(m.RoutingDuration, m.ExecutionDuration, m.HealthCheckDuration, m.HealthCheckFailures, m.ToolCalls,
		m.CallsInFlight, m.SearchDuration, m.Classifications, m.ReconnectAttempts, m.SessionLosses, m.StateTransitions,
		m.HTTPRequests, m.HTTPDuration, m.ActorRestarts, m.BackendSessions, m.ToolChangesPending, m.ToolChangesHeld, m.ReservedURIsDropped,
		m.NotifyDropped, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if snapshot != nil {
		reg.MustRegister(&stateCollector{snapshot: snapshot})
	}
	return m
}

// BackendSession records whether this process holds the server's session now.
func (m *Metrics) BackendSession(server string, open bool) {
	if m == nil {
		return
	}
	if open {
		m.BackendSessions.WithLabelValues(server).Set(1)
	} else {
		m.BackendSessions.DeleteLabelValues(server)
	}
}

// Handler serves the registry in the Prometheus text format, or in OpenMetrics (with exemplars) to a scraper
// that asks for it.
func (m *Metrics) Handler() http.Handler {
	// OpenMetrics when the scraper asks for it (Prometheus does): the only format that carries exemplars.
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// ForgetServer deletes every series of a removed (or renamed) server.
func (m *Metrics) ForgetServer(name string) {
	if m == nil || name == "" {
		return
	}
	l := prometheus.Labels{"server": name}
	m.ExecutionDuration.DeletePartialMatch(l)
	m.HealthCheckDuration.DeletePartialMatch(l)
	m.HealthCheckFailures.DeletePartialMatch(l)
	m.ToolCalls.DeletePartialMatch(l)
	m.CallsInFlight.DeletePartialMatch(l)
	m.ReconnectAttempts.DeletePartialMatch(l)
	m.SessionLosses.DeletePartialMatch(l)
	m.BackendSessions.DeletePartialMatch(l)
	m.ToolChangesPending.DeletePartialMatch(l)
	m.ToolChangesHeld.DeletePartialMatch(l)
	m.ReservedURIsDropped.DeletePartialMatch(l)
	m.NotifyDropped.DeletePartialMatch(l)
	m.Series.Forget(name)
}

// ReservedURIs records the resources (kind resource) or resource templates (kind resource_template) a server listed
// under the reserved mcp-aggregator:// scheme and discovery dropped.
func (m *Metrics) ReservedURIs(server, kind string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.ReservedURIsDropped.WithLabelValues(server, kind).Add(float64(n))
}

// NotificationDropped counts a backend's notification dropped by the flood bounds (kind: log, progress,
// list_changed).
func (m *Metrics) NotificationDropped(server, kind string) {
	if m == nil {
		return
	}
	m.NotifyDropped.WithLabelValues(server, kind).Inc()
}

// ToolChanges records a server's pending tool changes after a discovery, and the changes it newly held by kind.
func (m *Metrics) ToolChanges(server string, pending int, held map[string]int) {
	if m == nil {
		return
	}
	m.ToolChangesPending.WithLabelValues(server).Set(float64(pending))
	for kind, n := range held {
		m.ToolChangesHeld.WithLabelValues(server, kind).Add(float64(n))
	}
}

// Call records the end of a tool call on a server.
func (m *Metrics) Call(server, outcome string, execution time.Duration) {
	if m == nil {
		return
	}
	m.ToolCalls.WithLabelValues(server, outcome).Inc()
	m.Series.Record(server, outcome, execution)
	if outcome == OutcomeOK || outcome == OutcomeToolError {
		m.ExecutionDuration.WithLabelValues(server).Observe(execution.Seconds())
	}
}

// InFlight moves a server's in-flight gauge by delta.
func (m *Metrics) InFlight(server string, delta float64) {
	if m == nil {
		return
	}
	m.CallsInFlight.WithLabelValues(server).Add(delta)
}

// Routing records the aggregator's own share of a call; a sampled span in ctx (the call's) becomes the
// observation's exemplar.
func (m *Metrics) Routing(ctx context.Context, d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	observe(ctx, m.RoutingDuration, d.Seconds())
}

// HealthCheck records one health check; counted failures increment the failure counter.
func (m *Metrics) HealthCheck(server string, d time.Duration, failed bool) {
	if m == nil {
		return
	}
	m.HealthCheckDuration.WithLabelValues(server).Set(d.Seconds())
	failures := m.HealthCheckFailures.WithLabelValues(server) // the series exists from the first check, at 0
	if failed {
		failures.Inc()
	}
}

// Reconnect counts an attempt of the retry schedule.
func (m *Metrics) Reconnect(server string) {
	if m == nil {
		return
	}
	m.ReconnectAttempts.WithLabelValues(server).Inc()
}

// SessionLost counts a session the aggregator did not close itself.
func (m *Metrics) SessionLost(server, cause string) {
	if m == nil {
		return
	}
	m.SessionLosses.WithLabelValues(server, cause).Inc()
}

// Transition counts a state change.
func (m *Metrics) Transition(to string) {
	if m == nil {
		return
	}
	m.StateTransitions.WithLabelValues(to).Inc()
}

// Search records one search.
func (m *Metrics) Search(d time.Duration) {
	if m == nil {
		return
	}
	m.SearchDuration.Observe(d.Seconds())
}

// Classification records one classification outcome.
func (m *Metrics) Classification(classifier, outcome string) {
	if m == nil {
		return
	}
	m.Classifications.WithLabelValues(classifier, outcome).Inc()
}

// HTTP records one request; route is the route pattern, never the raw path. A sampled span in ctx (the
// request's) becomes the duration's exemplar.
func (m *Metrics) HTTP(ctx context.Context, listener, route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.HTTPRequests.WithLabelValues(listener, route, method, statusText(status)).Inc()
	observe(ctx, m.HTTPDuration.WithLabelValues(listener, route), d.Seconds())
}

// observe records v on o with, when ctx carries a sampled span, an exemplar naming it (trace_id, span_id): the
// link from a latency bucket to a trace of a request that fell in it. Prometheus keeps exemplars when it scrapes
// in the OpenMetrics format (Handler offers it) with --enable-feature=exemplar-storage. Without a span (tracing
// off) it is a plain Observe.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
			return
		}
	}
	o.Observe(v)
}

// ActorRestart counts a supervisor restart.
func (m *Metrics) ActorRestart(kind string) {
	if m == nil {
		return
	}
	m.ActorRestarts.WithLabelValues(kind).Inc()
}

func statusText(code int) string {
	const digits = "0123456789"
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}

// stateCollector reports the servers-by-status and tool gauges of the contract from a snapshot at scrape time.
type stateCollector struct {
	snapshot func() Snapshot
}

var (
	serversDesc    = prometheus.NewDesc("mcp_aggregator_servers_total", "Registered servers by status.", []string{"status"}, nil)
	toolsDesc      = prometheus.NewDesc("mcp_aggregator_tools_total", "Tools of all registered servers.", nil, nil)
	classifiedDesc = prometheus.NewDesc("mcp_aggregator_tools_classified", "Tools classified into skills.", nil, nil)
	membersDesc    = prometheus.NewDesc("mcp_aggregator_cluster_members", "Nodes this node sees in its cluster.", nil, nil)
	mailboxDesc    = prometheus.NewDesc("mcp_aggregator_server_mailbox_depth",
		"Messages waiting in the mailbox of a server's actor on this node (calls and commands not yet taken), read at scrape.", []string{"server"}, nil)
)

// statuses are always reported, at 0 when empty, so alert ratios never divide by a missing series.
var statuses = []string{"connected", "connecting", "degraded", "disconnected", "disconnecting", "error"}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serversDesc
	ch <- toolsDesc
	ch <- classifiedDesc
	ch <- membersDesc
	ch <- mailboxDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for _, st := range statuses {
		n := 0
		for k, v := range s.ServersByStatus {
			if lower(k) == st {
				n += v
			}
		}
		ch <- prometheus.MustNewConstMetric(serversDesc, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(toolsDesc, prometheus.GaugeValue, float64(s.Tools))
	ch <- prometheus.MustNewConstMetric(classifiedDesc, prometheus.GaugeValue, float64(s.Classified))
	if s.ClusterMembers > 0 {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(s.ClusterMembers))
	}
	for server, depth := range s.Mailboxes {
		ch <- prometheus.MustNewConstMetric(mailboxDesc, prometheus.GaugeValue, float64(depth), server)
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// WrapHTTP counts the requests of a net/http handler under a fixed route pattern. The wrapped ResponseWriter keeps
// flushing working (SSE and streamable HTTP responses stream through it).
func (m *Metrics) WrapHTTP(listener, route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.HTTP(r.Context(), listener, route, r.Method, sw.status, time.Since(start))
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes through, so streamed responses are not held back.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
