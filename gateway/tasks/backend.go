package tasks

import (
	"context"
	"encoding/json"
	"time"
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
// sampling request relayed to it) and returns the function to call once the client answered: meanwhile the task
// is input_required, with the pending request stored on it.
type InputWatcher func(ctx context.Context, method string, params json.RawMessage) (answered func())

func withInputWatcher(ctx context.Context, w InputWatcher) context.Context {
	return context.WithValue(ctx, inputKey{}, w)
}

// InputWatch is the input watcher of the task whose call ctx carries; nil when ctx's calls are not a task's.
func InputWatch(ctx context.Context) InputWatcher {
	w, _ := ctx.Value(inputKey{}).(InputWatcher)
	return w
}
