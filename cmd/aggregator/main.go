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
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const usage = `usage: aggregator <command>

commands:
  serve     run the daemon (REST API, actors, health checks)
  migrate   apply database migrations and exit
  version   print the version
`

func main() {
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
	case "serve", "migrate":
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
// listener first, then every server actor (closing sessions and child processes), then the store.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	if !cfg.Enabled {
		logger.Warn("MCP_AGGREGATOR_ENABLED is false: the aggregator is disabled; not starting")
		return nil
	}
	started := time.Now()
	store, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer store.Close()

	system, err := actors.Start(ctx, actors.Deps{Store: store, Logger: logger, Config: cfg.Actors})
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	app := api.New(api.Deps{Store: store, Control: system, Logger: logger, Config: api.Config{
		MaxBodyBytes:        cfg.MaxBodyBytes,
		HealthCheckInterval: cfg.Actors.HealthInterval,
		StartedAt:           started,
		AskTimeout:          cfg.Actors.AskTimeout,
	}})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		shutdownActors(system, cfg, logger)
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	logger.Info("aggregator listening", "addr", ln.Addr().String(), "version", actors.Version)
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-served:
		logger.Error("HTTP server failed", "error", err)
	}
	if shErr := app.ShutdownWithTimeout(cfg.ShutdownTimeout / 4); shErr != nil {
		logger.Warn("HTTP shutdown", "error", shErr)
	}
	shutdownActors(system, cfg, logger)
	logger.Info("stopped", "uptime", time.Since(started).Round(time.Second).String())
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func shutdownActors(system *actors.System, cfg config, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := system.Shutdown(sctx); err != nil {
		logger.Warn("actor shutdown", "error", err)
	}
}
