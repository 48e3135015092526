// Command aggregator is the MCP server aggregator daemon. Its subcommands:
//   - serve runs it: the REST API, the MCP endpoint, the actors and the health checks;
//   - stdio [--profile NAME] runs it with its MCP endpoint on stdin and stdout, for desktop MCP clients that start
//     their servers as child processes (with --profile, only that profile's tools);
//   - migrate applies the database migrations and exits;
//   - rotate-key re-encrypts every stored connection_config under MCP_CREDENTIAL_KEY, reading old rows with
//     MCP_CREDENTIAL_KEY_PREVIOUS (run it with the daemon stopped);
//   - import [-dry-run] [-url URL] [-json] FILE registers the servers of an mcpServers file (Claude Desktop,
//     Cursor) or a VS Code servers file through the running daemon's REST API;
//   - version prints the version.
//
// Configuration comes from the environment: README lists every variable, and envVars in config.go is that table.
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
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const usage = `usage: aggregator <command>

commands:
  serve     run the daemon: REST API, MCP endpoint, actors, health checks
  stdio [--profile NAME]
            run the daemon with its MCP endpoint on stdin/stdout (for desktop MCP clients); with
            --profile, only that profile's tools
  migrate   apply database migrations and exit
  rotate-key
            re-encrypt every connection_config under MCP_CREDENTIAL_KEY, reading old rows with
            MCP_CREDENTIAL_KEY_PREVIOUS; prints how many (run it with the daemon stopped)
  import [-dry-run] [-url URL] [-json] FILE
            register the servers of an mcpServers file (Claude Desktop, Cursor) or a VS Code servers file
            through the running daemon's REST API; one line per server: created, skipped, invalid, failed
  version   print the version
`

func main() {
	// The go-sdk allocates a fresh JSON decoder per message, so garbage collection takes a large share of a busy
	// daemon's CPU: GOGC=400 (instead of 100) raised routed throughput by about 15 % in BENCHMARKS.md. A soft memory
	// limit that follows the live heap (memory.go) bounds what that costs when much is live (10,000 tools indexed)
	// or when hostile backends' refused messages pass through. GOGC and GOMEMLIMIT in the environment win.
	memoryDefaults(os.LookupEnv)
	// Nothing reads a heap profile of the daemon (it serves no pprof): recording one would only hold a table of
	// allocation stacks (1.5-3 MiB of runtime memory at 10,000 tools) and cost time on every sampled allocation.
	runtime.MemProfileRate = 0
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "import" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return importCommand(ctx, args[1:], os.LookupEnv, stdout, stderr)
	}
	profile, args, perr := profileArg(args)
	if perr != nil {
		fmt.Fprintf(stderr, "%v\n%s", perr, usage)
		return 2
	}
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
		if err := cfg.checkClusterStore(); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if err := auth.CheckExposure(cfg.Tokens.Enabled() || cfg.OIDC.Issuer != "", map[string]string{"MCP_AGGREGATOR_LISTEN": cfg.Listen, "MCP_AGGREGATOR_MCP_LISTEN": cfg.MCPListen}); err != nil {
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
		if err := stdio(ctx, cfg, logger, profile); err != nil {
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
// With tracing on (startTracing ran before), every write to it makes a span (persistence/traced); off, it is the
// plain store.
func openStore(ctx context.Context, cfg config, logger *slog.Logger) (persistence.Store, error) {
	var s persistence.Store
	if cfg.DatabaseURL != "" {
		pg, err := postgres.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL store: %w", err)
		}
		logger.Info("using PostgreSQL store")
		s = pg
	} else {
		path := filepath.Join(cfg.DataDir, "aggregator.db")
		lite, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("open embedded store at %s: %w", path, err)
		}
		logger.Info("using the embedded store (set DATABASE_URL for PostgreSQL)", "path", path)
		s = lite
	}
	return traceStore(s), nil
}

// serve runs the daemon until ctx is cancelled (SIGINT/SIGTERM), then stops within the shutdown timeout: the HTTP
// listeners first, then every server actor (closing sessions and child processes), then the store.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	if !cfg.Enabled {
		logger.Warn("MCP_AGGREGATOR_ENABLED is false: the aggregator is disabled; not starting")
		return nil
	}
	started := time.Now()
	verifier, err := cfg.OIDC.verifier(ctx, logger)
	if err != nil {
		return err
	}
	if verifier != nil {
		cfg.Tokens = cfg.Tokens.WithOAuth(verifier)
		logger.Info("OAuth access tokens accepted", "issuer", verifier.Issuer(), "audience", cfg.OIDC.Audience,
			"resource_metadata", verifier.MetadataURL(), "admin_scope", cfg.OIDC.AdminScope, "client_scope", cfg.OIDC.ClientScope)
	}
	if cfg.Tokens.Enabled() {
		admins, clients := cfg.Tokens.Count()
		logger.Info("bearer-token auth on", "admin_tokens", admins, "client_tokens", clients, "metrics_open", cfg.MetricsOpen)
	} else {
		logger.Warn("no token configured: auth is off (every caller is an anonymous admin) and the daemon listens on loopback only",
			"rest", cfg.Listen, "mcp", cfg.MCPListen)
	}
	limiter := auth.NewLimiter(cfg.RateLimit, cfg.RateBurst)
	nodeID, nodeLock, err := nodeIdentity(cfg.DataDir)
	if err != nil {
		return err
	}
	defer closeQuietly(nodeLock)
	metricsNode := ""
	if cfg.Cluster.Mode != "" {
		// A cluster node is a new member at every start: protoactor blocks the id of a member that left for good.
		// Its old leases need no keeping: the other nodes saw it leave and took its servers over.
		nodeID = uuid.NewString()
		metricsNode = nodeID // a cluster's nodes are scraped together: their series carry the node
	}
	logger, stopTracing, err := startTracing(ctx, logger, nodeID)
	if err != nil {
		return err
	}
	defer stopTracing() // after the actors stopped and the store closed (deferred below, so run first): their last spans are flushed
	// The store opens once tracing is set up, so that its writes are traced when it is on (openStore).
	store, err := openSealedStore(ctx, cfg, logger, true)
	if err != nil {
		return err
	}
	defer store.Close()
	mx, systemRef := newMetrics(metricsNode)
	meters, err := actorMeters(cfg, mx)
	if err != nil {
		return err
	}
	sd, classifier, err := buildSearch(ctx, cfg.Search, logger)
	if err != nil {
		return err
	}
	backend.ReapProcessGroups(ctx, cfg.DataDir, logger)          // what stdio servers of a daemon that died left behind
	cfg.Actors.ListenAddrs = []string{cfg.Listen, cfg.MCPListen} // a backend there would be this daemon itself
	clusterDeps, err := cfg.Cluster.clusterDeps(logger)
	if err != nil {
		return err
	}
	system, err := actors.Start(ctx, actors.Deps{Store: store, Logger: logger, Config: cfg.Actors, Metrics: mx, MeterProvider: meters,
		Search: sd, Classifier: classifier, DataDir: cfg.DataDir, NodeID: nodeID, NodeAddress: cfg.nodeURL(), Cluster: clusterDeps,
		MembersChanged: limiter.SetShare})
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	systemRef.Store(system)
	// Sessions close last, within what is left of the shutdown timeout once the listeners drained (see below).
	var actorsDeadline time.Time
	defer func() { shutdownActors(system, actorsDeadline, cfg, logger) }()
	// Readiness waits for the servers that should reconnect at start, bounded like `aggregator stdio` does.
	var settled atomic.Bool
	go awaitSettled(ctx, system, cfg.Actors.ConnectionTimeout, &settled, logger)
	guard := cfg.hostGuard()
	var clusterProbe api.ClusterProbe
	var owner func(string) string
	if _, _, _, ok := system.ClusterStatus(); ok {
		owner = system.OwnerAddress
		clusterProbe = func() (string, int, bool) {
			node, members, joined, _ := system.ClusterStatus()
			return node, members, joined
		}
	}
	// Callers' OAuth flows for per_user servers of OAuth-protected backends (issue 28).
	flows := backendauth.NewFlows(backendauth.FlowsConfig{Store: store, Outbound: system.Outbound(), Env: os.LookupEnv,
		RedirectURL: backendauth.RedirectURL(cfg.ConsoleURL), EndSession: system.EndUserSession, Logger: logger})
	// One use-case layer under every front end (REST, /mcp and its views): calls, registrations and searches run
	// through it, where the access policy is checked (the stored CEL rules, gateway.Rules), and where a caller's
	// OAuth token is exchanged for their backend grant of a per_user server that allows it.
	cases := gateway.New(system, gateway.Options{Metrics: mx, Policy: &gateway.Rules{Source: system, Logger: logger},
		ExchangeCredential: flows.CallExchanger(store.GetServer)})
	// Durable tasks (REST and /mcp share them); Close, before the actors stop, fails the tasks still running.
	taskMgr := startTasks(ctx, cfg, store, nodeID, system, logger)
	defer taskMgr.Close()
	app := api.New(api.Deps{Store: store, Control: system, OAuth: flows, Curation: system, Gateway: cases, Tasks: taskMgr, Logger: logger, Metrics: mx, VectorHealth: system.VectorIndexHealth, Tokens: cfg.Tokens, Limiter: limiter,
		HostGuard: guard, Settled: settled.Load, Cluster: clusterProbe, Owner: owner, Config: api.Config{
			MetricsOpen:         cfg.MetricsOpen,
			ConsoleClientID:     cfg.OIDC.ConsoleClientID,
			ConsoleURL:          cfg.ConsoleURL,
			MaxBodyBytes:        cfg.MaxBodyBytes,
			HealthCheckInterval: cfg.Actors.HealthInterval,
			StartedAt:           started,
			AskTimeout:          cfg.Actors.AskTimeout,
		}})
	mcpOpts := mcpserver.Options{Logger: logger, Metrics: mx, Limiter: limiter,
		RequireIdentity: cfg.Tokens.Enabled(), SearchFirst: cfg.Search.SearchFirst, TokenBudget: cfg.Search.TokenBudget, ConsoleURL: cfg.ConsoleURL, AliasSeparator: cfg.Actors.AliasSeparator, AskTimeout: cfg.Actors.AskTimeout,
		SessionIdleTimeout: never(cfg.MCPSessionIdle), InputWait: cfg.MCPInputWait, MaxSessions: cfg.MCPMaxSessions, MaxSessionsPerClient: cfg.MCPMaxSessionsPerClient, HostGuarded: true,
		MaxCallsPerServer: cfg.Actors.MaxCallsPerServer, Gateway: cases, Tasks: taskMgr}
	endpoint := mcpserver.New(system, store, mcpOpts)
	defer endpoint.Close()
	views := mcpserver.NewViews(endpoint, system, store, mcpOpts)
	defer views.Close()

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
	mux.Handle("/mcp", mx.WrapHTTP("mcp", "/mcp", views.StreamableHandler()))
	mux.Handle("/sse", mx.WrapHTTP("mcp", "/sse", views.SSEHandler()))
	mux.Handle(mcpserver.ProfilesPrefix, mx.WrapHTTP("mcp", mcpserver.ProfilesPrefix+"{name}", views.ProfileHandler()))
	mux.Handle(mcpserver.SSEProfilesPrefix, mx.WrapHTTP("mcp", mcpserver.SSEProfilesPrefix+"{name}", views.ProfileSSEHandler()))
	proxy := mcpproxy.New(system, mcpproxy.Options{Logger: logger, Limiter: limiter, MaxSessionsPerServer: cfg.ProxyMaxSessions, IdleTimeout: never(cfg.ProxyIdle), HostGuarded: true, ConsoleURL: cfg.ConsoleURL, Gateway: cases})
	defer proxy.Close()
	mux.Handle(mcpproxy.Prefix, mx.WrapHTTP("mcp", mcpproxy.Prefix+"{name}", proxy))
	probes := mx.WrapHTTP("mcp", "probe", api.ProbeHandler(store, settled.Load, clusterProbe, 0, logger))
	mux.Handle(api.LivePath, probes)
	mux.Handle(api.ReadyPath, probes)
	// Outside in: request id and access log, the count of requests in flight (a shutdown waits for them), host/origin guard (403 before anything), bearer tokens, the loop guard
	// (508 for a request that already passed through this daemon), routes.
	active := &activeRequests{}
	mcpHandler := api.AccessLog(logger, "mcp", mcpRoute, active.wrap(guard.Wrap(auth.Middleware(cfg.Tokens, auth.Policy{MetricsOpen: cfg.MetricsOpen}, endpoint.LoopGuard(mux)))))
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
	// A cluster node hands its servers over to the other nodes while its own listeners drain (the load balancer
	// sends new requests elsewhere; calls to its servers from other nodes wait for the successor).
	// Tasks that follow a backend's task are left for another node (or the restart) to resume, before the drain
	// cancels their calls.
	taskMgr.HandOver()
	handedOver := make(chan struct{})
	go func() {
		defer close(handedOver)
		hctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout*6/10)
		defer cancel()
		system.HandOver(hctx)
	}()
	actorsDeadline = drainListeners(system, app, mcpHTTP, active, cfg.ShutdownTimeout, logger)
	<-handedOver
	logger.Info("stopping", "uptime", time.Since(started).Round(time.Second).String())
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// stdio serves one MCP client on stdin/stdout (logs go to stderr) until the client leaves or a signal arrives. When
// a live process on the same store has an MCP endpoint (`serve`), it relays the session to that process and starts
// nothing itself (relay.go); else it runs the store, the actors and the MCP endpoint in this process. No HTTP
// listener is opened.
func stdio(ctx context.Context, cfg config, logger *slog.Logger, profile string) error {
	if relayed, err := relayIfServed(ctx, cfg, logger, &mcp.StdioTransport{MaxLineLength: cfg.Actors.MaxMessageBytes}, profile); relayed || err != nil {
		return err
	}
	nodeID, nodeLock, err := nodeIdentity(cfg.DataDir)
	if err != nil {
		return err
	}
	defer closeQuietly(nodeLock)
	logger, stopTracing, err := startTracing(ctx, logger, nodeID)
	if err != nil {
		return err
	}
	defer stopTracing()
	store, err := openSealedStore(ctx, cfg, logger, false) // once tracing is set up (openStore)
	if err != nil {
		return err
	}
	defer store.Close()
	sd, classifier, err := buildSearch(ctx, cfg.Search, logger)
	if err != nil {
		return err
	}
	backend.ReapProcessGroups(ctx, cfg.DataDir, logger)
	system, err := actors.Start(ctx, actors.Deps{Store: store, Logger: logger, Config: cfg.Actors, Search: sd, Classifier: classifier,
		DataDir: cfg.DataDir, NodeID: nodeID})
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	var actorsDeadline time.Time
	defer func() { shutdownActors(system, actorsDeadline, cfg, logger) }()
	var scope routing.Scope
	if profile != "" {
		scope = routing.Scope{profile}
		if _, ok := system.Routes().Profile(profile); !ok {
			logger.Warn("the profile does not exist (yet): no tool is listed until an admin creates it", "profile", profile)
		}
	}
	// Tasks run in this process while it serves its client (http/mcpserver/tasks_stdio.go); those still running when
	// it stops are failed, or left to be resumed when they follow a backend's task, as by serve.
	taskMgr := startTasks(ctx, cfg, store, nodeID, system, logger)
	defer taskMgr.Close()
	endpoint := mcpserver.New(system, store, mcpserver.Options{Logger: logger, SearchFirst: cfg.Search.SearchFirst, TokenBudget: cfg.Search.TokenBudget, AliasSeparator: cfg.Actors.AliasSeparator, AskTimeout: cfg.Actors.AskTimeout, Scope: scope,
		Gateway: gateway.New(system, gateway.Options{Policy: &gateway.Rules{Source: system, Logger: logger}}), Tasks: taskMgr})
	defer endpoint.Close()
	// A desktop client lists tools once, right after it starts us: let the servers reconnect first (bounded).
	wctx, cancel := context.WithTimeout(ctx, cfg.Actors.ConnectionTimeout)
	if err := system.AwaitStartup(wctx); err != nil {
		logger.Warn("serving before every server reconnected", "error", err)
	}
	cancel()
	logger.Info("serving MCP on stdio")
	// A signal does not end the session at once: tool calls in flight may finish (half the shutdown timeout; new
	// ones and those still running then answer isError "shutting down"), then the session ends.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
			return
		}
		start := time.Now()
		logger.Info("shutting down: draining tool calls in flight")
		dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout/2)
		if n := system.DrainCalls(dctx, cfg.ShutdownTimeout/10); n > 0 {
			logger.Warn("shutdown: tool calls cancelled after the drain time", "calls", n)
		}
		cancel()
		time.Sleep(100 * time.Millisecond) // the answers reach stdout
		actorsDeadline = start.Add(cfg.ShutdownTimeout - cfg.ShutdownTimeout/10)
		if floor := time.Now().Add(cfg.ShutdownTimeout / 4); actorsDeadline.Before(floor) {
			actorsDeadline = floor
		}
		stopRun()
	}()
	err = endpoint.RunStdio(runCtx)
	stopRun()
	<-drained
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
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
	case strings.HasPrefix(path, mcpserver.ProfilesPrefix):
		return mcpserver.ProfilesPrefix + "{name}"
	case strings.HasPrefix(path, mcpserver.SSEProfilesPrefix):
		return mcpserver.SSEProfilesPrefix + "{name}"
	case oauth.IsMetadataPath(path):
		return oauth.WellKnownPath
	}
	return "unmatched"
}

// drainListeners is the first part of a shutdown, bounded by timeout (MCP_AGGREGATOR_SHUTDOWN_TIMEOUT): the
// listeners stop taking connections at once while requests in flight go on; tool calls in flight may finish for
// half the timeout (new ones answer 503 / isError "shutting down"); calls still running then are cancelled and
// answered SERVER_UNAVAILABLE "shutting down"; once their answers are written the MCP listener closes its
// long-lived streams. It returns the deadline for closing sessions and child processes (the rest of the timeout,
// at least a quarter of it).
func drainListeners(system *actors.System, app interface{ ShutdownWithTimeout(time.Duration) error }, mcpHTTP *http.Server,
	active *activeRequests, timeout time.Duration, logger *slog.Logger) time.Time {
	start := time.Now()
	drain, grace := timeout/2, timeout/10
	restDone := make(chan error, 1)
	go func() { restDone <- app.ShutdownWithTimeout(drain + 2*grace) }()
	mctx, mcancel := context.WithTimeout(context.Background(), drain+2*grace)
	defer mcancel()
	mcpDone := make(chan error, 1)
	go func() { mcpDone <- mcpHTTP.Shutdown(mctx) }()

	dctx, dcancel := context.WithTimeout(context.Background(), drain)
	if n := system.DrainCalls(dctx, grace); n > 0 {
		logger.Warn("shutdown: tool calls cancelled after the drain time", "calls", n, "drain", drain.String())
	}
	dcancel()
	// The answers are being written: wait for MCP requests (not the standalone GET streams, which never end by
	// themselves) to finish, including calls through the per-server proxy, which DrainCalls does not see; a legacy
	// SSE answer goes out on its GET stream, hence the short settle.
	active.waitIdle(time.Until(start.Add(drain)) + grace)
	time.Sleep(100 * time.Millisecond)
	_ = mcpHTTP.Close()
	if err := <-mcpDone; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, context.Canceled) {
		logger.Warn("MCP listener shutdown", "error", err)
	}
	select {
	case err := <-restDone:
		if err != nil {
			logger.Warn("REST shutdown", "error", err)
		}
	case <-time.After(grace):
		logger.Warn("REST shutdown: requests still open after the drain")
	}
	deadline := start.Add(timeout - timeout/10) // the last tenth: closing the store and exiting
	if floor := time.Now().Add(timeout / 4); deadline.Before(floor) {
		deadline = floor
	}
	return deadline
}

// activeRequests counts the MCP listener's requests in flight other than GETs (a streamable or SSE GET is a
// stream that lasts as long as its session), so that a shutdown closes the streams only after the answers went out.
type activeRequests struct{ n atomic.Int64 }

func (a *activeRequests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			a.n.Add(1)
			defer a.n.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}

// waitIdle waits until no counted request is in flight, at most max.
func (a *activeRequests) waitIdle(max time.Duration) {
	deadline := time.Now().Add(max)
	for a.n.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// shutdownActors stops every server actor (closing sessions and child processes) by deadline (zero: the whole
// shutdown timeout from now).
func shutdownActors(system *actors.System, deadline time.Time, cfg config, logger *slog.Logger) {
	if deadline.IsZero() {
		deadline = time.Now().Add(cfg.ShutdownTimeout)
	}
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := system.Shutdown(sctx); err != nil {
		logger.Warn("actor shutdown", "error", err)
	}
	logger.Info("stopped")
}

// nodeURL is the base URL of this node's MCP listener as other processes reach it, recorded with the node's
// heartbeat: `aggregator stdio` on the same store serves through it, and other cluster nodes forward per-server
// sessions to it. The host is the cluster's advertised host when there is one; otherwise the listen host, with an
// unspecified one (0.0.0.0, ::, empty) reached on loopback.
func (c config) nodeURL() string {
	host, port, err := net.SplitHostPort(c.MCPListen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if c.Cluster.Mode != "" && c.Cluster.Advertise != "" {
		host = c.Cluster.Advertise
	}
	return "http://" + net.JoinHostPort(host, port)
}

// closeQuietly closes f if there is one (a claim on a node id slot ends with the process anyway).
func closeQuietly(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

// newMetrics builds the daemon's registry; its scrape-time gauges read the actor system once it is stored in the
// returned pointer (before that they report nothing).
func newMetrics(node string) (*metrics.Metrics, *atomic.Pointer[actors.System]) {
	ref := &atomic.Pointer[actors.System]{}
	mx := metrics.NewForNode(func() metrics.Snapshot {
		if sys := ref.Load(); sys != nil {
			return sys.Snapshot()
		}
		return metrics.Snapshot{}
	}, node)
	return mx, ref
}

// actorMeters is the meter provider protoactor's own instruments are exported through into the daemon's registry,
// or nil when MCP_AGGREGATOR_ACTOR_METRICS is off (the default). protoactor records a histogram for every message an
// actor handles and counts every future, with labels it formats with fmt.Sprintf each time: on the call path (one
// ask of a server actor per call) that was 7-17 % of the daemon's CPU per tool call and 26 of its
// allocations (BENCHMARKS.md, "protoactor's instruments off the call path"). What operators read of the actors
// without it: the console's actor view (mailbox depth, restarts), mcp_aggregator_server_mailbox_depth and
// mcp_aggregator_actor_restarts_total.
func actorMeters(cfg config, mx *metrics.Metrics) (metric.MeterProvider, error) {
	if !cfg.ActorMetrics {
		return nil, nil
	}
	meters, err := mx.ActorMeterProvider()
	if err != nil {
		return nil, err
	}
	// protoactor takes its meter from OpenTelemetry's global provider; this is the one place that sets it.
	otel.SetMeterProvider(meters)
	return meters, nil
}

// profileArg takes `--profile NAME` (or `--profile=NAME`) out of the arguments: only `stdio` has it.
func profileArg(args []string) (string, []string, error) {
	var out []string
	profile := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--profile":
			if i+1 >= len(args) {
				return "", nil, fmt.Errorf("--profile needs a profile name")
			}
			profile = args[i+1]
			i++
		case strings.HasPrefix(a, "--profile="):
			profile = strings.TrimPrefix(a, "--profile=")
		default:
			out = append(out, a)
			continue
		}
		if !curation.ClientSafe(profile) {
			return "", nil, fmt.Errorf("--profile %q: a profile name is 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'", profile)
		}
	}
	if profile != "" && (len(out) != 1 || out[0] != "stdio") {
		return "", nil, fmt.Errorf("--profile is an option of the stdio command")
	}
	return profile, out, nil
}
