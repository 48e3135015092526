package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
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
		err = storeUnavailable(c, err)
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

// logRequest writes the access line: method, route pattern (never the raw path), status, duration, request id,
// client (token name, or anonymous) and IP, and response bytes. Bodies and headers are never logged. Probes and
// metrics scrapes log at debug.
func (s *server) logRequest(c *fiber.Ctx, rid string, d time.Duration) {
	status := c.Response().StatusCode()
	route := routePattern(c)
	s.metrics.HTTP(c.UserContext(), "rest", route, c.Method(), status, d)
	id := identityOf(c)
	client := id.Name
	if client == "" {
		client = anonymousActor
	}
	s.log.LogAttrs(c.UserContext(), accessLevel(c.Path(), status), "http request",
		slog.String("listener", "rest"),
		slog.String("method", c.Method()),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("request_id", rid),
		slog.String("client", client),
		slog.String("client_ip", c.IP()),
		slog.Int("bytes", len(c.Response().Body())))
}

// accessLevel is the level of a request's log line: debug for probes and scrapes, warn for a backend's trouble or
// load (502, 503, 504: reported, not our failure), error for other 5xx, info otherwise.
func accessLevel(path string, status int) slog.Level {
	switch {
	case auth.IsProbe(path):
		return slog.LevelDebug
	case status == fiber.StatusBadGateway || status == fiber.StatusServiceUnavailable || status == fiber.StatusGatewayTimeout:
		return slog.LevelWarn
	case status >= fiber.StatusInternalServerError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// routePattern is the matched route ("/api/v1/aggregator/servers/:id", "/metrics"), or "unmatched". Middleware
// routes are registered on "/", which no route uses.
func routePattern(c *fiber.Ctx) string {
	r := c.Route()
	if r == nil || r.Path == "/" || r.Path == "" {
		return "unmatched"
	}
	return r.Path
}

// storeUnavailable makes every error caused by an unreachable store (persistence.ErrUnavailable, however a handler
// wrapped it) the shared 503 STORE_UNAVAILABLE answer with Retry-After, instead of a 500. Nothing is queued.
func storeUnavailable(_ *fiber.Ctx, err error) error {
	var ae *apierror.Error
	if errors.As(err, &ae) || !errors.Is(err, persistence.ErrUnavailable) {
		return err
	}
	return apierror.FromError(err, apierror.Subject{})
}

// guardHost is the middleware after request ids: a DNS-rebinding Host or a foreign browser Origin is answered 403
// (HOST_NOT_ALLOWED, ORIGIN_NOT_ALLOWED) before authentication and before any handler.
func (s *server) guardHost(c *fiber.Ctx) error {
	if status, code, detail := s.guard.Check(string(c.Request().Host()), c.Get(fiber.HeaderOrigin), c.Protocol()); status != 0 {
		return &apierror.Error{Status: status, Code: code, Detail: detail}
	}
	return c.Next()
}

// AccessLog wraps a net/http listener (the MCP listener) with the REST listener's request id and access line:
// the same fields (listener, method, route, status, duration_ms, request_id, client, client_ip, bytes), probes
// and scrapes at debug. route maps a path to its pattern (bounded, never the raw path). With tracing on, each
// request but a probe or scrape is a server span too (traceHTTP), whose trace_id and span_id the line carries.
func AccessLog(log *slog.Logger, listener string, route func(path string) string, next http.Handler) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := requestid.Sanitize(r.Header.Get(requestid.Header))
		if rid == "" {
			rid = uuid.NewString()
		}
		w.Header().Set(requestid.Header, rid)
		seen := &auth.Seen{}
		ctx := auth.WithSeen(requestid.With(r.Context(), rid), seen)
		r = r.WithContext(ctx)
		var endSpan func(status int)
		if telemetry.On() && !auth.IsProbe(r.URL.Path) {
			// The access line carries the span's trace_id and span_id (the logger's telemetry.LogHandler).
			// Probes and scrapes are not traced, as on the REST listener.
			r, endSpan = traceHTTP(r, route(r.URL.Path))
			ctx = r.Context()
		}
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(cw, r)
		if endSpan != nil {
			endSpan(cw.status)
		}
		client := auth.AnonymousName
		if id, ok := seen.Identity(); ok && id.Name != "" {
			client = id.Name
		}
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		log.LogAttrs(ctx, accessLevel(r.URL.Path, cw.status), "http request",
			slog.String("listener", listener),
			slog.String("method", r.Method),
			slog.String("route", route(r.URL.Path)),
			slog.Int("status", cw.status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("request_id", rid),
			slog.String("client", client),
			slog.String("client_ip", ip),
			slog.Int64("bytes", cw.bytes))
	})
}

// countingWriter remembers the status and counts the body bytes; it keeps http.Flusher (SSE streams) and
// Unwrap (http.ResponseController) working.
type countingWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush passes streaming flushes on.
func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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

// actorOf names who made the request, for the audit log: the token's name, the OAuth subject (with its email),
// or anonymous while auth is off (auth.Identity.Actor).
func actorOf(c *fiber.Ctx) string { return identityOf(c).Actor() }
