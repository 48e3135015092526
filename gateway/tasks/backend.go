package tasks

import (
	"context"
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
