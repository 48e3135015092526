package tasks

import (
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// RelatedTaskMetaKey is the _meta key that ties a message (a task's result) to its task.
const RelatedTaskMetaKey = "io.modelcontextprotocol/related-task"

// Wire is a task as MCP 2025-11-25 shows it (the Task object of tasks/get, tasks/list, tasks/cancel and of a
// task-augmented request's CreateTaskResult): times in ISO 8601, TTL and poll interval in milliseconds.
type Wire struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

// ToWire is t as MCP shows it.
func ToWire(t persistence.Task) Wire {
	return Wire{TaskID: t.ID, Status: t.Status, StatusMessage: t.StatusMessage,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), LastUpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		TTL: t.TTL.Milliseconds(), PollInterval: t.PollInterval.Milliseconds()}
}
