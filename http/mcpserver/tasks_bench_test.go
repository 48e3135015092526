package mcpserver_test

import (
	"encoding/json"
	"testing"
)

// BenchmarkTaskCall compares a plain tools/call of an HTTP backend's tool through /mcp with the same call as a
// task (tools/call with params.task, then tasks/result, which waits for the end): two round trips instead of one,
// the task's insert and its final update in the SQLite store on disk, and the background goroutine.
func BenchmarkTaskCall(b *testing.B) {
	r := newTaskRig(b, 0)
	sess := openRaw(b, r.url, aliceToken)
	args := map[string]any{"x": 1}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if a := sess.post("tools/call", map[string]any{"name": "back__echo", "arguments": args}, false); a.Error != nil {
				b.Fatal(a.Error)
			}
		}
	})
	b.Run("task", func(b *testing.B) {
		for b.Loop() {
			task, a := sess.start("back__echo", args)
			if a.Error != nil {
				b.Fatal(a.Error)
			}
			res := sess.post("tasks/result", map[string]any{"taskId": task.TaskID}, false)
			var out struct {
				Content []any `json:"content"`
			}
			if res.Error != nil || json.Unmarshal(res.Result, &out) != nil || len(out.Content) != 1 {
				b.Fatalf("tasks/result: %s %+v", res.Result, res.Error)
			}
		}
	})
}
