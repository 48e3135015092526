package mcpserver_test

import (
	"context"
	"encoding/json"
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
