package api

import (
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/telemetry"
)

// traceRequest is the first middleware: a server span for each request, named "{method} {route}", continuing the
// caller's trace from its traceparent and tracestate headers, with the method, route and status; a 5xx answer
// marks it failed (error.type: the status). With tracing off it does nothing; probes and metrics scrapes are not
// traced (each would be a trace of its own, every few seconds).
func (s *server) traceRequest(c *fiber.Ctx) error {
	if !telemetry.On() || auth.IsProbe(c.Path()) {
		return c.Next()
	}
	ctx := otel.GetTextMapPropagator().Extract(c.UserContext(), fiberCarrier{c})
	ctx, span := telemetry.Tracer().Start(ctx, c.Method(), trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	c.SetUserContext(ctx)
	err := c.Next()
	if span.IsRecording() {
		route := routePattern(c)
		status := c.Response().StatusCode()
		span.SetName(c.Method() + " " + route)
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(c.Method()), semconv.HTTPRouteKey.String(route),
			semconv.HTTPResponseStatusCodeKey.Int(status))
		if status >= fiber.StatusInternalServerError {
			telemetry.Fail(span, nil, strconv.Itoa(status))
		}
	}
	return err
}

// fiberCarrier reads a request's headers for the propagator (it writes none).
type fiberCarrier struct{ c *fiber.Ctx }

func (f fiberCarrier) Get(key string) string { return f.c.Get(key) }
func (f fiberCarrier) Set(string, string)    {}
func (f fiberCarrier) Keys() []string {
	var keys []string
	f.c.Request().Header.VisitAll(func(k, _ []byte) { keys = append(keys, string(k)) })
	return keys
}

// traceHTTP starts the server span of a request on a net/http listener (the MCP listener, AccessLog): named
// "{method} {route}", continuing the caller's trace from its traceparent and tracestate headers, with the method
// and route. The request passed on carries the span in its context and, in place of the caller's, the span's
// traceparent and tracestate in its headers (a copy): so the MCP request's own span (telemetry.ServerMiddleware,
// which reads the headers when the request's _meta carries no context) and a request forwarded to another node
// continue below it. end sets the status (a 5xx fails the span: error.type is the status) and ends it.
func traceHTTP(r *http.Request, route string) (_ *http.Request, end func(status int)) {
	prop := otel.GetTextMapPropagator()
	ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := telemetry.Tracer().Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRouteKey.String(route)))
	r = r.WithContext(ctx)
	r.Header = r.Header.Clone()
	r.Header.Del(telemetry.TraceparentKey)
	r.Header.Del(telemetry.TracestateKey)
	prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	return r, func(status int) {
		if span.IsRecording() {
			span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(status))
			if status >= http.StatusInternalServerError {
				telemetry.Fail(span, nil, strconv.Itoa(status))
			}
		}
		span.End()
	}
}
