package mcpserver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
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

// BenchmarkToolsListOverSSE is tools/list over the legacy SSE transport with tasks on, server-everything's tools
// (over stdio) and the meta-tools listed: a 2025-11-25 session, whose answer gets each backend tool's
// execution.taskSupport (taskTools re-encodes it), beside a 2025-06-18 one, whose answer is the go-sdk's as it is
// (as every SSE session's was before the SSE sessions got their handle). The client's own decoding is in both.
func BenchmarkToolsListOverSSE(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "tasks.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	mgr := tasks.New(tasks.Config{Store: st, Node: "node-1"})
	b.Cleanup(mgr.Close)
	r := newRig(b, mcpserver.Options{Tasks: mgr})
	cmd, args := peertest.EverythingStdio(b)
	r.register(b, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	waitFor(b, "every's tools routable", func() bool {
		_, ok := r.sys.Routes().Tool("every.simulate-research-query")
		return ok && len(r.sys.Routes().Callable()) > 0
	})
	for _, rev := range []string{"2025-06-18", "2025-11-25"} {
		c := openSSEAt(b, r.mux.URL+"/sse", "", rev, map[string]any{}, nil)
		b.Run(rev, func(b *testing.B) {
			b.ReportAllocs()
			size := 0
			for b.Loop() {
				a := c.post("tools/list", map[string]any{})
				if a.Error != nil {
					b.Fatal(a.Error)
				}
				size = len(a.Result)
			}
			b.ReportMetric(float64(size), "bytes/listing")
		})
	}
}
