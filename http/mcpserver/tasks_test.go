package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

// taskBackend is an HTTP MCP server with echo and slow (which returns only when its call is cancelled or release
// is closed).
func taskBackend(t testing.TB, release chan struct{}, slowStarted, slowCancelled *atomic.Int32) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "task-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + string(r.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			slowStarted.Add(1)
			select {
			case <-ctx.Done():
				slowCancelled.Add(1)
				return nil, ctx.Err()
			case <-release:
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slow done"}}}, nil
			}
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

type taskRig struct {
	url       string
	sse       string // the legacy SSE endpoint
	store     persistence.Store
	release   chan struct{}
	started   atomic.Int32 // calls of slow that reached the backend
	cancelled atomic.Int32
}

func newTaskRig(t testing.TB, maxOpen int) *taskRig {
	ctx := context.Background()
	st, sys := startSystem(t, actors.Deps{Config: actors.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)})
	toks, err := auth.Parse("ops:"+adminToken, "alice:"+aliceToken+",bob:"+bobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	mgr := tasks.New(tasks.Config{Store: st, Node: "node-1", MaxOpenPerOwner: maxOpen})
	t.Cleanup(mgr.Close)
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true, Tasks: mgr})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	mux.Handle("/sse", ep.SSEHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)
	r := &taskRig{url: hs.URL + "/mcp", sse: hs.URL + "/sse", store: st, release: make(chan struct{})}
	raw, _ := json.Marshal(map[string]any{"base_url": taskBackend(t, r.release, &r.started, &r.cancelled)})
	if _, err := sys.Register(ctx, actors.RegisterRequest{Name: "back", TransportType: persistence.TransportHTTP,
		ConnectionConfig: raw, AutoConnect: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "back's tools routable", func() bool { return len(sys.Routes().Callable()) == 2 })
	return r
}

// rawSession speaks JSON-RPC over streamable HTTP by hand: the go-sdk client has no task methods.
type rawSession struct {
	t     testing.TB
	url   string
	token string
	sid   string
	next  int
	caps  map[string]any
}

type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (s *rawSession) post(method string, params any, notify bool) rpcAnswer {
	s.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !notify {
		s.next++
		msg["id"] = s.next
	}
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+s.token)
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if s.sid == "" {
		s.sid = resp.Header.Get("Mcp-Session-Id")
	}
	if notify {
		return rpcAnswer{}
	}
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(line, `"id"`) {
				raw = []byte(line)
			}
		}
	}
	var a rpcAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		s.t.Fatalf("%s: status %d, answer %q: %v", method, resp.StatusCode, raw, err)
	}
	return a
}

func openRaw(t testing.TB, url, token string) *rawSession {
	s := &rawSession{t: t, url: url, token: token}
	a := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}}, false)
	var init struct {
		Capabilities map[string]any `json:"capabilities"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &init) != nil || s.sid == "" {
		t.Fatalf("initialize: %+v (session %q)", a, s.sid)
	}
	s.caps = init.Capabilities
	s.post("notifications/initialized", nil, true)
	return s
}

func (s *rawSession) task(method, id string) (tasks.Wire, rpcAnswer) {
	a := s.post(method, map[string]any{"taskId": id}, false)
	var w tasks.Wire
	if a.Error == nil {
		_ = json.Unmarshal(a.Result, &w)
	}
	return w, a
}

func (s *rawSession) start(name string, args any) (tasks.Wire, rpcAnswer) {
	a := s.post("tools/call", map[string]any{"name": name, "arguments": args, "task": map[string]any{"ttl": 60000}}, false)
	var created struct {
		Task tasks.Wire `json:"task"`
	}
	if a.Error == nil {
		_ = json.Unmarshal(a.Result, &created)
	}
	return created.Task, a
}

func TestTasksOverMCP(t *testing.T) {
	r := newTaskRig(t, 0)
	alice := openRaw(t, r.url, aliceToken)
	caps, _ := alice.caps["tasks"].(map[string]any)
	if caps == nil || caps["list"] == nil || caps["cancel"] == nil {
		t.Fatalf("capabilities.tasks = %v, want list, cancel and requests.tools.call", alice.caps["tasks"])
	}
	if req, _ := caps["requests"].(map[string]any); req == nil || req["tools"].(map[string]any)["call"] == nil {
		t.Fatalf("capabilities.tasks.requests = %v", caps["requests"])
	}

	// tools/list says which tools may run as tasks: the backend's, not the meta-tools.
	var listed struct {
		Tools []struct {
			Name      string         `json:"name"`
			Execution map[string]any `json:"execution"`
		} `json:"tools"`
	}
	if a := alice.post("tools/list", map[string]any{}, false); a.Error != nil || json.Unmarshal(a.Result, &listed) != nil {
		t.Fatalf("tools/list: %+v", a.Error)
	}
	for _, tool := range listed.Tools {
		want := ""
		if strings.HasPrefix(tool.Name, "back__") {
			want = "optional"
		}
		if got, _ := tool.Execution["taskSupport"].(string); got != want {
			t.Errorf("tool %s: execution %v, want taskSupport %q", tool.Name, tool.Execution, want)
		}
	}

	created, a := alice.start("back__echo", map[string]any{"x": 1})
	if a.Error != nil || len(created.TaskID) != 32 || created.Status != persistence.TaskWorking || created.TTL != 60000 || created.CreatedAt == "" {
		t.Fatalf("task-augmented tools/call = %+v (%s, %+v)", created, a.Result, a.Error)
	}
	// tasks/result waits for the end and answers the call's own result, tied to the task.
	res := alice.post("tasks/result", map[string]any{"taskId": created.TaskID}, false)
	var payload struct {
		Content []struct{ Text string } `json:"content"`
		Meta    map[string]any          `json:"_meta"`
	}
	if res.Error != nil || json.Unmarshal(res.Result, &payload) != nil || len(payload.Content) != 1 ||
		payload.Content[0].Text != `echo {"x":1}` {
		t.Fatalf("tasks/result = %s %+v", res.Result, res.Error)
	}
	if rel, _ := payload.Meta[tasks.RelatedTaskMetaKey].(map[string]any); rel["taskId"] != created.TaskID {
		t.Errorf("tasks/result _meta = %v, want the related task", payload.Meta)
	}
	got, a := alice.task("tasks/get", created.TaskID)
	if a.Error != nil || got.Status != persistence.TaskCompleted || got.TaskID != created.TaskID {
		t.Errorf("tasks/get = %+v %+v", got, a.Error)
	}

	// Another caller, even on its own session, finds none of it; an admin's tasks/list is its own too.
	bob := openRaw(t, r.url, bobToken)
	ops := openRaw(t, r.url, adminToken)
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		if _, a := bob.task(method, created.TaskID); a.Error == nil || a.Error.Code != -32602 || !strings.Contains(a.Error.Message, "not found") {
			t.Errorf("bob's %s of alice's task = %s %+v, want -32602 not found", method, a.Result, a.Error)
		}
	}
	for _, tc := range []struct {
		who  *rawSession
		want int
	}{{alice, 1}, {bob, 0}, {ops, 0}} {
		a := tc.who.post("tasks/list", map[string]any{}, false)
		var list struct {
			Tasks []tasks.Wire `json:"tasks"`
		}
		if a.Error != nil || json.Unmarshal(a.Result, &list) != nil || len(list.Tasks) != tc.want {
			t.Errorf("%s's tasks/list = %s %+v, want %d tasks", tc.who.token, a.Result, a.Error, tc.want)
		}
	}
	// A second session of alice's sees her task (a task is the subject's, not the session's).
	again := openRaw(t, r.url, aliceToken)
	if got, a := again.task("tasks/get", created.TaskID); a.Error != nil || got.Status != persistence.TaskCompleted {
		t.Errorf("tasks/get on alice's other session = %+v %+v", got, a.Error)
	}
	if _, a := alice.task("tasks/cancel", created.TaskID); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("cancel of a completed task = %+v, want -32602", a.Error)
	}

	// A running task is cancelled: the backend's call is cancelled, the task stays cancelled.
	slow, a := alice.start("back__slow", map[string]any{})
	if a.Error != nil {
		t.Fatalf("start slow: %+v", a.Error)
	}
	// Cancelled once its call runs at the backend (a cancel before that never reaches the backend at all).
	waitFor(t, "the slow call at the backend", func() bool { return r.started.Load() >= 1 })
	got, a = alice.task("tasks/cancel", slow.TaskID)
	if a.Error != nil || got.Status != persistence.TaskCancelled {
		t.Fatalf("tasks/cancel = %+v %+v", got, a.Error)
	}
	waitFor(t, "the backend call cancelled", func() bool { return r.cancelled.Load() == 1 })
	if got, _ := alice.task("tasks/get", slow.TaskID); got.Status != persistence.TaskCancelled || got.StatusMessage != tasks.MsgCancelled {
		t.Errorf("cancelled task = %+v", got)
	}
	if _, a := alice.task("tasks/result", slow.TaskID); a.Error == nil {
		t.Error("tasks/result of a cancelled task answered a result")
	}

	// Refused at once, with no task: an unknown tool, a meta-tool, a bad task parameter, no taskId.
	for _, tc := range []struct {
		name   string
		params map[string]any
	}{
		{"unknown tool", map[string]any{"name": "nope__nothing", "task": map[string]any{}}},
		{"meta-tool", map[string]any{"name": "list_mcp_servers", "task": map[string]any{}}},
		{"negative ttl", map[string]any{"name": "back__echo", "task": map[string]any{"ttl": -1}}},
		{"task not an object", map[string]any{"name": "back__echo", "task": "soon"}},
	} {
		if a := alice.post("tools/call", tc.params, false); a.Error == nil || a.Error.Code != -32602 {
			t.Errorf("%s: %s %+v, want -32602", tc.name, a.Result, a.Error)
		}
	}
	if a := alice.post("tasks/get", map[string]any{}, false); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("tasks/get without taskId = %+v", a.Error)
	}
	list, _, _ := r.store.ListTasks(context.Background(), persistence.ListTasksFilter{})
	if len(list) != 2 {
		t.Errorf("%d tasks stored, want the 2 started", len(list))
	}
	// A plain tools/call still goes through the go-sdk.
	if a := alice.post("tools/call", map[string]any{"name": "back__echo", "arguments": map[string]any{}}, false); a.Error != nil || !strings.Contains(string(a.Result), "echo") {
		t.Errorf("plain tools/call = %s %+v", a.Result, a.Error)
	}
}

func TestTaskLimitOverMCP(t *testing.T) {
	r := newTaskRig(t, 1)
	alice := openRaw(t, r.url, aliceToken)
	if _, a := alice.start("back__slow", map[string]any{}); a.Error != nil {
		t.Fatalf("first task: %+v", a.Error)
	}
	_, a := alice.start("back__slow", map[string]any{})
	if a.Error == nil || !strings.Contains(string(a.Error.Data), "TASK_LIMIT_REACHED") {
		t.Fatalf("second open task = %+v, want TASK_LIMIT_REACHED", a.Error)
	}
	bob := openRaw(t, r.url, bobToken)
	if _, a := bob.start("back__echo", map[string]any{}); a.Error != nil {
		t.Errorf("bob's task under alice's cap: %+v", a.Error)
	}
	close(r.release)
}

// TestExtTasksClient: the MCP Tasks client of @modelcontextprotocol/ext-tasks, another implementation, through /mcp
// against server-everything (2025-11-25): tools/list marks the backend's tools as callable as tasks, the client
// runs one as a task to completion, hands a second over, reconnects and resumes it, and cancels a long one.
func TestExtTasksClient(t *testing.T) {
	script := peertest.ExtTasksClientScript(t)
	node := peertest.Node(t)
	r := newTaskEverythingRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, script, r.mux.URL+"/mcp", "every__echo", `{"message":"via a task"}`,
		"every__trigger-long-running-operation", `{"duration":30,"steps":30}`).Output()
	var got struct {
		Kind, TaskID, Status, Text string
		Listed                     []string
		ResumedStatus, ResumedText string
		CancelledStatus, Error     string
		Notified                   []string
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("ext-tasks client: %v %v\n%s", err, jerr, out)
	}
	if got.Kind != "task" || len(got.TaskID) != 32 || got.Status != "completed" || !strings.Contains(got.Text, "via a task") ||
		!slices.Contains(got.Listed, got.TaskID) {
		t.Errorf("task call = %+v", got)
	}
	if got.ResumedStatus != "completed" || !strings.Contains(got.ResumedText, "via a task") {
		t.Errorf("resumed task = %+v", got)
	}
	if got.CancelledStatus != "cancelled" {
		t.Errorf("cancelled task = %+v", got)
	}
	// notifications/tasks/status reached the client on its session's stream as its tasks ended.
	if !slices.Contains(got.Notified, got.TaskID+" completed") {
		t.Errorf("status notifications heard = %v, want %s completed", got.Notified, got.TaskID)
	}
	list, _, _ := r.store.ListTasks(context.Background(), persistence.ListTasksFilter{})
	if len(list) != 3 {
		t.Errorf("%d tasks stored, want 3", len(list))
	}
}

// TestExtTasksClientInput: the ext-tasks client (2025-11-25) runs server-everything's ambiguous
// simulate-research-query as a task through /mcp; the backend's elicitation, tied to our task, reaches the client's
// input handler, and while the client has not answered, a second connection of the same caller sees the task
// input_required with the backend's question; the answer reaches the backend (the report names it) and the task
// completes.
func TestExtTasksClientInput(t *testing.T) {
	script := peertest.ExtTasksInputClientScript(t)
	node := peertest.Node(t)
	r := newTaskEverythingRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, script, r.mux.URL+"/mcp", "every__simulate-research-query",
		`{"topic":"python","ambiguous":true}`, `{"action":"accept","content":{"interpretation":"snake"}}`).Output()
	var got struct {
		Kind, TaskID, Asked, AskedTaskID string
		SeenStatus, SeenMessage          string
		Status, Text, AfterStatus, Error string
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("ext-tasks client: %v %v\n%s", err, jerr, out)
	}
	if got.Kind != "task" || len(got.TaskID) != 32 || got.AskedTaskID != got.TaskID || !strings.Contains(got.Asked, "python") {
		t.Errorf("task and its elicitation = %+v", got)
	}
	if got.SeenStatus != persistence.TaskInputRequired || !strings.Contains(got.SeenMessage, "python") {
		t.Errorf("task seen from another connection while waiting = %q %q, want input_required with the question", got.SeenStatus, got.SeenMessage)
	}
	if got.Status != persistence.TaskCompleted || !strings.Contains(got.Text, "python (snake)") || got.AfterStatus != persistence.TaskCompleted {
		t.Errorf("settled task = %+v", got)
	}
}

// newTasksEndpointRig is the endpoint with tasks (auth off), the tasks in a store of their own (the rig makes its actors'
// store after the options).
func newTasksEndpointRig(t *testing.T) (*rig, *tasks.Manager) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	mgr := tasks.New(tasks.Config{Store: st, Node: "node-1"})
	t.Cleanup(mgr.Close)
	r := newRig(t, mcpserver.Options{Tasks: mgr})
	r.store = st
	return r, mgr
}

// newTaskEverythingRig is the endpoint with tasks (auth off) and server-everything connected over stdio; the tasks
// live in a store of their own (the rig makes its actors' store after the options).
func newTaskEverythingRig(t *testing.T) *rig {
	r, _ := newTasksEndpointRig(t)
	cmd, args := peertest.EverythingStdio(t)
	r.register(t, "every", map[string]any{"command": cmd, "args": args}, persistence.TransportSTDIO)
	waitFor(t, "every.echo routable", func() bool {
		_, ok := r.sys.Routes().Tool("every.echo")
		return ok && len(r.sys.Routes().Callable()) > 0
	})
	return r
}
