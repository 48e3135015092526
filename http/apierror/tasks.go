package apierror

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

// Codes of durable tasks.
const (
	CodeTaskNotFound     = errcode.TaskNotFound
	CodeTaskLimitReached = errcode.TaskLimitReached
	CodeTaskFinished     = errcode.TaskFinished
)

// TaskError maps a failure of the task manager to its answer: 404 TASK_NOT_FOUND, 429 TASK_LIMIT_REACHED (with
// Retry-After), 409 TASK_FINISHED, 503 STORE_UNAVAILABLE, else 500; nil for nil.
func TaskError(err error, id string, maxOpen int) *Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, persistence.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeTaskNotFound, Detail: fmt.Sprintf("Task '%s' not found", id)}
	case errors.Is(err, persistence.ErrTaskLimit):
		return &Error{Status: http.StatusTooManyRequests, Code: CodeTaskLimitReached, RetryAfter: 1,
			Detail:  "Too many open tasks: wait for one to finish or cancel one",
			Context: map[string]any{"max_open_tasks": maxOpen}}
	case errors.Is(err, persistence.ErrTaskFinished):
		return &Error{Status: http.StatusConflict, Code: CodeTaskFinished, Detail: fmt.Sprintf("Task '%s' has already finished", id)}
	case errors.Is(err, persistence.ErrUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable, RetryAfter: 1,
			Detail: "The store is unavailable"}
	}
	return Internal()
}
