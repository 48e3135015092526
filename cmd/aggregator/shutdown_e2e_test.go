package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// TestSIGTERMDrainsCallsInFlight: SIGTERM arrives while a tool call runs on REST and another on /mcp. A call that
// ends within the drain time (half of MCP_AGGREGATOR_SHUTDOWN_TIMEOUT) gets its result; one that does not gets a
// 503 / isError saying the aggregator is shutting down. Nobody hangs, and the daemon exits within its timeout.
func TestSIGTERMDrainsCallsInFlight(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	cases := []struct {
		name           string
		duration       int // seconds the tool runs
		timeout        int // MCP_AGGREGATOR_SHUTDOWN_TIMEOUT
		wantCompletion bool
	}{
		{"finishes within the drain", 3, 10, true},
		{"outlasts the drain", 12, 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sigtermDuringCalls(t, c.duration, c.timeout, c.wantCompletion)
		})
	}
}

func sigtermDuringCalls(t *testing.T, duration, timeout int, wantCompletion bool) {
	d := newDaemon(t, "")
	// GORACE: the race runtime otherwise sleeps a second at exit, which is not the daemon's time.
	d.env = append(d.env, fmt.Sprintf("MCP_AGGREGATOR_SHUTDOWN_TIMEOUT=%d", timeout), "GORACE=atexit_sleep_ms=0")
	d.start()
	cmd, args := peertest.EverythingStdio(t)
	code, s := d.do("POST", "/servers", map[string]any{
		"name": "slowpoke", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args},
	})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	d.waitStatus(s["id"].(string), "CONNECTED", 30*time.Second)
	restURL := strings.TrimSuffix(d.base, "/aggregator") + "/tools/call"
	const tool = "trigger-long-running-operation"
	callBody, _ := json.Marshal(map[string]any{"name": tool, "arguments": map[string]any{"duration": duration, "steps": 3}})

	// The tool is routable once discovery ran.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post(restURL, "application/json", bytes.NewReader([]byte(`{"name":"slowpoke.echo","arguments":{"message":"hi"}}`)))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo never routable")
		}
		time.Sleep(100 * time.Millisecond)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "shutdown-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect /mcp: %v", err)
	}
	defer sess.Close()
	mcpName := ""
	for tl, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(tl.Name, tool) {
			mcpName = tl.Name
		}
	}
	if mcpName == "" {
		t.Fatalf("%s not listed on /mcp", tool)
	}

	type outcome struct {
		what string
		text string
		ok   bool // the result, or a proper shutdown error
		took time.Duration
	}
	results := make(chan outcome, 2)
	start := time.Now()
	go func() {
		resp, err := http.Post(restURL, "application/json", bytes.NewReader(callBody))
		if err != nil {
			results <- outcome{"REST", err.Error(), false, time.Since(start)}
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := fmt.Sprintf("%d %s", resp.StatusCode, raw)
		ok := wantCompletion && resp.StatusCode == 200 && strings.Contains(string(raw), "completed") ||
			!wantCompletion && resp.StatusCode == 503 && strings.Contains(string(raw), "shutting down")
		results <- outcome{"REST", text, ok, time.Since(start)}
	}()
	go func() {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: mcpName, Arguments: map[string]any{"duration": duration, "steps": 3}})
		if err != nil {
			results <- outcome{"MCP", err.Error(), false, time.Since(start)}
			return
		}
		raw, _ := json.Marshal(res)
		ok := wantCompletion && !res.IsError && strings.Contains(string(raw), "completed") ||
			!wantCompletion && res.IsError && strings.Contains(string(raw), "shutting down")
		results <- outcome{"MCP", string(raw), ok, time.Since(start)}
	}()
	time.Sleep(time.Second) // both calls are at the backend
	took := d.signal(syscall.SIGTERM, time.Duration(timeout)*time.Second+500*time.Millisecond)
	t.Logf("SIGTERM: exited in %v", took)
	for i := 0; i < 2; i++ {
		select {
		case o := <-results:
			t.Logf("%s after %v: %.300s", o.what, o.took, o.text)
			if !o.ok {
				t.Errorf("%s call in flight at SIGTERM got %s", o.what, o.text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a caller is still waiting 10 s after the daemon exited; logs:\n%s", d.logs)
		}
	}
	if t.Failed() {
		t.Logf("daemon logs:\n%s", d.logs)
	}
}

// TestStdioAfterUncleanStop: after a SIGKILLed daemon (its server's row still says CONNECTED), `aggregator stdio`
// answers its client's first tools/list with the backend's tools, not only the meta-tools; a SIGTERM while a 3 s
// call runs lets the call finish, and the process exits within its shutdown timeout.
func TestStdioAfterUncleanStop(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_SHUTDOWN_TIMEOUT=8", "GORACE=atexit_sleep_ms=0")
	d.start()
	cmd, args := peertest.EverythingStdio(t)
	code, s := d.do("POST", "/servers", map[string]any{
		"name": "everything", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args},
	})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	d.waitStatus(s["id"].(string), "CONNECTED", 30*time.Second)
	d.signal(syscall.SIGKILL, 5*time.Second)

	proc := exec.Command(binary, "stdio")
	proc.Env = d.env
	logs := &syncBuf{}
	proc.Stderr = logs
	client := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: proc, TerminateDuration: time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to aggregator stdio: %v; logs:\n%s", err, logs)
	}
	defer sess.Close()
	var names []string
	longOp := ""
	for tl, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
		if strings.HasSuffix(tl.Name, "trigger-long-running-operation") {
			longOp = tl.Name
		}
	}
	if longOp == "" {
		t.Fatalf("the first tools/list after an unclean stop lacks the backend's tools: %v; logs:\n%s", names, logs)
	}

	done := make(chan string, 1)
	go func() {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: longOp, Arguments: map[string]any{"duration": 3, "steps": 3}})
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		raw, _ := json.Marshal(res)
		done <- string(raw)
	}()
	time.Sleep(time.Second)
	exited := make(chan struct{})
	go func() { _, _ = proc.Process.Wait(); close(exited) }()
	start := time.Now()
	_ = proc.Process.Signal(syscall.SIGTERM)
	select {
	case got := <-done:
		if !strings.Contains(got, "completed") || strings.Contains(got, `"isError":true`) {
			t.Fatalf("call in flight at SIGTERM: %s; logs:\n%s", got, logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the stdio client got no answer; logs:\n%s", logs)
	}
	select {
	case <-exited:
		t.Logf("aggregator stdio exited %v after SIGTERM", time.Since(start))
	case <-time.After(8*time.Second + 500*time.Millisecond):
		t.Fatalf("aggregator stdio did not exit within its shutdown timeout; logs:\n%s", logs)
	}
}
