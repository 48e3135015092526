package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// startHostile runs a hostile backend from testdata/hostile on a free port and waits until it listens.
func startHostile(t *testing.T, name string, env ...string) string {
	t.Helper()
	bin := peertest.GoBinary(t, "./testdata/hostile/"+name)
	port := peertest.FreePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("PORT=%d", port)), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s", name, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthyBackend is an in-process go-sdk streamable HTTP server with an echo tool.
func healthyBackend(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "healthy", Version: "1"}, nil)
	type args struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + a.Message}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// load calls echo on a server until stop is called, and returns how many calls it made and how many failed.
func load(t *testing.T, r *rig, id string) (stop func() (calls, errs int64)) {
	var calls, errs atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				rep, err := r.echo(id, fmt.Sprint("m", i))
				calls.Add(1)
				if err != nil || rep.Error != nil {
					errs.Add(1)
					t.Logf("healthy call failed: %v %v", err, rep.GetError())
				}
			}
		}()
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return calls.Load(), errs.Load()
	}
}

// heapPeak samples HeapInuse until stop is called and returns the largest value seen.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

func wantTooLarge(t *testing.T, what string, e interface {
	GetCode() string
	GetMessage() string
}) {
	t.Helper()
	if e == nil || e.GetCode() != errcode.ResponseTooLarge || !strings.Contains(e.GetMessage(), msglimit.LimitVar) {
		t.Fatalf("%s: want %s naming %s, got %v", what, errcode.ResponseTooLarge, msglimit.LimitVar, e)
	}
}

const heapBound = 200 << 20

// limitConfig is testConfig with a keep-alive that tolerates a machine loaded by 100 MB streams under -race: the
// healthy server's session must not be dropped for a slow ping.
func limitConfig() actors.Config {
	cfg := testConfig()
	cfg.KeepAlive = 10 * time.Second
	return cfg
}

// TestOversizedResultsRefused: a streamable HTTP backend whose tool returns 100 MB (as an event stream and as a JSON
// body, with the id first or last), five calls at once: each fails with RESPONSE_TOO_LARGE naming the limit, the hostile session stays
// CONNECTED and serves the next call, a healthy server beside it sees no error, and the heap stays bounded.
func TestOversizedResultsRefused(t *testing.T) {
	for _, mode := range []string{"sse", "json", "json-tail"} {
		t.Run(mode, func(t *testing.T) {
			env := []string{}
			if strings.HasPrefix(mode, "json") {
				env = append(env, "JSON=1")
			}
			if strings.HasSuffix(mode, "tail") {
				env = append(env, "TAIL=1")
			}
			hostileURL := startHostile(t, "bigresult", env...)
			r := newRig(t, limitConfig())
			healthy := r.register("healthy", persistence.TransportHTTP, map[string]any{"base_url": healthyBackend(t), "allow_insecure_http": true}, nil, true)
			hostile := r.register("hostile", persistence.TransportHTTP, map[string]any{"base_url": hostileURL + "/mcp", "allow_insecure_http": true}, nil, true)
			r.waitStatus(healthy.ID, persistence.StatusConnected, 20*time.Second)
			r.waitStatus(hostile.ID, persistence.StatusConnected, 20*time.Second)
			runtime.GC()

			stopLoad := load(t, r, healthy.ID)
			stopHeap := heapPeak()
			var wg sync.WaitGroup
			for i := 0; i < 5; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rep, err := r.sys.CallTool(context.Background(), hostile.ID, "big", []byte(`{}`))
					if err != nil {
						t.Errorf("call big: %v", err)
						return
					}
					if rep.Error == nil {
						t.Errorf("call big: want RESPONSE_TOO_LARGE, got a result of %d bytes", len(rep.ResultJson))
						return
					}
					// Five at once may exceed the server's budget share first: that refusal names its own variable.
					if rep.Error.Code != errcode.ResponseTooLarge || !strings.Contains(rep.Error.Message, "MCP_AGGREGATOR_M") {
						t.Errorf("call big: got %v", rep.Error)
					}
				}()
			}
			wg.Wait()
			peak := stopHeap()
			calls, errs := stopLoad()
			t.Logf("heap peak %d MB; healthy calls %d, errors %d", peak>>20, calls, errs)
			if peak > heapBound {
				t.Errorf("heap peaked at %d MB refusing five 100 MB results, want < %d MB", peak>>20, heapBound>>20)
			}
			if errs != 0 || calls == 0 {
				t.Errorf("healthy server: %d calls, %d errors", calls, errs)
			}
			st, err := r.sys.Status(context.Background(), hostile.ID)
			if err != nil || st.Status != persistence.StatusConnected {
				t.Fatalf("hostile status %v %v, want CONNECTED", st.GetStatus(), err)
			}
			mustEcho(t, r, hostile.ID, "still-here")
		})
	}
}

// TestEndlessSSEEventRefused: a legacy SSE backend streams one event that never ends. The call fails with
// RESPONSE_TOO_LARGE naming the limit as soon as the event passes it, the heap stays bounded while the stream keeps
// flowing, a healthy server sees no error, and the hostile server is CONNECTED again afterwards (its stream is
// blocked by the endless event, so keep-alive ends that session and it reconnects).
func TestEndlessSSEEventRefused(t *testing.T) {
	hostileURL := startHostile(t, "sseflood")
	r := newRig(t, limitConfig())
	healthy := r.register("healthy", persistence.TransportHTTP, map[string]any{"base_url": healthyBackend(t), "allow_insecure_http": true}, nil, true)
	hostile := r.register("hostile", persistence.TransportSSE, map[string]any{"url": hostileURL + "/sse", "allow_insecure_http": true}, nil, true)
	r.waitStatus(healthy.ID, persistence.StatusConnected, 20*time.Second)
	r.waitStatus(hostile.ID, persistence.StatusConnected, 20*time.Second)
	mustEcho(t, r, hostile.ID, "before")
	runtime.GC()

	stopLoad := load(t, r, healthy.ID)
	stopHeap := heapPeak()
	start := time.Now()
	rep, err := r.sys.CallTool(context.Background(), hostile.ID, "flood", []byte(`{}`))
	if err != nil {
		t.Fatalf("call flood: %v", err)
	}
	wantTooLarge(t, "flood", rep.Error)
	t.Logf("flood refused after %v", time.Since(start))
	time.Sleep(2 * time.Second) // the stream keeps flowing meanwhile
	peak := stopHeap()
	calls, errs := stopLoad()
	t.Logf("heap peak %d MB; healthy calls %d, errors %d", peak>>20, calls, errs)
	if peak > heapBound {
		t.Errorf("heap peaked at %d MB under an endless event, want < %d MB", peak>>20, heapBound>>20)
	}
	if errs != 0 || calls == 0 {
		t.Errorf("healthy server: %d calls, %d errors", calls, errs)
	}
	// Keep-alive gives a session up after two pings in a row go unanswered (limitConfig: 10 s apart, 5 s each),
	// then the server reconnects.
	deadline := time.Now().Add(2*limitConfig().KeepAlive + 40*time.Second)
	for {
		rep, err := r.echo(hostile.ID, "after")
		if err == nil && rep.Error == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hostile server does not serve calls again: %v %v", err, rep.GetError())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHugeToolsListRefused: a stdio backend answers tools/list with 50 MB (id last, as the TypeScript SDK writes):
// the listing fails with RESPONSE_TOO_LARGE naming the limit, the session stays CONNECTED and serves calls, and a
// healthy server sees no error.
func TestHugeToolsListRefused(t *testing.T) {
	bin := peertest.GoBinary(t, "./testdata/hostile/biglist")
	r := newRig(t, limitConfig())
	healthy := r.register("healthy", persistence.TransportHTTP, map[string]any{"base_url": healthyBackend(t), "allow_insecure_http": true}, nil, true)
	hostile := r.register("hostile", persistence.TransportSTDIO, map[string]any{"command": bin}, nil, true)
	r.waitStatus(healthy.ID, persistence.StatusConnected, 20*time.Second)
	r.waitStatus(hostile.ID, persistence.StatusConnected, 20*time.Second)
	runtime.GC()

	stopLoad := load(t, r, healthy.ID)
	stopHeap := heapPeak()
	rep, err := actors.ListToolsOf(context.Background(), r.sys, hostile.ID)
	if err != nil {
		t.Fatalf("list tools: %v", err)
	}
	wantTooLarge(t, "tools/list", rep.Error)
	peak := stopHeap()
	calls, errs := stopLoad()
	t.Logf("heap peak %d MB; healthy calls %d, errors %d", peak>>20, calls, errs)
	if peak > heapBound {
		t.Errorf("heap peaked at %d MB, want < %d MB", peak>>20, heapBound>>20)
	}
	if errs != 0 || calls == 0 {
		t.Errorf("healthy server: %d calls, %d errors", calls, errs)
	}
	st, err := r.sys.Status(context.Background(), hostile.ID)
	if err != nil || st.Status != persistence.StatusConnected {
		t.Fatalf("hostile status %v %v, want CONNECTED", st.GetStatus(), err)
	}
	res, err := r.echo(hostile.ID, "alive")
	if err != nil || res.Error != nil {
		t.Fatalf("echo after the refused listing: %v %v", err, res.GetError())
	}
	var out struct{ Content []struct{ Text string } }
	_ = json.Unmarshal(res.ResultJson, &out)
	if len(out.Content) == 0 || out.Content[0].Text != "Echo: alive" {
		t.Fatalf("echo result %s", res.ResultJson)
	}
}
