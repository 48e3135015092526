package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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
		for j := 0; j < 50; j++ {
			body, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("s%02d", j), "transport_type": "STDIO",
				"connection_config": map[string]any{"command": cmdPath, "args": args}})
			resp, err := http.Post(base+"/servers", "application/json", bytes.NewReader(body))
			if err != nil || resp.StatusCode != 201 {
				b.Fatalf("register %d: %v %v", j, err, resp)
			}
			resp.Body.Close()
		}
		deadline := time.Now().Add(3 * time.Minute)
		for {
			resp, err := http.Get(base + "/servers?status=CONNECTED")
			if err != nil {
				b.Fatal(err)
			}
			var list struct{ Total int }
			_ = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if list.Total == 50 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("only %d of 50 connected", list.Total)
			}
			time.Sleep(200 * time.Millisecond)
		}
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
