package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Task statuses (MCP 2025-11-25 tasks). Working and input_required are open; the rest are final: a final task
// never changes status again.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// TaskOpen reports whether status is one a task can still leave (working, input_required).
func TaskOpen(status string) bool { return status == TaskWorking || status == TaskInputRequired }

// ValidTaskStatus reports whether status is one of the Task* statuses.
func ValidTaskStatus(status string) bool {
	switch status {
	case TaskWorking, TaskInputRequired, TaskCompleted, TaskFailed, TaskCancelled:
		return true
	}
	return false
}

// Bounds of a stored task (the columns' limits, in both dialects).
const (
	// MaxTaskPayloadBytes bounds a task's result and error documents (each); a larger one is refused with
	// ErrTaskTooLarge and nothing is written.
	MaxTaskPayloadBytes = 4 << 20
	// MaxTaskOwnerBytes bounds the owner subject, MaxTaskNameBytes the tool and server names, the node id and the
	// status message.
	MaxTaskOwnerBytes = 512
	MaxTaskNameBytes  = 512
	// MaxTaskStatusMessageBytes bounds the status message.
	MaxTaskStatusMessageBytes = 4096
)

var (
	// ErrTaskFinished means UpdateTask addressed a task that is already final (its stored row is returned beside
	// it, unchanged).
	ErrTaskFinished = errors.New("task already finished")
	// ErrTaskLimit means CreateTask found the owner at its limit of open tasks; nothing was written.
	ErrTaskLimit = errors.New("open task limit reached")
	// ErrTaskTooLarge means a task's result or error is larger than MaxTaskPayloadBytes.
	ErrTaskTooLarge = errors.New("task payload too large")
)

// Task is one durable task: a long-running request (a tools/call) answered at once with the task, run in the
// background, its outcome kept for TTL after its creation. Only its Owner may read or cancel it.
type Task struct {
	// ID is unguessable (128 random bits, hex); the store makes it when empty.
	ID string
	// Owner is the subject that created the task (an identity's stable subject, never a token).
	Owner string
	// Status is one of the Task* statuses; StatusMessage says why it is what it is (a failure's reason).
	Status        string
	StatusMessage string
	// Tool is the tool name the caller asked for; Server the server it resolved to, when known.
	Tool   string
	Server string
	// Node is the daemon instance running the task while it is open (FailOrphanedTasks).
	Node string
	// TTL is how long after CreatedAt the task is kept; PollInterval the interval suggested to pollers.
	TTL          time.Duration
	PollInterval time.Duration
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// ExpiresAt is CreatedAt + TTL, after which DeleteExpiredTasks removes the task.
	ExpiresAt time.Time
	// Result is the request's result as JSON (a CallToolResult) once completed; Error a failure as JSON (a
	// JSON-RPC error object or the shared error body) when failed.
	Result json.RawMessage
	Error  json.RawMessage
	// BackendTaskID is the backend's own task the call follows (a backend that runs tools as tasks), and
	// BackendServer the id of the server it runs on; both empty while the task is held around a plain call. A task
	// whose node stopped is resumed elsewhere from them (ClaimOrphanedTasks).
	BackendTaskID string
	BackendServer string
	// InputRequest is the request the task waits on while input_required (a backend's elicitation or sampling
	// request relayed to the task's client: {"method", "params"}); nil otherwise. Any update that moves the task
	// to another status clears it.
	InputRequest json.RawMessage
}

// TaskUpdate changes an open task: its status (empty: unchanged), status message, result, error and input
// request (nil: unchanged; the input request is cleared when the status becomes other than input_required).
type TaskUpdate struct {
	Status        string
	StatusMessage *string
	Result        json.RawMessage
	Error         json.RawMessage
	InputRequest  json.RawMessage
}

// ListTasksFilter selects and pages tasks, newest first (by creation, then id).
type ListTasksFilter struct {
	// Owner selects one subject's tasks; empty: every owner's (an admin's listing).
	Owner  string
	Limit  int // <= 0: no limit
	Offset int
}

// TaskStore is the durable state of tasks (part of Store).
type TaskStore interface {
	// CreateTask inserts t with status working (t.Status empty) or t.Status; the store fills ID (when empty),
	// CreatedAt, UpdatedAt and ExpiresAt. With maxOpen > 0, an owner that already has maxOpen open tasks gets
	// ErrTaskLimit, decided atomically across every process that shares the store. TTL must be positive.
	CreateTask(ctx context.Context, t *Task, maxOpen int) error
	// GetTask returns one task; ErrNotFound when absent (or expired and swept).
	GetTask(ctx context.Context, id string) (Task, error)
	// ListTasks returns a page of tasks, newest first, and whether more follow.
	ListTasks(ctx context.Context, f ListTasksFilter) (tasks []Task, more bool, err error)
	// UpdateTask applies u to an open task and returns it as stored; a task already final is ErrTaskFinished
	// (returned with the stored task), an unknown one ErrNotFound. Moving to a final status is how a task ends, at
	// most once: of racing updates, one wins.
	UpdateTask(ctx context.Context, id string, u TaskUpdate) (Task, error)
	// FailOrphanedTasks marks failed, with message, every open task whose node is not in live (the daemons known
	// to be running), and returns how many. With spareFollowed, the tasks that follow a backend's task
	// (BackendTaskID set) are left for ClaimOrphanedTasks.
	FailOrphanedTasks(ctx context.Context, live []string, message string, spareFollowed bool) (int, error)
	// SetTaskBackend records on an open task the backend's task its call follows (backendTaskID, on server
	// serverID); a task already final or unknown is left as it is (no error).
	SetTaskBackend(ctx context.Context, id, backendTaskID, serverID string) error
	// ClaimOrphanedTasks moves to node every open task that follows a backend's task (BackendTaskID set) and whose
	// node is not in live, and returns them as stored: of nodes claiming at the same time, each task goes to one.
	ClaimOrphanedTasks(ctx context.Context, live []string, node string) ([]Task, error)
	// DeleteExpiredTasks removes up to limit tasks whose ExpiresAt is at or before now and returns how many.
	DeleteExpiredTasks(ctx context.Context, now time.Time, limit int) (int, error)
}
