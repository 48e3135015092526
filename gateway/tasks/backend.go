package tasks

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// backendTaskKey carries the TTL of a call that runs as a task, down the call path to the server actor
// (pb.CallTool.task_ttl_ms), so that a backend that supports tasks gets a task-augmented call.
type backendTaskKey struct{}

// WithBackendTask marks the calls made with ctx as the call of a task whose TTL is ttl: a tool its backend runs as
// a task (the backend declared tasks for tools/call, the tool's execution.taskSupport is optional or required) is
// called with a task and the backend's task followed to the end; another is called normally.
func WithBackendTask(ctx context.Context, ttl time.Duration) context.Context {
	return context.WithValue(ctx, backendTaskKey{}, ttl)
}

// BackendTaskTTL is the TTL WithBackendTask put in ctx; 0 when ctx's calls are not a task's.
func BackendTaskTTL(ctx context.Context) time.Duration {
	ttl, _ := ctx.Value(backendTaskKey{}).(time.Duration)
	return ttl
}

// taskIDKey carries the id of the task a call runs for (pb.CallTool.task_id): the server actor records on it the
// backend's own task, when the backend answers with one.
type taskIDKey struct{}

func withTaskID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, taskIDKey{}, id)
}

// TaskID is the id of the task ctx's calls run for; empty when they are not a task's.
func TaskID(ctx context.Context) string {
	id, _ := ctx.Value(taskIDKey{}).(string)
	return id
}

// resumeKey carries the backend's task a resumed task follows (pb.CallTool.resume_backend_task).
type resumeKey struct{}

// WithResumeBackendTask marks the calls made with ctx as the resumption of a task whose node stopped: instead of
// calling the tool, the server actor follows the backend's task backendTaskID to its end.
func WithResumeBackendTask(ctx context.Context, backendTaskID string) context.Context {
	return context.WithValue(ctx, resumeKey{}, backendTaskID)
}

// ResumeBackendTask is the backend task WithResumeBackendTask put in ctx; empty when ctx's calls resume none.
func ResumeBackendTask(ctx context.Context) string {
	id, _ := ctx.Value(resumeKey{}).(string)
	return id
}

// inputKey carries the input watcher of a task's call (Manager.launch puts it in the call's context).
type inputKey struct{}

// InputWatcher is told when the backend of a task's call asks the task's client for input (an elicitation or
// sampling request relayed to it) and returns the context to relay the request with (it names the request's input
// key, InputKey) and the function to call once the client answered: meanwhile the task is input_required, with the
// pending request stored on it under its key (PendingInput).
type InputWatcher func(ctx context.Context, method string, params json.RawMessage) (relayCtx context.Context, answered func())

func withInputWatcher(ctx context.Context, w InputWatcher) context.Context {
	return context.WithValue(ctx, inputKey{}, w)
}

// InputWatch is the input watcher of the task whose call ctx carries; nil when ctx's calls are not a task's.
func InputWatch(ctx context.Context) InputWatcher {
	w, _ := ctx.Value(inputKey{}).(InputWatcher)
	return w
}

// inputReqKey carries the input key of a request relayed for a task (InputWatcher's context).
type inputReqKey struct{}

// InputKey is the key of the task's input request being relayed with ctx: the key a 2026-07-28 client sees it
// under in the task's inputRequests and answers it with in tasks/update. Empty when ctx relays none.
func InputKey(ctx context.Context) string {
	k, _ := ctx.Value(inputReqKey{}).(string)
	return k
}

// PendingInput is the input request an input_required task waits on, as stored (persistence.Task's
// InputRequest): its key, method and params. ok is false when the task stores none (or not in this shape).
func PendingInput(t persistence.Task) (key, method string, params json.RawMessage, ok bool) {
	if len(t.InputRequest) == 0 {
		return "", "", nil, false
	}
	var doc struct {
		Key    string          `json:"key"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(t.InputRequest, &doc) != nil || doc.Key == "" || doc.Method == "" {
		return "", "", nil, false
	}
	return doc.Key, doc.Method, doc.Params, true
}
