package api

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/actors/requestid"
)

// localsKey types the keys this package stores in fiber.Ctx locals, so they cannot collide with others.
type localsKey int

const localRequestID localsKey = iota

// anonymousActor is the audit actor while auth is off.
const anonymousActor = "anonymous"

// requestContext is the outermost middleware. It gives the request an id (the caller's X-Request-ID when sane,
// else a new UUID), echoes it, stores it in the locals and in the user context (so Control calls and their logs
// carry it), renders any error of the chain itself so the status is final, and writes one log line per request.
func (s *server) requestContext(c *fiber.Ctx) error {
	start := time.Now()
	rid := requestid.Sanitize(c.Get(requestid.Header))
	if rid == "" {
		rid = uuid.NewString()
	}
	c.Locals(localRequestID, rid)
	c.Set(requestid.Header, rid)
	c.SetUserContext(requestid.With(c.UserContext(), rid))

	if err := c.Next(); err != nil {
		if herr := s.handleError(c, err); herr != nil {
			// Rendering the error failed (it cannot in practice): answer a bare 500 rather than nothing.
			s.log.LogAttrs(c.UserContext(), slog.LevelError, "writing error response failed",
				slog.String("request_id", rid), slog.Any("error", herr))
			c.Status(fiber.StatusInternalServerError)
		}
	}
	s.logRequest(c, rid, time.Since(start))
	return nil
}

// ensureRequestID returns the request's id, creating and echoing one when the middleware has not run (errors
// Fiber raises before routing); early reports that case.
func (s *server) ensureRequestID(c *fiber.Ctx) (rid string, early bool) {
	if rid, ok := c.Locals(localRequestID).(string); ok {
		return rid, false
	}
	rid = uuid.NewString()
	c.Locals(localRequestID, rid)
	c.Set(requestid.Header, rid)
	return rid, true
}

// logRequest writes the access line: method, route pattern (never the raw path), status, duration, request id.
// Bodies and headers are never logged.
func (s *server) logRequest(c *fiber.Ctx, rid string, d time.Duration) {
	status := c.Response().StatusCode()
	level := slog.LevelInfo
	switch {
	case status == fiber.StatusBadGateway || status == fiber.StatusServiceUnavailable || status == fiber.StatusGatewayTimeout:
		level = slog.LevelWarn // a backend's trouble, or load: reported, not our failure
	case status >= fiber.StatusInternalServerError:
		level = slog.LevelError
	}
	s.metrics.HTTP("rest", routePattern(c), c.Method(), status, d)
	s.log.LogAttrs(c.UserContext(), level, "http request",
		slog.String("method", c.Method()),
		slog.String("route", routePattern(c)),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("request_id", rid))
}

// routePattern is the matched route ("/api/v1/aggregator/servers/:id"), or "unmatched". Middleware routes are
// registered on "/", which no API route uses.
func routePattern(c *fiber.Ctx) string {
	r := c.Route()
	if r == nil || r.Path == "/" || r.Path == "" || !strings.HasPrefix(r.Path, "/api/") {
		return "unmatched"
	}
	return r.Path
}

// logPanic is the recover middleware's stack trace handler: the panic and stack go to the log with the request
// id; the client gets the generic 500.
func (s *server) logPanic(c *fiber.Ctx, v any) {
	rid, _ := c.Locals(localRequestID).(string)
	s.log.LogAttrs(c.UserContext(), slog.LevelError, "panic in handler",
		slog.String("route", routePattern(c)),
		slog.String("request_id", rid),
		slog.String("panic", fmt.Sprint(v)),
		slog.String("stack", string(debug.Stack())))
}

// actorOf names who made the request, for the audit log: the token's name, or anonymous while auth is off.
func actorOf(c *fiber.Ctx) string {
	if id := identityOf(c); id.Name != "" && !id.Anonymous {
		return id.Name
	}
	return anonymousActor
}
