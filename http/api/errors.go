package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/http/apierror"
)

// Error codes of the error body: the shared vocabulary of package apierror, under the names REST has always used.
const (
	CodeServerNotFound       = apierror.CodeServerNotFound
	CodeServerAlreadyExists  = apierror.CodeServerAlreadyExists
	CodeServerLimitReached   = apierror.CodeServerLimitReached
	CodeValidation           = apierror.CodeValidation
	CodeServiceBusy          = apierror.CodeServiceBusy
	CodeServiceUnavailable   = apierror.CodeServiceUnavailable
	CodeStoreUnavailable     = apierror.CodeStoreUnavailable
	CodeRequestTooLarge      = apierror.CodeRequestTooLarge
	CodeUnsupportedMediaType = apierror.CodeUnsupportedMediaType
	CodeNotFound             = apierror.CodeNotFound
	CodeMethodNotAllowed     = apierror.CodeMethodNotAllowed
	CodeInternal             = apierror.CodeInternal
	CodeToolNotFound         = apierror.CodeToolNotFound
	CodeToolAmbiguous        = apierror.CodeToolAmbiguous
	CodeServerUnavailable    = apierror.CodeServerUnavailable
	CodeExecutionFailed      = apierror.CodeExecutionFailed
	CodeRequestTimeout       = apierror.CodeRequestTimeout
	CodeServerBusy           = apierror.CodeServerBusy
	CodeResponseTooLarge     = apierror.CodeResponseTooLarge
	CodeLoopDetected         = apierror.CodeLoopDetected
)

// ErrorBody is the one shape of every error answer (apierror.Body).
type ErrorBody = apierror.Body

// ServerRef names a server and its state in an error or a search result (apierror.ServerRef).
type ServerRef = apierror.ServerRef

// apiError is what handlers return to answer with a given status and error body; the ErrorHandler renders it.
type apiError struct {
	status  int
	code    string
	detail  any
	context map[string]any
	server  *ServerRef
	// retryAfter is the Retry-After header in seconds (0: none; SERVICE_BUSY always gets at least 1).
	retryAfter int
}

// fromShared renders an answer of the shared vocabulary.
func fromShared(e *apierror.Error) *apiError {
	return &apiError{status: e.Status, code: e.Code, detail: e.Detail, context: e.Context, server: e.Server, retryAfter: e.RetryAfter}
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

// mapError turns the sentinel errors of the store and the actor system into their HTTP answers (the shared
// mapping of package apierror). Anything else is returned unchanged and becomes a logged, generic 500.
func mapError(err error, s subject) error {
	if e := apierror.FromError(err, apierror.Subject{ID: s.id, Name: s.name}); e != nil {
		return fromShared(e)
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
	if ae.retryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ae.retryAfter))
	} else if ae.code == CodeServiceBusy {
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
