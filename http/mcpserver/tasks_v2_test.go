package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestExtTasksClientV2: the ext-tasks client over revision 2026-07-28 (the tasks extension) through /mcp against
// server-everything's task tool (simulate-research-query, taskSupport "required"): server/discover offers the
// extension; the call is answered with a task (the client requires one), polled with tasks/get to its result;
// a second task is handed over, the connection closed, and resumed on a new one; a task whose backend asks for
// input is input_required with the question (seen from another connection), answered through tasks/update, and
// completes with the answer; a task cancelled at once ends cancelled.
func TestExtTasksClientV2(t *testing.T) {
	script := peertest.ExtTasksV2ClientScript(t)
	node := peertest.Node(t)
	r := newBackendTaskRig(t, persistence.TransportSTDIO)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, r.mux.URL+"/mcp",
		"every__simulate-research-query", `{"topic":"golang"}`,
		"every__simulate-research-query", `{"topic":"python","ambiguous":true}`,
		`{"action":"accept","content":{"interpretation":"snake"}}`)
	out, err := cmd.Output()
	var got struct {
		Discovered                 []string
		Kind, TaskID, Status, Text string
		ResumedStatus, ResumedText string
		Asked, AskedTaskID         string
		SeenStatus, SeenMessage    string
		InputStatus, InputText     string
		CancelledStatus, Error     string
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("ext-tasks client: %v %v\n%s", err, jerr, out)
	}
	if !slices.Contains(got.Discovered, "io.modelcontextprotocol/tasks") {
		t.Errorf("server/discover's extensions = %v, want the tasks extension", got.Discovered)
	}
	if got.Kind != "task" || len(got.TaskID) != 32 || got.Status != persistence.TaskCompleted || !strings.Contains(got.Text, "golang") {
		t.Errorf("task call = %+v", got)
	}
	if got.ResumedStatus != persistence.TaskCompleted || !strings.Contains(got.ResumedText, "golang") {
		t.Errorf("resumed task = %q %q", got.ResumedStatus, got.ResumedText)
	}
	if !strings.Contains(got.Asked, "python") || len(got.AskedTaskID) != 32 {
		t.Errorf("the backend's question = %q (task %q)", got.Asked, got.AskedTaskID)
	}
	if got.SeenStatus != persistence.TaskInputRequired || !strings.Contains(got.SeenMessage, "python") {
		t.Errorf("task seen from another connection while waiting = %q %q, want input_required with the question", got.SeenStatus, got.SeenMessage)
	}
	if got.InputStatus != persistence.TaskCompleted || !strings.Contains(got.InputText, "python (snake)") {
		t.Errorf("task after its input = %q %q", got.InputStatus, got.InputText)
	}
	if got.CancelledStatus != persistence.TaskCancelled {
		t.Errorf("cancelled task = %q", got.CancelledStatus)
	}
	stored, err := r.store.GetTask(context.Background(), got.AskedTaskID)
	if err != nil || stored.Status != persistence.TaskCompleted || stored.InputRequest != nil {
		t.Errorf("stored input task = %+v, %v", stored, err)
	}
}

// modernPost sends one 2026-07-28 request (no session; the revision's headers and per-request _meta) declaring
// the client capabilities caps, and reads its answer.
func modernPost(t *testing.T, url, method string, params map[string]any, caps map[string]any) rpcAnswer {
	t.Helper()
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	} else if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
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
	var a rpcAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s: status %d, answer %q: %v", method, resp.StatusCode, raw, err)
	}
	return a
}

// TestModernTaskRequests: over 2026-07-28, a tool its backend runs only as a task, called without the tasks
// extension, is refused with -32021 naming the extension; the task methods need the extension too, and an unknown
// task is -32602; a tool without task support is a plain call even when the extension is declared.
func TestModernTaskRequests(t *testing.T) {
	r := newBackendTaskRig(t, persistence.TransportSTDIO)
	url := r.mux.URL + "/mcp"
	withTasks := map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
	needsExtension := func(what string, a rpcAnswer) {
		t.Helper()
		if a.Error == nil || a.Error.Code != -32021 || !strings.Contains(string(a.Error.Data), `"io.modelcontextprotocol/tasks"`) {
			t.Errorf("%s = %s %+v, want -32021 naming the tasks extension", what, a.Result, a.Error)
		}
	}
	needsExtension("a required tool called without the extension",
		modernPost(t, url, "tools/call", map[string]any{"name": "every__simulate-research-query", "arguments": map[string]any{"topic": "go"}}, map[string]any{}))
	needsExtension("tasks/get without the extension",
		modernPost(t, url, "tasks/get", map[string]any{"taskId": "0123456789abcdef0123456789abcdef"}, map[string]any{}))
	if a := modernPost(t, url, "tasks/get", map[string]any{"taskId": "0123456789abcdef0123456789abcdef"}, withTasks); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("tasks/get of an unknown task = %s %+v, want -32602", a.Result, a.Error)
	}
	a := modernPost(t, url, "tools/call", map[string]any{"name": "every__echo", "arguments": map[string]any{"message": "plain"}}, withTasks)
	if a.Error != nil || strings.Contains(string(a.Result), `"resultType":"task"`) || !strings.Contains(string(a.Result), "plain") {
		t.Errorf("call of a tool without task support = %s %+v, want its plain result", a.Result, a.Error)
	}
}

// TestExtTasksClientV2TaskBackend: the ext-tasks client over 2026-07-28 through /mcp against the TypeScript SDK
// task backend over streamable HTTP (countdown, taskSupport "required"): the call is a task that follows the
// backend's own task to its result, a handed-over one is resumed on a new connection, and one is cancelled.
func TestExtTasksClientV2TaskBackend(t *testing.T) {
	script := peertest.ExtTasksV2ClientScript(t)
	node := peertest.Node(t)
	r, _ := newTasksEndpointRig(t)
	registerTaskBackend(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, script, r.mux.URL+"/mcp", "tb__countdown", `{"ms":1500,"text":"v2"}`, "-", "{}", "{}").Output()
	var got struct {
		Kind, TaskID, Status, Text string
		ResumedStatus, ResumedText string
		CancelledStatus, Error     string
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("ext-tasks client: %v %v\n%s", err, jerr, out)
	}
	if got.Kind != "task" || got.Status != persistence.TaskCompleted || !strings.Contains(got.Text, "countdown done: v2") {
		t.Errorf("task call = %+v", got)
	}
	if got.ResumedStatus != persistence.TaskCompleted || !strings.Contains(got.ResumedText, "countdown done: v2") {
		t.Errorf("resumed task = %q %q", got.ResumedStatus, got.ResumedText)
	}
	if got.CancelledStatus != persistence.TaskCancelled {
		t.Errorf("cancelled task = %q", got.CancelledStatus)
	}
	// countdown runs only as the backend's task: its text in the result says that task was followed to its end.
}
