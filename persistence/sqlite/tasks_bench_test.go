package sqlite

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// BenchmarkTasksHeld stores 5,000 completed tasks, each with a 300-byte CallToolResult, and reports how many the
// file holds per MB (after a WAL checkpoint), and the time of one task's insert plus its final update.
func BenchmarkTasksHeld(b *testing.B) {
	const n = 5000
	result := json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 240) + `"}],"isError":false}`)
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "tasks.db")
		s := openAt(b, path)
		before := fileSize(b, path)
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
		if _, err := s.w.ExecContext(b.Context(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			b.Fatal(err)
		}
		grown := float64(fileSize(b, path)-before) / (1 << 20)
		b.ReportMetric(n/grown, "tasks/MB")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "µs/task")
		s.Close()
		b.StartTimer()
	}
}

func fileSize(b *testing.B, path string) int64 {
	var total int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return total
}
