package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/traced"
)

// traceFlushTimeout bounds the export of the spans still buffered at exit.
const traceFlushTimeout = 5 * time.Second

// startTracing turns tracing on when the OTEL_* variables configure an OTLP endpoint (internal/telemetry), and
// returns the logger to use from now on: with tracing on, its records carry trace_id and span_id. stop flushes the
// spans still buffered; it does nothing when tracing is off.
func startTracing(ctx context.Context, logger *slog.Logger, instance string) (*slog.Logger, func(), error) {
	tr, err := telemetry.Setup(ctx, os.LookupEnv, telemetry.Process{Version: actors.Version, InstanceID: instance, Logger: logger})
	if err != nil {
		return logger, func() {}, fmt.Errorf("tracing: %w", err)
	}
	if !tr.Enabled() {
		return logger, func() {}, nil
	}
	cfg, _ := telemetry.ReadConfig(os.LookupEnv)
	logger = slog.New(telemetry.LogHandler(logger.Handler()))
	logger.Info("tracing on: spans are exported over OTLP/HTTP", "endpoint", cfg.Endpoint)
	return logger, func() {
		sctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			logger.Warn("flushing traces failed", "error", err)
		}
	}, nil
}

// traceStore is s with every write traced (persistence/traced) when tracing is on, else s itself: off, the store
// costs nothing more. The encrypting store goes around it, so spans time the database's work and never see a
// plaintext secret.
func traceStore(s persistence.Store) persistence.Store {
	if !telemetry.On() {
		return s
	}
	return traced.Wrap(s)
}
