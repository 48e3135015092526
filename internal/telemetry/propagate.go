package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The trace-context keys of W3C Trace Context, in HTTP headers and, by the same names, in an MCP request's _meta.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

// MapCarrier carries a trace context in a map of strings, as the actors' call message does (its trace_context).
// It writes into *m, making the map on the first key: nothing is allocated when there is no context to carry.
type MapCarrier struct{ M *map[string]string }

// Get returns the value of key.
func (c MapCarrier) Get(key string) string { return (*c.M)[key] }

// Set sets key, making the map when needed.
func (c MapCarrier) Set(key, value string) {
	if *c.M == nil {
		*c.M = make(map[string]string, 2)
	}
	(*c.M)[key] = value
}

// Keys lists the keys.
func (c MapCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.M))
	for k := range *c.M {
		keys = append(keys, k)
	}
	return keys
}

// MetaCarrier carries a trace context in an MCP request's _meta (string values only; anything else is absent).
type MetaCarrier map[string]any

// Get returns the string value of key ("" when absent or not a string).
func (c MetaCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

// Set sets key.
func (c MetaCarrier) Set(key, value string) { c[key] = value }

// Keys lists the keys.
func (c MetaCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject is ctx's trace context as a map (traceparent, tracestate) for a message that crosses to another actor
// or node; nil when ctx has none or tracing is off.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	var m map[string]string
	otel.GetTextMapPropagator().Inject(ctx, MapCarrier{M: &m})
	return m
}

// Extract continues the trace context carried in m (Inject's map): ctx itself when m is empty.
func Extract(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(m))
}

// fromMeta continues the trace context of an MCP request's _meta, when it carries a traceparent.
func fromMeta(ctx context.Context, meta map[string]any) context.Context {
	if _, ok := meta[TraceparentKey].(string); !ok {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, MetaCarrier(meta))
}

// Fail marks span failed: err recorded as an exception event, the status Error with err's message, and
// error.type set to errType (when not empty). A non-recording span is left alone.
func Fail(span trace.Span, err error, errType string) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetStatus(codes.Error, errType)
	}
	if errType != "" {
		span.SetAttributes(errorType.String(errType))
	}
}

// Waited records a span, child of ctx's, of a wait that began at since and ends now: the time a call spent in
// the server actor's mailbox (from the caller's send, across nodes including the hop), named name, with the
// server's name and id. Nothing when ctx carries no sampled span.
func Waited(ctx context.Context, name string, since time.Time, server, serverID string) {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return
	}
	_, span := Tracer().Start(ctx, name, trace.WithTimestamp(since), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(ServerNameKey.String(server), ServerIDKey.String(serverID)))
	span.End()
}
