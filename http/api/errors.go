package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
)

// subject names what a failed operation was about, for the messages of 404 and 409.
type subject struct {
	id   string
	name string
}

// mapError turns the sentinel errors of the store and the actor system into their answers (apierror.FromError,
// the mapping every front end shares). Anything else is returned unchanged and becomes a logged, generic 500.
func mapError(err error, s subject) error {
	if e := apierror.FromError(err, apierror.Subject{ID: s.id, Name: s.name}); e != nil {
		return e
	}
	return err
}

// handleError is the app's ErrorHandler: it renders handler errors, Fiber's own errors (unknown route, wrong
// method, body too large, ...) and recovered panics in the one error shape. Unexpected errors are logged with the
// request id and answered with a generic 500 that leaks nothing.
func (s *server) handleError(c *fiber.Ctx, err error) error {
	// Errors raised before the middleware ran (body too large, malformed request line) have no request id yet
	// and would go unlogged: give them both here.
	rid, early := s.ensureRequestID(c)

	var ae *apierror.Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		ae = fromFiberError(fe, s.cfg.MaxBodyBytes)
	default:
		s.log.LogAttrs(c.UserContext(), slog.LevelError, "request failed",
			slog.String("method", c.Method()), slog.String("route", routePattern(c)),
			slog.String("request_id", rid), slog.Any("error", err))
		ae = apierror.Internal()
	}
	if werr := writeError(c, ae); werr != nil {
		return werr
	}
	if early {
		s.logRequest(c, rid, 0)
	}
	return nil
}

// writeError renders an answer of the shared vocabulary on Fiber (apierror.Write is the net/http one).
func writeError(c *fiber.Ctx, e *apierror.Error) error {
	if ra := e.RetryAfterHeader(); ra != "" {
		c.Set(fiber.HeaderRetryAfter, ra)
	}
	return c.Status(e.Status).JSON(e.Body())
}

// fromFiberError maps Fiber's errors to codes. Their messages can echo the request, so the detail is the status
// text (or a fixed sentence), never Fiber's message.
func fromFiberError(fe *fiber.Error, maxBody int) *apierror.Error {
	switch fe.Code {
	case fiber.StatusNotFound:
		return &apierror.Error{Status: fe.Code, Code: apierror.CodeNotFound, Detail: "Not found"}
	case fiber.StatusMethodNotAllowed:
		return &apierror.Error{Status: fe.Code, Code: apierror.CodeMethodNotAllowed, Detail: "Method not allowed"}
	case fiber.StatusRequestEntityTooLarge:
		return &apierror.Error{Status: fe.Code, Code: apierror.CodeRequestTooLarge, Detail: "Request body is too large",
			Context: map[string]any{"max_bytes": maxBody}}
	case fiber.StatusUnsupportedMediaType:
		return &apierror.Error{Status: fe.Code, Code: apierror.CodeUnsupportedMediaType, Detail: "Content-Type should be application/json"}
	}
	if fe.Code >= 500 || http.StatusText(fe.Code) == "" {
		return apierror.Internal()
	}
	text := http.StatusText(fe.Code)
	return &apierror.Error{Status: fe.Code, Code: strings.ToUpper(strings.NewReplacer(" ", "_", "-", "_", "'", "").Replace(text)),
		Detail: text}
}
