package actors_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// openFDs counts the process's open sockets: the connections to backends are what a deleted server must release
// (the store's pool opens database files lazily under load, which says nothing about sessions).
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// TestDeletedHTTPServerReleasesConnections: register, call and delete an SSE or streamable HTTP server many times;
// within a couple of seconds the daemon is back near its goroutine and file-descriptor baseline (connections used to
// stay pooled until the 90 s idle timeout). Disconnect and reconnect cycles release them the same way.
func TestDeletedHTTPServerReleasesConnections(t *testing.T) {
	for _, tc := range []struct{ transport, mode, key string }{
		{persistence.TransportSSE, "sse", "url"},
		{persistence.TransportHTTP, "streamableHttp", "base_url"},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			p := peertest.StartEverything(t, tc.mode)
			r := newRig(t, testConfig())
			cfg := map[string]any{tc.key: p.URL(), "allow_insecure_http": true}
			cycle := func(i int) {
				s := r.register("leak", tc.transport, cfg, nil, true)
				r.waitStatus(s.ID, persistence.StatusConnected, 20*time.Second)
				mustEcho(t, r, s.ID, "x")
				if i%2 == 1 { // half of the cycles disconnect first
					if _, err := r.sys.Disconnect(context.Background(), s.ID, true); err != nil {
						t.Fatalf("disconnect: %v", err)
					}
				}
				if err := r.sys.Remove(context.Background(), s.ID); err != nil {
					t.Fatalf("remove: %v", err)
				}
			}
			// Warm up: the store, the actor system's own goroutines, and the descriptors opened once and kept
			// (a single warm-up cycle left the baseline 2-4 descriptors short of the steady state).
			for i := 0; i < 3; i++ {
				cycle(i)
			}
			time.Sleep(time.Second)
			baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
			const n = 20
			for i := 0; i < n; i++ {
				cycle(i)
			}
			var g, fd int
			for deadline := time.Now().Add(5 * time.Second); ; {
				g, fd = runtime.NumGoroutine(), openFDs(t)
				if g <= baseG+5 && fd <= baseFD+3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d cycles: %d goroutines (baseline %d), %d sockets (baseline %d)", n, g, baseG, fd, baseFD)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("after %d cycles: %d goroutines (baseline %d), %d sockets (baseline %d)", n, g, baseG, fd, baseFD)
			if os.Getenv("H2DUMP") != "" {
				buf := make([]byte, 1<<20)
				t.Logf("%s", buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
