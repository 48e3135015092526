// Package telemetry is the daemon's OpenTelemetry tracing: its setup from the standard OTEL_* variables, the W3C
// trace context carried in and out (HTTP headers, an MCP request's _meta, the actors' call message), the spans of
// MCP requests on both sides (the aggregator's own endpoint and its backend sessions), and the slog handler that
// puts trace_id and span_id on log lines.
//
// Tracing is off unless an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT), and OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off again. Off,
// nothing is set up: OpenTelemetry's global tracer provider and propagator stay the no-op ones, no span is started
// (On guards every place that would start one) and no trace context is read or written. On, Setup installs an SDK tracer provider that exports over
// OTLP/HTTP (the exporter reads the OTEL_EXPORTER_OTLP_* variables itself), samples by OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on) and describes the process by OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, and a W3C trace-context propagator (traceparent, tracestate; baggage is not carried:
// backends are untrusted).
//
// The spans are made through OpenTelemetry's global provider and propagator (set once, by Setup), as protoactor
// already reads its meter from the global meter provider: the layers that make spans need no wiring.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the daemon's spans.
const ScopeName = "github.com/mcpgw/aggregator"

// DefaultServiceName is service.name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES sets it.
const DefaultServiceName = "mcp-aggregator"

// Tracer is the daemon's tracer, from OpenTelemetry's global provider (a no-op one unless Setup turned tracing on).
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// On reports whether tracing is on: OpenTelemetry's global tracer provider is an SDK one (Setup's). The places that
// start spans ask first, so that with tracing off a request costs no allocation at all (the no-op tracer's spans
// still allocate a context).
func On() bool {
	_, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	return sdk
}

// Process describes the running daemon on its spans' resource.
type Process struct {
	// Version is service.version; InstanceID, when set, is service.instance.id (the cluster node's id).
	Version, InstanceID string
	// Logger receives the SDK's export errors (nil: discarded).
	Logger *slog.Logger
}

// Tracing is what Setup started; Shutdown flushes it.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// Shutdown exports the spans still buffered and stops the exporter, within ctx. Off, it does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// Config is what the OTEL_* variables say about turning tracing on.
type Config struct {
	// Enabled: an OTLP endpoint is configured, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none turns
	// tracing off.
	Enabled bool
	// Endpoint is the configured endpoint (the traces one when set), for the start-up log line.
	Endpoint string
}

// ReadConfig reads the OTEL_* variables that decide whether tracing is on. An exporter or protocol this daemon
// does not speak is an error (a typo must not silently leave tracing off).
func ReadConfig(env func(string) (string, bool)) (Config, error) {
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return Config{}, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return Config{}, nil
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp (or none) is supported", exp)
	}
	proto := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return Config{}, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is supported (port 4318)", proto)
	}
	endpoint := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	return Config{Enabled: endpoint != "", Endpoint: endpoint}, nil
}

// Setup turns tracing on when the OTEL_* variables (read through env) configure an endpoint, and installs the
// provider and propagator as OpenTelemetry's globals; otherwise it changes nothing and returns a Tracing that is
// off. The exporter, sampler and resource read the process environment themselves, as the OpenTelemetry SDK
// specifies: env must be os.LookupEnv or agree with it.
func Setup(ctx context.Context, env func(string) (string, bool), p Process) (*Tracing, error) {
	cfg, err := ReadConfig(env)
	if err != nil || !cfg.Enabled {
		return &Tracing{}, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp, err := NewProvider(ctx, exp, p)
	if err != nil {
		return nil, err
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("opentelemetry", "error", err) }))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	return &Tracing{provider: tp}, nil
}

// NewProvider is the SDK tracer provider Setup installs, exporting to exp in batches: its sampler follows
// OTEL_TRACES_SAMPLER (the SDK reads it) unless opts set one, its resource is the process's (Resource).
func NewProvider(ctx context.Context, exp sdktrace.SpanExporter, p Process, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
	res, err := Resource(ctx, p)
	if err != nil {
		return nil, err
	}
	all := append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}, opts...)
	return sdktrace.NewTracerProvider(all...), nil
}

// Resource describes the process: service.name mcp-aggregator, service.version and service.instance.id from p,
// then what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say (they win).
func Resource(ctx context.Context, p Process) (*resource.Resource, error) {
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceNameKey.String(DefaultServiceName))}
	if p.Version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersionKey.String(p.Version)))
	}
	if p.InstanceID != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceIDKey.String(p.InstanceID)))
	}
	attrs = append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())
	res, err := resource.New(ctx, attrs...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}

// Propagator is the W3C trace-context propagator (traceparent and tracestate).
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }
