package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
)

// Error codes of the error body (system-contract.md's table plus the front end's own), exported so clients and
// tests compare against one spelling.
const (
	CodeServerNotFound       = "SERVER_NOT_FOUND"
	CodeServerAlreadyExists  = "SERVER_ALREADY_EXISTS"
	CodeServerLimitReached   = "SERVER_LIMIT_REACHED"
	CodeValidation           = "VALIDATION_ERROR"
	CodeServiceBusy          = "SERVICE_BUSY"
	CodeServiceUnavailable   = "SERVICE_UNAVAILABLE"
	CodeRequestTooLarge      = "REQUEST_TOO_LARGE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeInternal             = "INTERNAL_ERROR"
	CodeToolNotFound         = "TOOL_NOT_FOUND"
	CodeToolAmbiguous        = "TOOL_AMBIGUOUS"
	CodeServerUnavailable    = "SERVER_UNAVAILABLE"
	CodeExecutionFailed      = "EXECUTION_FAILED"
	CodeRequestTimeout       = "REQUEST_TIMEOUT"
)

// ErrorBody is the one shape of every error answer: Detail is a message, or for 422 the list of FieldError;
// Context carries extra machine-readable facts and is omitted when empty.
type ErrorBody struct {
	Detail    any            `json:"detail"`
	ErrorCode string         `json:"error_code"`
	Context   map[string]any `json:"context,omitempty"`
	// Server is set on SERVER_UNAVAILABLE: which server, and its state.
	Server *ServerRef `json:"server,omitempty"`
}

// ServerRef names a server and its state in an error or a search result.
type ServerRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// apiError is what handlers return to answer with a given status and error body; the ErrorHandler renders it.
type apiError struct {
	status  int
	code    string
	detail  any
	context map[string]any
	server  *ServerRef
}

func (e *apiError) Error() string {
	if s, ok := e.detail.(string); ok {
		return e.code + ": " + s
	}
	return e.code
}

func validationError(errs []FieldError) *apiError {
	return &apiError{status: fiber.StatusUnprocessableEntity, code: CodeValidation, detail: errs}
}

func serverNotFound(id string) *apiError {
	return &apiError{status: fiber.StatusNotFound, code: CodeServerNotFound, detail: "Server not found: " + id}
}

func internalError() *apiError {
	return &apiError{status: fiber.StatusInternalServerError, code: CodeInternal, detail: "Internal server error"}
}

// subject names what a failed operation was about, for the messages of 404 and 409.
type subject struct {
	id   string
	name string
}

// mapError turns the sentinel errors of the store and the actor system into their HTTP answers. Anything else is
// returned unchanged and becomes a logged, generic 500.
func mapError(err error, s subject) error {
	switch {
	case errors.Is(err, persistence.ErrUnavailable):
		return storeUnavailableError()
	case errors.Is(err, persistence.ErrNotFound):
		return serverNotFound(s.id)
	case errors.Is(err, persistence.ErrAlreadyExists):
		return &apiError{status: fiber.StatusConflict, code: CodeServerAlreadyExists,
			detail: "Server already exists: " + s.name}
	case errors.Is(err, actors.ErrMaxServers):
		return &apiError{status: fiber.StatusConflict, code: CodeServerLimitReached,
			detail: "Maximum number of servers reached; remove a server before registering another"}
	case errors.Is(err, actors.ErrShuttingDown):
		return &apiError{status: fiber.StatusServiceUnavailable, code: CodeServiceUnavailable,
			detail: "The service is shutting down"}
	case errors.Is(err, actors.ErrAskTimeout), errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: fiber.StatusServiceUnavailable, code: CodeServiceBusy,
			detail: "The operation timed out; it may be retried", context: map[string]any{"retryable": true}}
	case errors.Is(err, context.Canceled):
		return &apiError{status: fiber.StatusServiceUnavailable, code: CodeServiceUnavailable,
			detail: "The request was cancelled"}
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

	var ae *apiError
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		ae = fromFiberError(fe, s.cfg.MaxBodyBytes)
	default:
		s.log.LogAttrs(c.UserContext(), slog.LevelError, "request failed",
			slog.String("method", c.Method()), slog.String("route", routePattern(c)),
			slog.String("request_id", rid), slog.Any("error", err))
		ae = internalError()
	}
	if werr := writeError(c, ae); werr != nil {
		return werr
	}
	if early {
		s.logRequest(c, rid, 0)
	}
	return nil
}

func writeError(c *fiber.Ctx, ae *apiError) error {
	if ae.code == CodeServiceBusy {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	body := ErrorBody{Detail: ae.detail, ErrorCode: ae.code, Server: ae.server}
	if len(ae.context) > 0 {
		body.Context = ae.context
	}
	return c.Status(ae.status).JSON(body)
}

// fromFiberError maps Fiber's errors to codes. Their messages can echo the request, so the detail is the status
// text (or a fixed sentence), never Fiber's message.
func fromFiberError(fe *fiber.Error, maxBody int) *apiError {
	switch fe.Code {
	case fiber.StatusNotFound:
		return &apiError{status: fe.Code, code: CodeNotFound, detail: "Not found"}
	case fiber.StatusMethodNotAllowed:
		return &apiError{status: fe.Code, code: CodeMethodNotAllowed, detail: "Method not allowed"}
	case fiber.StatusRequestEntityTooLarge:
		return &apiError{status: fe.Code, code: CodeRequestTooLarge, detail: "Request body is too large",
			context: map[string]any{"max_bytes": maxBody}}
	case fiber.StatusUnsupportedMediaType:
		return &apiError{status: fe.Code, code: CodeUnsupportedMediaType, detail: "Content-Type should be application/json"}
	}
	if fe.Code >= 500 || http.StatusText(fe.Code) == "" {
		return internalError()
	}
	text := http.StatusText(fe.Code)
	return &apiError{status: fe.Code, code: strings.ToUpper(strings.NewReplacer(" ", "_", "-", "_", "'", "").Replace(text)),
		detail: text}
}
