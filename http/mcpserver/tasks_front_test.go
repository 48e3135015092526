package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/persistence"
)

// openStdio serves a stdio client of ep in-process (as `aggregator stdio` serving alone) that declares caps and
// answers the server's requests with onRequest.
func openStdio(t testing.TB, ep *mcpserver.Server, caps map[string]any, onRequest func(string, json.RawMessage) any) *frontClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = ep.ServeStdio(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	var wmu sync.Mutex
	c := newFrontClient(t, func(msg []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := inW.Write(append(msg, '\n'))
		return err
	}, onRequest)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.receive(append([]byte(nil), sc.Bytes()...))
		}
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("the stdio session did not end with its input")
		}
		_ = outR.Close()
	})
	c.initialize("2025-11-25", caps)
	return c
}

// TestTasksOverSSEAndStdio: the legacy SSE endpoint and stdio serve tasks as /mcp does. tools/list shows each backend
// tool's execution.taskSupport (the TypeScript SDK task backend: countdown "required", quick "optional", plain
// "forbidden" shown as "optional"); a task whose backend asks the client while it waits (server-everything's
// ambiguous simulate-research-query: elicitation/create, the task input_required) has the request relayed to the
// session that started it, whose answer the report shows; and the session hears the task's status changes
// (notifications/tasks/status: input_required, then completed).
func TestTasksOverSSEAndStdio(t *testing.T) {
	r := newBackendTaskRig(t, persistence.TransportSTDIO)
	registerTaskBackend(t, r.rig)
	for _, front := range []string{"sse", "stdio"} {
		t.Run(front, func(t *testing.T) {
			asked := make(chan string, 1)
			onRequest := func(method string, params json.RawMessage) any {
				if method != "elicitation/create" {
					return nil
				}
				select {
				case asked <- string(params):
				default:
				}
				return map[string]any{"action": "accept", "content": map[string]any{"interpretation": "snake"}}
			}
			caps := map[string]any{"elicitation": map[string]any{}}
			var c *frontClient
			if front == "sse" {
				c = openSSEWith(t, r.mux.URL+"/sse", "", caps, onRequest)
			} else {
				c = openStdio(t, r.endpoint, caps, onRequest)
			}

			wantTaskSupport(t, func() (json.RawMessage, bool) {
				a := c.post("tools/list", map[string]any{})
				return a.Result, a.Error == nil
			}, map[string]string{"tb__countdown": "required", "tb__quick": "optional", "tb__plain": "optional",
				"every__simulate-research-query": "required"})

			a := c.post("tools/call", map[string]any{"name": "every__simulate-research-query",
				"arguments": map[string]any{"topic": "python", "ambiguous": true}, "task": map[string]any{"ttl": 60000}})
			var created struct {
				Task tasks.Wire `json:"task"`
			}
			if a.Error != nil || json.Unmarshal(a.Result, &created) != nil || created.Task.TaskID == "" {
				t.Fatalf("task-augmented call = %s %+v", a.Result, a.Error)
			}
			id := created.Task.TaskID
			res := c.post("tasks/result", map[string]any{"taskId": id})
			if res.Error != nil || !strings.Contains(string(res.Result), "python (snake)") {
				t.Fatalf("tasks/result = %s %+v, want the report with the client's clarification", res.Result, res.Error)
			}
			select {
			case params := <-asked:
				if !strings.Contains(params, "python") || !strings.Contains(params, id) {
					t.Errorf("elicitation = %s, want the backend's question tied to our task %s", params, id)
				}
			default:
				t.Error("the client never saw the backend's elicitation")
			}
			waitFor(t, "the completion heard", func() bool {
				heard := c.heard(id)
				return len(heard) > 0 && heard[len(heard)-1] == persistence.TaskCompleted
			})
			if heard := c.heard(id); !strings.Contains(strings.Join(heard, " "), persistence.TaskInputRequired) {
				t.Errorf("statuses heard = %v, want input_required before completed", heard)
			}
		})
	}
}
