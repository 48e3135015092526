package postgres

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkTasksHeld stores 5,000 completed tasks, each with a 300-byte CallToolResult, and reports how many the
// tasks table (with its indexes and TOAST) holds per MB, and the time of one task's insert plus its final update.
func BenchmarkTasksHeld(b *testing.B) {
	const n = 5000
	result := json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 240) + `"}],"isError":false}`)
	for b.Loop() {
		b.StopTimer()
		s := openFresh(b)
		b.StartTimer()
		for range n {
			t := persistence.Task{Owner: "token:bench", Tool: "srv__tool", Server: "srv", Node: "node-1", TTL: time.Hour}
			if err := s.CreateTask(b.Context(), &t, 100); err != nil {
				b.Fatal(err)
			}
			if _, err := s.UpdateTask(b.Context(), t.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: result}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if _, err := s.pool.Exec(b.Context(), `VACUUM mcp.tasks`); err != nil {
			b.Fatal(err)
		}
		var size int64
		if err := s.pool.QueryRow(b.Context(), `SELECT pg_total_relation_size('mcp.tasks')`).Scan(&size); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(n/(float64(size)/(1<<20)), "tasks/MB")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "µs/task")
		s.Close()
		b.StartTimer()
	}
}
