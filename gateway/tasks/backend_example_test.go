package tasks_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
)

// A task's call carries its TTL down the call path: the server actor gives it to a backend that runs the tool as a
// task; a plain call carries none.
func ExampleWithBackendTask() {
	ctx := tasks.WithBackendTask(context.Background(), 10*time.Minute)
	fmt.Println(tasks.BackendTaskTTL(ctx))
	fmt.Println(tasks.BackendTaskTTL(context.Background()))
	// Output:
	// 10m0s
	// 0s
}
