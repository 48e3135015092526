package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/gateway/tasks"
)

// taskBackend is an HTTP MCP server living in the test process (it outlives the daemon's restarts): echo answers
// at once, slow only when its call is cancelled.
func taskBackend(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "task-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(r.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// mcpSession speaks JSON-RPC to the daemon's /mcp by hand (the go-sdk client has no task methods).
type mcpSession struct {
	t     *testing.T
	url   string
	sid   string
	token string // sent as a bearer token when set
	next  int
}

func (s *mcpSession) post(method string, params any) (json.RawMessage, map[string]any) {
	s.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	notify := strings.HasPrefix(method, "notifications/")
	if !notify {
		s.next++
		msg["id"] = s.next
	}
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	if s.sid == "" {
		s.sid = resp.Header.Get("Mcp-Session-Id")
	}
	raw, _ := io.ReadAll(resp.Body)
	if notify {
		return nil, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(line, `"id"`) {
				raw = []byte(line)
			}
		}
	}
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  map[string]any  `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		s.t.Fatalf("%s: %d %q", method, resp.StatusCode, raw)
	}
	return out.Result, out.Error
}

func openMCP(t *testing.T, url string) *mcpSession {
	s := &mcpSession{t: t, url: url}
	res, rerr := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
	if rerr != nil || !strings.Contains(string(res), `"tasks"`) {
		t.Fatalf("initialize: %s %v (no tasks capability?)", res, rerr)
	}
	s.post("notifications/initialized", map[string]any{})
	return s
}

func (s *mcpSession) taskGet(id string) tasks.Wire {
	s.t.Helper()
	res, rerr := s.post("tasks/get", map[string]any{"taskId": id})
	var w tasks.Wire
	if rerr != nil || json.Unmarshal(res, &w) != nil {
		s.t.Fatalf("tasks/get %s: %s %v", id, res, rerr)
	}
	return w
}

// TestTasksSurviveRestart: tasks started through a daemon (REST and /mcp) are read after the daemon restarted,
// on both stores: a finished task keeps its status and result; a task still running when the daemon was killed
// (SIGKILL) or stopped (SIGTERM) is failed with the reason, over REST, tasks/get and tasks/result.
func TestTasksSurviveRestart(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	backend := taskBackend(t)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the stores' runs are independent: each its own daemon and database
			d := newDaemon(t, dbURL(t))
			d.start()
			code, s := d.do("POST", "/servers", map[string]any{"name": "back", "transport_type": "HTTP",
				"connection_config": map[string]any{"base_url": backend}})
			if code != 201 {
				t.Fatalf("register: %d %v", code, s)
			}
			d.waitStatus(s["id"].(string), "CONNECTED", 30*time.Second)
			api := strings.TrimSuffix(d.base, "/aggregator")

			// A finished task (REST), a task running through REST and one through /mcp.
			rest := func(method, path string, body any) (int, map[string]any) {
				t.Helper()
				var rd io.Reader
				if body != nil {
					b, _ := json.Marshal(body)
					rd = bytes.NewReader(b)
				}
				req, _ := http.NewRequest(method, api+path, rd)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				var out map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&out)
				return resp.StatusCode, out
			}
			code, finished := rest("POST", "/tools/call", map[string]any{"name": "back.echo", "arguments": map[string]any{"n": 7}, "task": map[string]any{}})
			if code != 202 {
				t.Fatalf("task call: %d %v", code, finished)
			}
			finishedID := finished["task_id"].(string)
			if code, got := rest("GET", "/tasks/"+finishedID+"?wait=30", nil); code != 200 || got["status"] != "completed" {
				t.Fatalf("echo task: %d %v", code, got)
			}
			code, running := rest("POST", "/tools/call", map[string]any{"name": "back.slow", "task": map[string]any{}})
			if code != 202 {
				t.Fatalf("slow task: %d %v", code, running)
			}
			runningID := running["task_id"].(string)
			sess := openMCP(t, d.mcp+"/mcp")
			res, rerr := sess.post("tools/call", map[string]any{"name": "back__slow", "arguments": map[string]any{}, "task": map[string]any{"ttl": 600000}})
			var created struct {
				Task tasks.Wire `json:"task"`
			}
			if rerr != nil || json.Unmarshal(res, &created) != nil || created.Task.Status != "working" {
				t.Fatalf("task over /mcp: %s %v", res, rerr)
			}
			mcpID := created.Task.TaskID

			d.signal(syscall.SIGKILL, 5*time.Second) // a crash: nothing marks the running tasks
			d.start()

			code, got := rest("GET", "/tasks/"+finishedID, nil)
			if code != 200 || got["status"] != "completed" || !strings.Contains(jsonString(got["result"]), `echo {\"n\":7}`) {
				t.Errorf("finished task after the restart: %d %v", code, got)
			}
			for _, id := range []string{runningID, mcpID} {
				code, got := rest("GET", "/tasks/"+id, nil)
				if code != 200 || got["status"] != "failed" || got["status_message"] != tasks.MsgStopped {
					t.Errorf("task %s running at the crash, after the restart: %d %v", id, code, got)
				}
			}
			sess = openMCP(t, d.mcp+"/mcp") // a new session of the same caller
			if w := sess.taskGet(finishedID); w.Status != "completed" {
				t.Errorf("tasks/get of the finished task: %+v", w)
			}
			if w := sess.taskGet(mcpID); w.Status != "failed" || w.StatusMessage != tasks.MsgStopped {
				t.Errorf("tasks/get of the crashed task: %+v", w)
			}
			if res, rerr := sess.post("tasks/result", map[string]any{"taskId": finishedID}); rerr != nil || !strings.Contains(string(res), `echo {\"n\":7}`) {
				t.Errorf("tasks/result of the finished task: %s %v", res, rerr)
			}
			if _, rerr := sess.post("tasks/result", map[string]any{"taskId": mcpID}); rerr == nil || rerr["message"] != tasks.MsgStopped {
				t.Errorf("tasks/result of the crashed task: %v, want the reason", rerr)
			}

			// A clean stop fails the task still running, too.
			code, running = rest("POST", "/tools/call", map[string]any{"name": "back.slow", "task": map[string]any{}})
			if code != 202 {
				t.Fatalf("slow task: %d %v", code, running)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
			d.start()
			if code, got := rest("GET", "/tasks/"+running["task_id"].(string), nil); code != 200 || got["status"] != "failed" {
				t.Errorf("task running at SIGTERM, after the restart: %d %v", code, got)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}
