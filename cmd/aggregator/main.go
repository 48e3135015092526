// Command aggregator is the MCP server aggregator daemon: `serve` runs it, `migrate` applies the database
// migrations and exits, `version` prints the version. Configuration comes from the environment (see README).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const usage = `usage: aggregator <command>

commands:
  serve     run the daemon: REST API, MCP endpoint, actors, health checks
  stdio     run the daemon with its MCP endpoint on stdin/stdout (for desktop MCP clients)
  migrate   apply database migrations and exit
  rotate-key
            re-encrypt every connection_config under MCP_CREDENTIAL_KEY, reading old rows with
            MCP_CREDENTIAL_KEY_PREVIOUS; prints how many (run it with the daemon stopped)
  version   print the version
`

func main() {
	// The go-sdk allocates a fresh JSON decoder per message, so garbage collection takes a large share of a busy
	// daemon's CPU; a heap target of 400 % (instead of 100 %) raised routed throughput by about 15 % in
	// BENCHMARKS.md, for about 75 MiB more with 50 servers. A soft limit of 512 MiB (the contract's memory request)
	// makes the collector work harder before the heap grows past it. GOGC and GOMEMLIMIT in the environment win.
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(512 << 20)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, "aggregator", actors.Version)
		return 0
	case "serve", "migrate", "stdio", "rotate-key":
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
		return 2
	}
	cfg, err := loadConfig(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if args[0] == "serve" {
		if err := auth.CheckExposure(cfg.Tokens, map[string]string{"MCP_AGGREGATOR_LISTEN": cfg.Listen, "MCP_AGGREGATOR_MCP_LISTEN": cfg.MCPListen}); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	logger := newLogger(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if args[0] == "migrate" {
		store, err := openStore(ctx, cfg, logger)
		if err != nil {
			logger.Error("migrate failed", "error", err)
			return 1
		}
		store.Close()
		logger.Info("migrations applied", "store", store.Kind())
		return 0
	}
	if args[0] == "rotate-key" {
		return rotateKey(ctx, cfg, logger, stdout)
	}
	if args[0] == "stdio" {
		if err := stdio(ctx, cfg, logger); err != nil {
			logger.Error("stdio daemon stopped with an error", "error", err)
			return 1
		}
		return 0
	}
	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("daemon stopped with an error", "error", err)
		return 1
	}
	return 0
}

// openStore opens PostgreSQL when DATABASE_URL is set, else the embedded store; both apply migrations on open.
func openStore(ctx context.Context, cfg config, logger *slog.Logger) (persistence.Store, error) {
	if cfg.DatabaseURL != "" {
		s, err := postgres.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL store: %w", err)
		}
		logger.Info("using PostgreSQL store")
		return s, nil
	}
	path := filepath.Join(cfg.DataDir, "aggregator.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open embedded store at %s: %w", path, err)
	}
	logger.Info("using the embedded store (set DATABASE_URL for PostgreSQL)", "path", path)
	return s, nil
}

// serve runs the daemon until ctx is cancelled (SIGINT/SIGTERM), then stops within the shutdown timeout: the HTTP
// listeners first, then every server actor (closing sessions and child processes), then the store.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	if !cfg.Enabled {
		logger.Warn("MCP_AGGREGATOR_ENABLED is false: the aggregator is disabled; not starting")
		return nil
	}
	started := time.Now()
	if cfg.Tokens.Enabled() {
		admins, clients := cfg.Tokens.Count()
		logger.Info("bearer-token auth on", "admin_tokens", admins, "client_tokens", clients, "metrics_open", cfg.MetricsOpen)
	} else {
		logger.Warn("no token configured: auth is off (every caller is an anonymous admin) and the daemon listens on loopback only",
			"rest", cfg.Listen, "mcp", cfg.MCPListen)
	}
	limiter := auth.NewLimiter(cfg.RateLimit, cfg.RateBurst)
	store, err := openSealedStore(ctx, cfg, logger, true)
	if err != nil {
		return err
	}
	defer store.Close()

	mx, systemRef := newMetrics()
	meters, err := mx.ActorMeterProvider()
	if err != nil {
		return err
	}
	// protoactor takes its meter from OpenTelemetry's global provider; this is the one place that sets it.
	otel.SetMeterProvider(meters)
	sd, classifier, err := buildSearch(ctx, cfg.Search, logger)
	if err != nil {
		return err
	}
	actors.ReapProcessGroups(ctx, cfg.DataDir, logger)           // what stdio servers of a daemon that died left behind
	cfg.Actors.ListenAddrs = []string{cfg.Listen, cfg.MCPListen} // a backend there would be this daemon itself
	system, err := actors.Start(ctx, actors.Deps{Store: store, Logger: logger, Config: cfg.Actors, Metrics: mx, MeterProvider: meters,
		Search: sd, Classifier: classifier, DataDir: cfg.DataDir})
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	systemRef.Store(system)
	defer shutdownActors(system, cfg, logger)
	// Readiness waits for the servers that should reconnect at start, bounded like `aggregator stdio` does.
	var settled atomic.Bool
	go awaitSettled(ctx, system, cfg.Actors.ConnectionTimeout, &settled, logger)
	guard := cfg.hostGuard()
	app := api.New(api.Deps{Store: store, Control: system, Logger: logger, Metrics: mx, VectorHealth: system.VectorIndexHealth, Tokens: cfg.Tokens, Limiter: limiter,
		HostGuard: guard, Settled: settled.Load, Config: api.Config{
			MetricsOpen:         cfg.MetricsOpen,
			MaxBodyBytes:        cfg.MaxBodyBytes,
			HealthCheckInterval: cfg.Actors.HealthInterval,
			StartedAt:           started,
			AskTimeout:          cfg.Actors.AskTimeout,
		}})
	endpoint := mcpserver.New(system, store, mcpserver.Options{Logger: logger, Metrics: mx, Limiter: limiter,
		RequireIdentity: cfg.Tokens.Enabled(), SearchFirst: cfg.Search.SearchFirst, AliasSeparator: cfg.Actors.AliasSeparator, AskTimeout: cfg.Actors.AskTimeout,
		SessionIdleTimeout: never(cfg.MCPSessionIdle), MaxSessions: cfg.MCPMaxSessions, MaxSessionsPerClient: cfg.MCPMaxSessionsPerClient, HostGuarded: true})
	defer endpoint.Close()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	mcpLn, err := net.Listen("tcp", cfg.MCPListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on %s: %w", cfg.MCPListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mx.WrapHTTP("mcp", "/mcp", endpoint.StreamableHandler()))
	mux.Handle("/sse", mx.WrapHTTP("mcp", "/sse", endpoint.SSEHandler()))
	mux.Handle(mcpproxy.Prefix, mx.WrapHTTP("mcp", mcpproxy.Prefix+"{name}", mcpproxy.NewWithOptions(system, mcpproxy.Options{Logger: logger, Limiter: limiter, MaxSessionsPerServer: cfg.ProxyMaxSessions, IdleTimeout: never(cfg.ProxyIdle), HostGuarded: true})))
	probes := mx.WrapHTTP("mcp", "probe", api.ProbeHandler(store, settled.Load, 0, logger))
	mux.Handle(api.LivePath, probes)
	mux.Handle(api.ReadyPath, probes)
	// Outside in: request id and access log, host/origin guard (403 before anything), bearer tokens, the loop guard
	// (508 for a request that already passed through this daemon), routes.
	mcpHandler := api.AccessLog(logger, "mcp", mcpRoute, guard.Wrap(auth.Middleware(cfg.Tokens, auth.Policy{MetricsOpen: cfg.MetricsOpen}, endpoint.LoopGuard(mux))))
	mcpHTTP := &http.Server{Handler: mcpHandler, ReadHeaderTimeout: 10 * time.Second}

	logger.Info("aggregator listening", "rest", "http://"+ln.Addr().String()+"/api/v1/aggregator",
		"mcp", "http://"+mcpLn.Addr().String()+"/mcp", "sse", "http://"+mcpLn.Addr().String()+"/sse", "version", actors.Version)
	served := make(chan error, 2)
	go func() { served <- app.Listener(ln) }()
	go func() { served <- mcpHTTP.Serve(mcpLn) }()

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-served:
		logger.Error("HTTP server failed", "error", err)
	}
	if shErr := app.ShutdownWithTimeout(cfg.ShutdownTimeout / 4); shErr != nil {
		logger.Warn("REST shutdown", "error", shErr)
	}
	// MCP streams (SSE GETs) stay open until closed: give them a moment, then close what is left.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout/4)
	if shErr := mcpHTTP.Shutdown(sctx); shErr != nil {
		_ = mcpHTTP.Close()
	}
	cancel()
	logger.Info("stopping", "uptime", time.Since(started).Round(time.Second).String())
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// stdio runs the store, the actors and the MCP endpoint with one MCP client on stdin/stdout (logs go to stderr),
// until the client leaves or a signal arrives. No HTTP listener is opened.
func stdio(ctx context.Context, cfg config, logger *slog.Logger) error {
	store, err := openSealedStore(ctx, cfg, logger, false)
	if err != nil {
		return err
	}
	defer store.Close()
	sd, classifier, err := buildSearch(ctx, cfg.Search, logger)
	if err != nil {
		return err
	}
	actors.ReapProcessGroups(ctx, cfg.DataDir, logger)
	system, err := actors.Start(ctx, actors.Deps{Store: store, Logger: logger, Config: cfg.Actors, Search: sd, Classifier: classifier, DataDir: cfg.DataDir})
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	defer shutdownActors(system, cfg, logger)
	endpoint := mcpserver.New(system, store, mcpserver.Options{Logger: logger, SearchFirst: cfg.Search.SearchFirst, AliasSeparator: cfg.Actors.AliasSeparator, AskTimeout: cfg.Actors.AskTimeout})
	defer endpoint.Close()
	// A desktop client lists tools once, right after it starts us: let the servers reconnect first (bounded).
	wctx, cancel := context.WithTimeout(ctx, cfg.Actors.ConnectionTimeout)
	if err := system.AwaitStartup(wctx); err != nil {
		logger.Warn("serving before every server reconnected", "error", err)
	}
	cancel()
	logger.Info("serving MCP on stdio")
	if err := endpoint.RunStdio(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("stdio session: %w", err)
	}
	return nil
}

// awaitSettled sets settled once every server that should reconnect at start has connected (with its tools) or
// failed, or after limit: readiness then depends on the store alone. A failed store read is retried.
func awaitSettled(ctx context.Context, system *actors.System, limit time.Duration, settled *atomic.Bool, logger *slog.Logger) {
	defer settled.Store(true)
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := system.AwaitStartup(wctx)
		if err == nil {
			return
		}
		if wctx.Err() != nil {
			logger.Warn("ready before every server reconnected", "error", err)
			return
		}
		select {
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// mcpRoute is the route pattern of a path on the MCP listener, for the access log (bounded: never a raw path).
func mcpRoute(path string) string {
	switch {
	case path == "/mcp" || path == "/sse" || path == api.LivePath || path == api.ReadyPath:
		return path
	case strings.HasPrefix(path, mcpproxy.Prefix):
		return mcpproxy.Prefix + "{name}"
	}
	return "unmatched"
}

func shutdownActors(system *actors.System, cfg config, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := system.Shutdown(sctx); err != nil {
		logger.Warn("actor shutdown", "error", err)
	}
	logger.Info("stopped")
}

// newMetrics builds the daemon's registry; its scrape-time gauges read the actor system once it is stored in the
// returned pointer (before that they report nothing).
func newMetrics() (*metrics.Metrics, *atomic.Pointer[actors.System]) {
	ref := &atomic.Pointer[actors.System]{}
	mx := metrics.New(func() metrics.Snapshot {
		if sys := ref.Load(); sys != nil {
			return sys.Snapshot()
		}
		return metrics.Snapshot{}
	})
	return mx, ref
}
