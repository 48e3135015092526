package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

const (
	tcAdmin = "tc-admin-token-000000000001"
	tcAlice = "tc-alice-token-000000000001"
	tcBob   = "tc-bob-token-00000000000001"
)

// v2Post sends one 2026-07-28 request (no session; the revision's headers and per-request _meta, declaring the
// tasks extension and elicitation) as token to a node's /mcp and reads its answer.
func v2Post(t *testing.T, url, token, method string, params map[string]any) (json.RawMessage, map[string]any) {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "e2e-v2", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{},
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Authorization", "Bearer "+token)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	} else if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"id"`) {
				raw = []byte(data)
			}
		}
	}
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  map[string]any  `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %d %q", method, resp.StatusCode, raw)
	}
	return out.Result, out.Error
}

// statusListener is the standalone stream (the GET) of a 2025-11-25 session: the notifications/tasks/status it
// hears.
type statusListener struct {
	mu    sync.Mutex
	heard []tasks.Wire
}

func listenStatus(t *testing.T, s *mcpSession) *statusListener {
	t.Helper()
	l := &statusListener{}
	s.listen(t, func(_ context.Context, data string) {
		var msg struct {
			Method string     `json:"method"`
			Params tasks.Wire `json:"params"`
		}
		if json.Unmarshal([]byte(data), &msg) == nil && msg.Method == "notifications/tasks/status" {
			l.mu.Lock()
			l.heard = append(l.heard, msg.Params)
			l.mu.Unlock()
		}
	})
	return l
}

// taskCluster starts two automanaged nodes on a new PostgreSQL database, with the test's admin token and client
// tokens for alice and bob (their logs shown when the test fails), and registers server-everything over stdio
// through the first as "every".
func taskCluster(t *testing.T) (a, b *clusterNode) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", health[0], health[1])
	nodes := newCluster(t, 2, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i]),
			"MCP_AGGREGATOR_ADMIN_TOKENS=ops:" + tcAdmin, "MCP_AGGREGATOR_CLIENT_TOKENS=alice:" + tcAlice + ",bob:" + tcBob}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s logs:\n%s", n.name, tail(nodeLog(n), 6000))
			}
		}
	})
	cmd, args := peertest.EverythingStdio(t)
	if code, s := nodes[0].doAs(tcAdmin, "POST", "/servers", map[string]any{"name": "every", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args}}); code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, s)
	}
	return nodes[0], nodes[1]
}

// statuses are the statuses heard of task id, in order.
func (l *statusListener) statuses(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.heard {
		if w.TaskID == id {
			out = append(out, w.Status)
		}
	}
	return out
}

// TestClusterTaskInputAndStatusAcrossNodesE2E: two nodes (automanaged, PostgreSQL), client tokens for alice and
// bob. Alice's 2026-07-28 client starts a task through node A (server-everything's simulate-research-query,
// ambiguous: its backend asks which python she means), so the task runs on A; she then sits on node B. Through B she
// sees the task input_required with the question, and her tasks/update (two answers racing, both through B) reaches
// the backend's request waiting on A once: the task completes with exactly one of them. Bob, through B, cannot read
// or answer her task (-32602, as an unknown task), and his tasks/update leaves it waiting. Alice's 2025-11-25 session
// on B hears the task's status changes (input_required, completed) on its stream; Bob's session on B hears none.
// A second task, cancelled through B while it waits on A, has its call on A stopped. Last, the ext-tasks client
// does all of this through B while its calls land on A.
func TestClusterTaskInputAndStatusAcrossNodesE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	a, b := taskCluster(t)
	urlA, urlB := a.mcp+"/mcp", b.mcp+"/mcp"
	const tool = "every__simulate-research-query"

	// The listeners on B: a 2025-11-25 session of each caller that served one of its task requests there (so it is
	// one of the caller's sessions on B) with its stream open.
	aliceB := openMCPAs(t, urlB, tcAlice)
	bobB := openMCPAs(t, urlB, tcBob)
	for _, s := range []*mcpSession{aliceB, bobB} {
		if res, rerr := s.post("tasks/list", map[string]any{}); rerr != nil {
			t.Fatalf("tasks/list: %s %v", res, rerr)
		}
	}
	aliceHears, bobHears := listenStatus(t, aliceB), listenStatus(t, bobB)

	// Alice's call through A, once A runs the tool as a task (its backend's taskSupport is known there).
	id := startAmbiguousTaskV2(t, urlA, tcAlice, a.name, tool)
	t.Logf("task %s started through %s (%s); the client now uses %s (%s)", id, a.name, a.id, b.name, b.id)

	get := func(url, token string) (map[string]any, map[string]any) {
		res, rerr := v2Post(t, url, token, "tasks/get", map[string]any{"taskId": id})
		var w map[string]any
		_ = json.Unmarshal(res, &w)
		return w, rerr
	}
	var key string
	waitFor(t, 60*time.Second, "the task input_required through "+b.name, func() bool {
		w, _ := get(urlB, tcAlice)
		if w["status"] != "input_required" {
			return false
		}
		for k, req := range w["inputRequests"].(map[string]any) {
			key = k
			if !strings.Contains(jsonString(req), "python") {
				t.Errorf("the pending request = %v, want the backend's question about python", req)
			}
		}
		return key != ""
	})

	// Bob: not his task.
	if w, rerr := get(urlB, tcBob); rerr == nil || rerr["code"] != float64(-32602) {
		t.Errorf("bob's tasks/get of alice's task = %v %v, want -32602", w, rerr)
	}
	if res, rerr := v2Post(t, urlB, tcBob, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"interpretation": "bob"}}}}); rerr == nil || rerr["code"] != float64(-32602) {
		t.Errorf("bob's tasks/update of alice's task = %s %v, want -32602", res, rerr)
	}
	time.Sleep(time.Second)
	if w, _ := get(urlB, tcAlice); w["status"] != "input_required" {
		t.Errorf("after bob's answer the task is %v, want still input_required", w["status"])
	}

	// Alice answers through B, twice at once: the request waiting on A takes one answer.
	var wg sync.WaitGroup
	for _, pick := range []string{"snake", "comedy"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, rerr := v2Post(t, urlB, tcAlice, "tasks/update", map[string]any{"taskId": id,
				"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"interpretation": pick}}}})
			if rerr != nil || !strings.Contains(string(res), `"complete"`) {
				t.Errorf("alice's tasks/update (%s) through %s = %s %v", pick, b.name, res, rerr)
			}
		}()
	}
	wg.Wait()
	var done map[string]any
	waitFor(t, 30*time.Second, "the task completed after alice's answer through "+b.name, func() bool {
		done, _ = get(urlB, tcAlice)
		return done["status"] == "completed"
	})
	text := jsonString(done["result"])
	if snake, comedy := strings.Contains(text, "python (snake)"), strings.Contains(text, "python (comedy)"); snake == comedy {
		t.Errorf("result = %s, want exactly one of the two answers in it", text)
	}

	// The status changes made on A reached alice's stream on B, and none reached bob's.
	waitFor(t, 10*time.Second, "alice's stream on "+b.name+" hearing the task complete", func() bool {
		heard := aliceHears.statuses(id)
		return len(heard) > 0 && heard[len(heard)-1] == "completed"
	})
	if heard := aliceHears.statuses(id); !slices.Contains(heard, "input_required") {
		t.Errorf("alice's stream on %s heard %v, want input_required before completed", b.name, heard)
	}
	time.Sleep(500 * time.Millisecond)
	if heard := bobHears.statuses(id); len(heard) > 0 {
		t.Errorf("bob's stream on %s heard alice's task: %v", b.name, heard)
	}

	// A task cancelled through B while it waits on A for alice's answer: A stops its call (the backend's request
	// stops waiting and the backend's task is cancelled), so no call of the tool stays in flight on either node.
	inFlight := func() int {
		return a.gauge(t, "mcp_aggregator_tool_calls_in_flight") + b.gauge(t, "mcp_aggregator_tool_calls_in_flight")
	}
	if n := inFlight(); n != 0 {
		t.Fatalf("%d calls in flight before the second task", n)
	}
	res, rerr := v2Post(t, urlA, tcAlice, "tools/call", map[string]any{"name": tool,
		"arguments": map[string]any{"topic": "python", "ambiguous": true}})
	var second struct{ ResultType, TaskID string }
	if rerr != nil || json.Unmarshal(res, &second) != nil || second.ResultType != "task" {
		t.Fatalf("second task through %s: %s %v", a.name, res, rerr)
	}
	id = second.TaskID
	waitFor(t, 60*time.Second, "the second task input_required through "+b.name, func() bool {
		w, _ := get(urlB, tcAlice)
		return w["status"] == "input_required"
	})
	if res, rerr := v2Post(t, urlB, tcAlice, "tasks/cancel", map[string]any{"taskId": id}); rerr != nil {
		t.Fatalf("tasks/cancel through %s: %s %v", b.name, res, rerr)
	}
	if w, _ := get(urlB, tcAlice); w["status"] != "cancelled" {
		t.Errorf("cancelled task = %v", w["status"])
	}
	waitFor(t, 15*time.Second, "no call in flight once the task was cancelled through "+b.name, func() bool {
		return inFlight() == 0
	})

	// The ext-tasks client as alice, on B, its calls landing on A: its tasks run on A, and it follows them to
	// their results, resumes one on a new connection, answers a backend's question and cancels one, through B.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ext := exec.CommandContext(ctx, peertest.Node(t), peertest.ExtTasksV2ClientScript(t), urlB,
		tool, `{"topic":"golang"}`, tool, `{"topic":"python","ambiguous":true}`,
		`{"action":"accept","content":{"interpretation":"snake"}}`)
	ext.Env = append(os.Environ(), "EXT_TASKS_TOKEN="+tcAlice, "EXT_TASKS_CALL_URL="+urlA)
	out, err := ext.Output()
	var got struct {
		Kind, TaskID, Status, Text string
		ResumedStatus, ResumedText string
		SeenStatus                 string
		InputStatus, InputText     string
		CancelledStatus, Error     string
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("ext-tasks client: %v %v\n%s", err, jerr, out)
	}
	if got.Kind != "task" || got.Status != "completed" || !strings.Contains(got.Text, "golang") {
		t.Errorf("ext-tasks client's task = %+v", got)
	}
	if got.ResumedStatus != "completed" || got.SeenStatus != "input_required" || got.InputStatus != "completed" ||
		!strings.Contains(got.InputText, "python (snake)") || got.CancelledStatus != "cancelled" {
		t.Errorf("ext-tasks client through %s = %+v", b.name, got)
	}
}

// openMCPAs is openMCP as the caller of token.
func openMCPAs(t *testing.T, url, token string) *mcpSession {
	s := &mcpSession{t: t, url: url, token: token}
	res, rerr := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
	if rerr != nil || !strings.Contains(string(res), `"tasks"`) {
		t.Fatalf("initialize: %s %v (no tasks capability?)", res, rerr)
	}
	s.post("notifications/initialized", map[string]any{})
	return s
}
