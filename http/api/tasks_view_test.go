package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestTaskViewInputRequest: REST shows the request an input_required task waits on, and null for any other task.
func TestTaskViewInputRequest(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		task persistence.Task
		want string
	}{
		{"waiting", persistence.Task{ID: "a", Status: persistence.TaskInputRequired, Tool: "x", CreatedAt: now, UpdatedAt: now, ExpiresAt: now,
			InputRequest: json.RawMessage(`{"method":"elicitation/create","params":{"message":"Which?"}}`)},
			`{"method":"elicitation/create","params":{"message":"Which?"}}`},
		{"working", persistence.Task{ID: "b", Status: persistence.TaskWorking, Tool: "x", CreatedAt: now, UpdatedAt: now, ExpiresAt: now}, `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(newTaskView(tc.task))
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if got := string(doc["input_request"]); got != tc.want {
				t.Errorf("input_request = %s, want %s", got, tc.want)
			}
		})
	}
}
