package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// openMCPWith is openMCPAs declaring caps (the client's capabilities).
func openMCPWith(t *testing.T, url, token string, caps map[string]any) *mcpSession {
	s := &mcpSession{t: t, url: url, token: token}
	res, rerr := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps,
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
	if rerr != nil || !strings.Contains(string(res), `"tasks"`) {
		t.Fatalf("initialize: %s %v (no tasks capability?)", res, rerr)
	}
	s.post("notifications/initialized", map[string]any{})
	return s
}

// answerElicitations opens s's standalone stream and answers each elicitation/create request on it with answer;
// the returned function is how many it answered. With answer nil it answers none: the function is how many it got.
func answerElicitations(t *testing.T, s *mcpSession, answer map[string]any) func() int {
	t.Helper()
	var answered atomic.Int32
	s.listen(t, func(ctx context.Context, data string) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal([]byte(data), &msg) != nil || msg.Method != "elicitation/create" || len(msg.ID) == 0 {
			return
		}
		if answer == nil {
			answered.Add(1)
			return
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": answer})
		post, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
		post.Header.Set("Content-Type", "application/json")
		post.Header.Set("Accept", "application/json, text/event-stream")
		s.identify(post)
		if r, err := http.DefaultClient.Do(post); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			answered.Add(1)
		}
	})
	return func() int { return int(answered.Load()) }
}

// listen opens s's standalone stream (its GET, closed when the test ends) and, on a goroutine of its own, calls each
// with the stream's context and the data of every event on it, in order.
func (s *mcpSession) listen(t *testing.T, each func(ctx context.Context, data string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	s.identify(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the session's GET stream: %v %v", err, resp)
	}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				each(ctx, data)
			}
		}
	}()
}

// identify sets the headers of a request of the session after its initialize: its id, protocol version and token.
func (s *mcpSession) identify(req *http.Request) {
	req.Header.Set("Mcp-Session-Id", s.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+s.token)
}

// TestClusterTaskPendingInputThroughOtherNodeE2E: alice's 2025-11-25 session on node A starts a task
// (server-everything's simulate-research-query, ambiguous: its backend asks which python she means) and never
// reads its stream: the question sent to it there stays unanswered. Her session on node B, which declared
// elicitation and listens on its stream, gets the task's pending question from B, and her answer there reaches the
// request waiting on A: the task completes with it, and tasks/result through B gives the result.
func TestClusterTaskPendingInputThroughOtherNodeE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	a, b := taskCluster(t)
	const tool = "every__simulate-research-query"
	elicit := map[string]any{"elicitation": map[string]any{}}

	// Alice on B: a session that declared elicitation, served one of her task requests there, and answers on its
	// stream. Bob on B: the same, but not the owner.
	aliceB := openMCPWith(t, b.mcp+"/mcp", tcAlice, elicit)
	bobB := openMCPWith(t, b.mcp+"/mcp", tcBob, elicit)
	for _, s := range []*mcpSession{aliceB, bobB} {
		if res, rerr := s.post("tasks/list", map[string]any{}); rerr != nil {
			t.Fatalf("tasks/list: %s %v", res, rerr)
		}
	}
	aliceAnswered := answerElicitations(t, aliceB, map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}})
	bobAnswered := answerElicitations(t, bobB, map[string]any{"action": "accept", "content": map[string]any{"interpretation": "bob"}})

	// Alice on A: she starts the task there, and never opens her stream.
	aliceA := openMCPWith(t, a.mcp+"/mcp", tcAlice, elicit)
	id := startAmbiguousTask(t, aliceA, a.name, tool)
	t.Logf("task %s started through %s (%s)", id, a.name, a.id)

	awaitAnswered(t, aliceB, id, aliceAnswered, b.name)
	res, rerr := aliceB.post("tasks/result", map[string]any{"taskId": id})
	if rerr != nil || !strings.Contains(string(res), "python (snake)") {
		t.Errorf("tasks/result through %s = %s %v, want alice's answer in it", b.name, res, rerr)
	}
	if n := bobAnswered(); n != 0 {
		t.Errorf("bob's session on %s was asked alice's question (%d answers)", b.name, n)
	}
}

// close ends the session (its DELETE), as a client that goes away does.
func (s *mcpSession) close() {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, s.url, nil)
	s.identify(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("DELETE the session: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		s.t.Fatalf("DELETE the session: %d", resp.StatusCode)
	}
}

// TestClusterTaskInputResentToOtherNodeE2E: alice's 2025-11-25 session on node A starts a task (server-everything's
// simulate-research-query, ambiguous: its backend asks which python she means) and gets the question on its stream,
// but goes away (its DELETE) without answering. Node B heard the task input_required while alice had no session
// there that could answer (her session on B declared no elicitation): nobody there was asked. Then alice comes back
// on B with a session that declared elicitation (it serves one of her task requests, tasks/list, and never reads the
// task): the question reaches it, and her answer there completes the task on A.
func TestClusterTaskInputResentToOtherNodeE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	a, b := taskCluster(t)
	const tool = "every__simulate-research-query"
	elicit := map[string]any{"elicitation": map[string]any{}}

	// Alice on B, without elicitation: one of her sessions there, listening for her tasks' status.
	watchB := openMCPAs(t, b.mcp+"/mcp", tcAlice)
	if res, rerr := watchB.post("tasks/list", map[string]any{}); rerr != nil {
		t.Fatalf("tasks/list: %s %v", res, rerr)
	}
	hearsB := listenStatus(t, watchB)

	// Alice on A: she starts the task there and gets the question, and does not answer.
	aliceA := openMCPWith(t, a.mcp+"/mcp", tcAlice, elicit)
	askedA := answerElicitations(t, aliceA, nil)
	id := startAmbiguousTask(t, aliceA, a.name, tool)
	t.Logf("task %s started through %s (%s)", id, a.name, a.id)
	waitFor(t, 60*time.Second, "the question on alice's session on "+a.name, func() bool { return askedA() > 0 })
	waitFor(t, 60*time.Second, b.name+" hearing the task input_required", func() bool {
		return slices.Contains(hearsB.statuses(id), persistence.TaskInputRequired)
	})
	aliceA.close()

	// Alice comes back on B, with elicitation; she reads no task (a read of it would ask her too).
	answerThroughListing(t, a, b, id)
}

// TestClusterTaskInputReachesLateNodeE2E: node B is stopped while alice's 2025-11-25 session on node A starts a
// task (server-everything's simulate-research-query, ambiguous: its backend asks which python she means) and gets
// the question, but goes away without answering. B starts again after the task went input_required: it never heard
// the announcement. Alice comes to B with a session that declared elicitation and lists her tasks (she never reads
// that task there): her first task request on B has B catch up on her tasks, the question reaches that session, and
// her answer there completes the task on A.
func TestClusterTaskInputReachesLateNodeE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	a, b := taskCluster(t)
	const tool = "every__simulate-research-query"
	elicit := map[string]any{"elicitation": map[string]any{}}
	b.signal(syscall.SIGTERM, 30*time.Second)

	// Alice on A: she starts the task there and gets the question, and does not answer.
	aliceA := openMCPWith(t, a.mcp+"/mcp", tcAlice, elicit)
	askedA := answerElicitations(t, aliceA, nil)
	id := startAmbiguousTask(t, aliceA, a.name, tool)
	t.Logf("task %s started through %s while %s is stopped", id, a.name, b.name)
	waitFor(t, 60*time.Second, "the question on alice's session on "+a.name, func() bool { return askedA() > 0 })
	aliceA.close()

	// B starts again, and is a member of the cluster (an answer there goes to A through it).
	b.start()
	waitFor(t, 30*time.Second, b.name+" in the cluster again", func() bool {
		_, h := b.do("GET", "/health", nil)
		c, _ := h["cluster"].(map[string]any)
		m, _ := c["members"].(float64)
		return c != nil && c["joined"] == true && int(m) == 2
	})

	// Alice comes to B, with elicitation; she lists her tasks and reads none.
	answerThroughListing(t, a, b, id)
}

// answerThroughListing: alice comes to node b with a session that declared elicitation and lists her tasks (she
// reads none: a read of task id would ask her too); the question of task id (running on node a) reaches that
// session, whose answer completes the task, as a session of alice on a that cannot answer reads it.
func answerThroughListing(t *testing.T, a, b *clusterNode, id string) {
	t.Helper()
	aliceB := openMCPWith(t, b.mcp+"/mcp", tcAlice, map[string]any{"elicitation": map[string]any{}})
	answeredB := answerElicitations(t, aliceB, map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}})
	if res, rerr := aliceB.post("tasks/list", map[string]any{}); rerr != nil {
		t.Fatalf("tasks/list: %s %v", res, rerr)
	}
	readA := openMCPAs(t, a.mcp+"/mcp", tcAlice) // no elicitation declared: it cannot answer
	awaitAnswered(t, readA, id, answeredB, b.name)
	if res, rerr := readA.post("tasks/result", map[string]any{"taskId": id}); rerr != nil || !strings.Contains(string(res), "python (snake)") {
		t.Errorf("tasks/result through %s = %s %v, want alice's answer in it", a.name, res, rerr)
	}
}

// stdioCaller sends requests to an `aggregator stdio` process as JSON lines and reads their answers.
func stdioCaller(t *testing.T, p *stdioProc) (call func(method string, params map[string]any) json.RawMessage, notify func(method string)) {
	lines := bufio.NewScanner(p.stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	next := 0
	call = func(method string, params map[string]any) json.RawMessage {
		t.Helper()
		next++
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": next, "method": method, "params": params})
		if _, err := p.stdin.Write(append(msg, '\n')); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		for lines.Scan() {
			var ans struct {
				ID     int             `json:"id"`
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(lines.Bytes(), &ans) != nil || ans.Method != "" || ans.ID != next {
				continue // a notification, or the server's own request
			}
			if ans.Error != nil {
				t.Fatalf("%s: %s", method, ans.Error)
			}
			return ans.Result
		}
		t.Fatalf("%s: stdout ended\nlogs:\n%s", method, p.logs)
		return nil
	}
	notify = func(method string) {
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
		_, _ = p.stdin.Write(append(msg, '\n'))
	}
	return call, notify
}

// TestStdioTasksE2E: `aggregator stdio` serves tasks, relayed to a serve process (which it speaks SSE to) and
// serving alone (its own task manager, the filter in front of the go-sdk's stdio): the initialize answer advertises
// them, a task-augmented tools/call answers the task, tasks/get reads it and tasks/result gives its result.
func TestStdioTasksE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			d := everythingForStdio(t, alone, "stdio-tasks")
			p := startStdio(t, d.env)
			call, notify := stdioCaller(t, p)
			init := call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "stdio-tasks", "version": "1"}})
			if !strings.Contains(string(init), `"tasks"`) {
				t.Fatalf("initialize = %s, want capabilities.tasks", init)
			}
			notify("notifications/initialized")
			var created struct {
				Task tasks.Wire `json:"task"`
			}
			var res json.RawMessage
			waitFor(t, 60*time.Second, "a task of every__echo", func() bool { // alone: once the backend reconnected
				res = call("tools/call", map[string]any{"name": "every__echo", "arguments": map[string]any{"message": "over-stdio"},
					"task": map[string]any{"ttl": 60000}})
				return json.Unmarshal(res, &created) == nil && created.Task.TaskID != ""
			})
			if res := call("tasks/result", map[string]any{"taskId": created.Task.TaskID}); !strings.Contains(string(res), "over-stdio") {
				t.Errorf("tasks/result = %s", res)
			}
			var got tasks.Wire
			if res := call("tasks/get", map[string]any{"taskId": created.Task.TaskID}); json.Unmarshal(res, &got) != nil || got.Status != persistence.TaskCompleted {
				t.Errorf("tasks/get = %s", res)
			}
			if alone && !strings.Contains(p.logs.String(), "mode: standalone") {
				t.Errorf("the stdio process did not serve alone:\n%s", p.logs)
			}
		})
	}
}

// TestStdioTasksExtTasksClientE2E: the ext-tasks client (2025-11-25) over stdio, starting `aggregator stdio` itself
// as a desktop client does, relayed to a serve process (which it speaks SSE to) and serving alone. tools/list
// shows server-everything's simulate-research-query with its execution.taskSupport; the client runs it as a task
// with an ambiguous topic: the backend's elicitation, tied to the task, reaches the client's input handler, the
// client settles the task (tasks/get, then tasks/result) with its answer in the report, reads it once more, and
// hears the task's status changes (notifications/tasks/status) on stdout.
func TestStdioTasksExtTasksClientE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	script := peertest.ExtTasksStdioClientScript(t)
	node := peertest.Node(t)
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			d := everythingForStdio(t, alone, "stdio-ext-tasks")
			var got struct {
				TaskSupport, Kind, TaskID, Asked, AskedTaskID string
				Status, Text, AfterStatus, Error              string
				Notified                                      []string
			}
			var out []byte
			waitFor(t, 90*time.Second, "a task through aggregator stdio", func() bool { // alone: once the backend connected
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, node, script, "every__simulate-research-query", `{"topic":"python","ambiguous":true}`,
					`{"action":"accept","content":{"interpretation":"snake"}}`, binary, "stdio")
				cmd.Env = d.env
				logs := &syncBuf{}
				cmd.Stderr = logs
				var err error
				out, err = cmd.Output()
				got.Error = ""
				if jerr := json.Unmarshal(out, &got); jerr != nil {
					t.Fatalf("ext-tasks client: %v %v\n%s\nlogs:\n%s", err, jerr, out, logs)
				}
				if alone && strings.Contains(got.Error, "Tool every__simulate-research-query not found") {
					return false
				}
				if err != nil || got.Error != "" {
					t.Fatalf("ext-tasks client: %v %s\nlogs:\n%s", err, out, logs)
				}
				if alone && !strings.Contains(logs.String(), "mode: standalone") {
					t.Errorf("the stdio process did not serve alone:\n%s", logs)
				}
				return true
			})
			if got.TaskSupport != "required" { // the backend's (the aggregator's own default is optional)
				t.Errorf("tools/list: execution.taskSupport = %q, want the backend's required", got.TaskSupport)
			}
			if got.Kind != "task" || len(got.TaskID) != 32 || got.AskedTaskID != got.TaskID || !strings.Contains(got.Asked, "python") {
				t.Errorf("task and its elicitation = %s", out)
			}
			if got.Status != persistence.TaskCompleted || !strings.Contains(got.Text, "python (snake)") || got.AfterStatus != persistence.TaskCompleted {
				t.Errorf("settled task = %s", out)
			}
			for _, want := range []string{"input_required", "completed"} {
				if !slices.Contains(got.Notified, got.TaskID+" "+want) {
					t.Errorf("notifications/tasks/status heard = %v, want %s %s", got.Notified, got.TaskID, want)
				}
			}
		})
	}
}

// startAmbiguousTask starts, through s (a 2025-11-25 session on node), a task of tool (server-everything's
// simulate-research-query) on an ambiguous topic, whose backend then asks the client to choose; it tries until node
// runs the tool as a task (its backend's taskSupport known there) and returns the task's id.
func startAmbiguousTask(t *testing.T, s *mcpSession, node, tool string) string {
	t.Helper()
	var id string
	waitFor(t, 60*time.Second, "a task of "+tool+" through "+node, func() bool {
		res, rerr := s.post("tools/call", map[string]any{"name": tool, "task": map[string]any{"ttl": 120000},
			"arguments": map[string]any{"topic": "python", "ambiguous": true}})
		var w struct {
			Task tasks.Wire `json:"task"`
		}
		if rerr != nil || json.Unmarshal(res, &w) != nil || w.Task.TaskID == "" {
			time.Sleep(500 * time.Millisecond)
			return false
		}
		id = w.Task.TaskID
		return true
	})
	return id
}

// startAmbiguousTaskV2 is startAmbiguousTask for a 2026-07-28 client posting to url with token.
func startAmbiguousTaskV2(t *testing.T, url, token, node, tool string) string {
	t.Helper()
	var id string
	waitFor(t, 60*time.Second, "a task of "+tool+" through "+node, func() bool {
		res, rerr := v2Post(t, url, token, "tools/call", map[string]any{"name": tool,
			"arguments": map[string]any{"topic": "python", "ambiguous": true}})
		var w struct{ ResultType, TaskID string }
		if rerr != nil || json.Unmarshal(res, &w) != nil || w.ResultType != "task" {
			time.Sleep(500 * time.Millisecond)
			return false
		}
		id = w.TaskID
		return true
	})
	return id
}

// everythingForStdio starts a daemon with server-everything registered (marker prefix) for an `aggregator stdio`
// test; alone: the daemon is then killed, so that the stdio process serves alone (its own task manager).
func everythingForStdio(t *testing.T, alone bool, prefix string) *daemon {
	t.Helper()
	d := newDaemon(t, "")
	d.start()
	marker := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	registerEverything(t, d, "", marker)
	if alone {
		d.signal(syscall.SIGKILL, 10*time.Second)
		waitGone(t, marker)
	}
	return d
}

// awaitAnswered waits, reading through s, until task id ended, and fails unless it completed after answers (the
// count of alice's answers given through node) were given.
func awaitAnswered(t *testing.T, s *mcpSession, id string, answers func() int, node string) {
	t.Helper()
	var done tasks.Wire
	waitFor(t, 60*time.Second, "the task completed after alice's answer through "+node, func() bool {
		done = s.taskGet(id)
		return !persistence.TaskOpen(done.Status)
	})
	if done.Status != persistence.TaskCompleted || answers() == 0 {
		t.Fatalf("task = %+v after %d answers through %s, want completed after alice's", done, answers(), node)
	}
}
