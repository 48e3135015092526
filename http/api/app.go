// Package api is the REST admin front end of the aggregator daemon (/api/v1/aggregator, system-contract.md): it
// validates requests (BR-001), reads the Store for queries, runs tool calls, registrations and searches through
// the use-case layer (package gateway) and the other writes through actors.Control, and answers every failure in
// the one error shape {"detail","error_code","context"}.
//
// The package holds no mutable global state: New builds a self-contained *fiber.App from its Deps, so several
// apps (tests, a future second listener) can live side by side.
package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/ui"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// apiPrefix is the base path of every route.
const apiPrefix = "/api/v1/aggregator"

// Defaults used where Config leaves a field zero.
const (
	DefaultMaxBodyBytes        = 1 << 20
	DefaultAskTimeout          = 5 * time.Second
	DefaultHealthTimeout       = 2 * time.Second
	DefaultHealthCheckInterval = 30 * time.Second
	DefaultReadTimeout         = 30 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultIdleTimeout         = 120 * time.Second
)

// Config tunes the front end. Zero fields take the Default* values, so Config{} is usable.
type Config struct {
	// MaxBodyBytes caps request bodies; a larger one is answered 413 REQUEST_TOO_LARGE.
	MaxBodyBytes int
	// HealthCheckInterval is the actors' health check period, reported by GET /state.
	HealthCheckInterval time.Duration
	// StartedAt is when the daemon started, for uptime_seconds (default: when New is called).
	StartedAt time.Time
	// AskTimeout is the deadline of each Control call and Store read a request makes; past it the answer is 503
	// SERVICE_BUSY rather than a hung request.
	AskTimeout time.Duration
	// HealthTimeout bounds the Store.Ping of GET /health, which must answer fast even with the database down.
	HealthTimeout time.Duration
	// ReadTimeout, WriteTimeout and IdleTimeout bound slow clients on the connection.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time
	// MetricsOpen serves /metrics without a token (auth.Policy).
	MetricsOpen bool
	// ConsoleURL is the web console's address as browsers reach it (http://host:port/ui/): the OAuth callback of a
	// backend's authorization sends the browser there to complete it ("" : /ui/ on this listener).
	ConsoleURL string
	// ConsoleClientID is the console's public client at the OpenID provider (Tokens' issuer): with both, the console
	// signs in through the provider (authorization code with PKCE) instead of asking for a token.
	ConsoleClientID string
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.AskTimeout <= 0 {
		c.AskTimeout = DefaultAskTimeout
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = DefaultHealthTimeout
	}
	if c.HealthCheckInterval <= 0 {
		c.HealthCheckInterval = DefaultHealthCheckInterval
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.StartedAt.IsZero() {
		c.StartedAt = c.Now()
	}
	return c
}

// Deps is everything the front end needs, injected so tests can use fakes. Store and Control are required.
type Deps struct {
	// Store answers the read-only endpoints.
	Store persistence.Store
	// Control performs every write (register, update, connect, disconnect, remove) through the actors.
	Control actors.Control
	// Logger receives the access log and unexpected errors (default: discard).
	Logger *slog.Logger
	Config Config
	// Metrics records requests and routing time and is served at /metrics (nil: no metrics, no route).
	Metrics *metrics.Metrics
	// VectorHealth reports the vector index for GET /health: "in_process", or "ok" when Qdrant answers (nil:
	// "not_configured").
	VectorHealth func(ctx context.Context) (string, error)
	// Tokens are the bearer tokens every route but /health needs (nil or empty: auth off, everyone is an
	// anonymous admin).
	Tokens *auth.Tokens
	// Limiter rate-limits POST /api/v1/tools/call per client (nil: no limit).
	Limiter *auth.Limiter
	// HostGuard refuses DNS-rebinding Host headers and foreign browser Origins with 403 before anything else
	// (nil: no check; the daemon always sets one).
	HostGuard *auth.HostGuard
	// Settled reports whether startup reconnection has settled, for GET /readyz (nil: always settled).
	Settled func() bool
	// Cluster reports the node's cluster membership, for GET /readyz and /health (nil: not a cluster).
	Cluster ClusterProbe
	// Owner names, in a cluster, the node that serves a server (actors.System.OwnerAddress: its MCP listener's
	// host:port, "" when not known): a tool call's answer carries it in actors.OwnerHeader (nil: not a cluster).
	Owner func(serverID string) string
	// Curation manages tool filters, overrides, pinning and profiles (nil: those writes answer 503).
	Curation actors.Curation
	// Gateway runs the use cases (calls, registrations, searches) the routes decode and encode; nil: one over
	// Control with Metrics. The daemon shares one with the MCP endpoints.
	Gateway *gateway.Gateway
	// Tasks runs task-augmented calls and serves /api/v1/tasks (nil: those answer 503).
	Tasks *tasks.Manager
	// OAuth runs callers' OAuth flows for per_user servers of OAuth backends (nil: those routes answer 503).
	OAuth *backendauth.Flows
}

// server holds one app's dependencies; its methods are the handlers.
type server struct {
	store   persistence.Store
	control actors.Control
	gw      *gateway.Gateway
	log     *slog.Logger
	cfg     Config
	metrics *metrics.Metrics
	vectors func(ctx context.Context) (string, error)
	tokens  *auth.Tokens
	policy  auth.Policy
	limiter *auth.Limiter
	guard   *auth.HostGuard
	settled func() bool
	cluster ClusterProbe
	owner   func(serverID string) string
	// curation: see Deps.Curation.
	curation actors.Curation
	// tasks: see Deps.Tasks.
	tasks *tasks.Manager
	// oauth: see Deps.OAuth.
	oauth *backendauth.Flows
}

// New builds the whole admin app: routes, error shape, request ids, access log and panic recovery. It panics when
// Store or Control is missing, a wiring mistake that must fail at start.
func New(d Deps) *fiber.App {
	if d.Store == nil || d.Control == nil {
		panic("api.New: Deps.Store and Deps.Control are required")
	}
	s := &server{store: d.Store, control: d.Control, log: d.Logger, cfg: d.Config.withDefaults(), metrics: d.Metrics, vectors: d.VectorHealth,
		tokens: d.Tokens, policy: auth.Policy{MetricsOpen: d.Config.MetricsOpen}, limiter: d.Limiter,
		guard: d.HostGuard, settled: d.Settled, cluster: d.Cluster, owner: d.Owner, curation: d.Curation, gw: d.Gateway, tasks: d.Tasks, oauth: d.OAuth}
	if s.gw == nil {
		s.gw = gateway.New(d.Control, gateway.Options{Metrics: d.Metrics})
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}

	app := fiber.New(fiber.Config{
		AppName:               "mcp-aggregator",
		BodyLimit:             s.cfg.MaxBodyBytes,
		ErrorHandler:          s.handleError,
		DisableStartupMessage: true,
		// Values from the ctx (params, headers, query) are copies, safe to hand to actors that outlive the request.
		Immutable: true,
		// No endpoint takes forms; without this fasthttp would parse multipart bodies before the handler can
		// refuse them with 415.
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  s.cfg.ReadTimeout,
		WriteTimeout:                 s.cfg.WriteTimeout,
		IdleTimeout:                  s.cfg.IdleTimeout,
	})
	app.Use(s.traceRequest)
	app.Use(s.requestContext)
	app.Use(s.guardHost)
	app.Use(recover.New(recover.Config{EnableStackTrace: true, StackTraceHandler: s.logPanic}))
	app.Use(s.authenticate)

	g := app.Group(apiPrefix)
	g.Post("/servers", s.createServer)
	g.Get("/servers", s.listServers)
	g.Get("/servers/:id", s.getServer)
	g.Patch("/servers/:id", s.patchServer)
	g.Delete("/servers/:id", s.deleteServer)
	g.Post("/servers/:id/connect", s.connectServer)
	g.Post("/servers/:id/disconnect", s.disconnectServer)
	g.Get("/servers/:id/tools", s.listServerTools)
	g.Get("/servers/:id/prompts", s.listServerPrompts)
	g.Get("/servers/:id/resources", s.listServerResources)
	g.Get("/servers/:id/history", s.serverHistory)
	g.Post("/servers/:id/tools/refresh", s.refreshTools)
	g.Get("/state", s.state)
	g.Get("/health", s.health)
	g.Get("/audit", s.listAudit)
	s.routeObserve(g)
	s.routeCuration(g)
	s.routeCredentials(g)
	s.routeOAuth(g)
	g.Post("/import", s.importServers)
	g.Get("/export", s.exportServers)
	g.Get("/servers/:id/tools/:tool", s.getServerTool)
	app.Get(WhoamiPath, s.whoami)
	ui.Mount(app, s.consoleLogin())
	app.Get(OpenAPIPath, s.openAPI())
	app.Get(LivePath, s.live)
	app.Get(ReadyPath, s.ready)
	app.Post("/api/v1/tools/call", s.watchDisconnect, s.callTool)
	app.Get(TasksPath, s.listTasks)
	app.Get(TasksPath+"/:id", s.getTask)
	app.Delete(TasksPath+"/:id", s.cancelTask)
	app.Post("/api/v1/search", s.searchTools)
	app.Get("/api/v1/skills", s.listSkills)
	if d.Metrics != nil {
		app.Get("/metrics", adaptor.HTTPHandler(d.Metrics.Handler()))
	}
	return app
}

// opContext derives the context of one Control call or Store read: the request's context (which carries the
// request id) with the ask deadline.
func (s *server) opContext(c *fiber.Ctx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.UserContext(), s.cfg.AskTimeout)
}

// consoleLogin is the console's sign-in through the OpenID provider, or nil (no issuer, or no console client).
func (s *server) consoleLogin() *ui.Login {
	v := s.tokens.OAuth()
	if v == nil || s.cfg.ConsoleClientID == "" {
		return nil
	}
	return &ui.Login{Issuer: v.Issuer(), AuthorizationEndpoint: v.AuthorizationEndpoint(), TokenEndpoint: v.TokenEndpoint(),
		ClientID: s.cfg.ConsoleClientID, Scope: "openid " + v.AdminScope() + " " + v.ClientScope(), Resource: v.Audience()}
}
