package main

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
)

// BenchmarkDaemonMemory50StdioHeap runs BenchmarkDaemonMemory50Stdio's 50 stdio server-everything servers in this
// process (embedded store, default configuration) to see where the memory goes: once all are connected and the
// catalogue has settled it collects garbage, reports the live heap and, with STDIO_HEAP_PROFILE=file, writes a heap
// profile for `go tool pprof`.
func BenchmarkDaemonMemory50StdioHeap(b *testing.B) {
	cmdPath, args := peertest.EverythingStdio(b)
	for i := 0; i < b.N; i++ {
		st := openBenchStore(b, "sqlite")
		_, base := inProcess(b, st, actors.DefaultConfig())
		connectStdio50(b, base, cmdPath, args)
		time.Sleep(10 * time.Second) // discovery, indexing and classification settle
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-live-MiB")
		b.ReportMetric(float64(ms.StackInuse)/(1<<20), "stack-MiB")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		if path := os.Getenv("STDIO_HEAP_PROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
	}
}
