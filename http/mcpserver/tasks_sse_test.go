package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/persistence"
)

// frontClient speaks JSON-RPC by hand over the legacy SSE transport or stdio: requests answered on the stream (the
// SSE session's GET, stdout), the server's requests answered by onRequest, notifications/tasks/status recorded.
type frontClient struct {
	t         testing.TB
	send      func(msg []byte) error                                   // one message to the server
	onRequest func(method string, params json.RawMessage) (result any) // the server's requests; nil: not answered
	mu        sync.Mutex
	answers   map[string]chan json.RawMessage // by request id
	statuses  []tasks.Wire                    // notifications/tasks/status heard
	next      int
}

func newFrontClient(t testing.TB, send func([]byte) error, onRequest func(string, json.RawMessage) any) *frontClient {
	return &frontClient{t: t, send: send, onRequest: onRequest, answers: map[string]chan json.RawMessage{}}
}

// receive takes one message from the server.
func (c *frontClient) receive(data []byte) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil {
		return
	}
	switch {
	case msg.Method == "notifications/tasks/status":
		var w tasks.Wire
		_ = json.Unmarshal(msg.Params, &w)
		c.mu.Lock()
		c.statuses = append(c.statuses, w)
		c.mu.Unlock()
	case msg.Method != "" && len(msg.ID) > 0 && c.onRequest != nil:
		if res := c.onRequest(msg.Method, msg.Params); res != nil {
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": res})
			go func() {
				if err := c.send(body); err != nil {
					c.t.Errorf("answering %s: %v", msg.Method, err)
				}
			}()
		}
	case msg.Method == "":
		c.mu.Lock()
		if ch := c.answers[string(msg.ID)]; ch != nil {
			ch <- json.RawMessage(data)
		}
		c.mu.Unlock()
	}
}

// initialize opens the session as a client of revision version declaring caps, and checks that the answer offers
// tasks when the revision is 2025-11-25.
func (c *frontClient) initialize(version string, caps map[string]any) {
	c.t.Helper()
	if a := c.post("initialize", map[string]any{"protocolVersion": version, "capabilities": caps,
		"clientInfo": map[string]any{"name": "front-test", "version": "1"}}); a.Error != nil {
		c.t.Fatalf("initialize: %+v", a.Error)
	} else {
		var init struct {
			Capabilities map[string]any `json:"capabilities"`
		}
		if json.Unmarshal(a.Result, &init) != nil || (version == "2025-11-25") != (init.Capabilities["tasks"] != nil) {
			c.t.Fatalf("initialize %s = %s, want capabilities.tasks only for 2025-11-25", version, a.Result)
		}
	}
	c.notify("notifications/initialized")
}

func (c *frontClient) notify(method string) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": map[string]any{}})
	if err := c.send(body); err != nil {
		c.t.Fatal(err)
	}
}

// openSSE opens an SSE session of the token's caller that declares no client capability.
func openSSE(t *testing.T, url, token string) *frontClient {
	return openSSEWith(t, url, token, map[string]any{}, nil)
}

// openSSEWith opens a 2025-11-25 SSE session of the token's caller that declares caps and answers the server's
// requests with onRequest.
func openSSEWith(t testing.TB, url, token string, caps map[string]any, onRequest func(string, json.RawMessage) any) *frontClient {
	t.Helper()
	return openSSEAt(t, url, token, "2025-11-25", caps, onRequest)
}

// openSSEAt is openSSEWith for a client of revision version.
func openSSEAt(t testing.TB, url, token, version string, caps map[string]any, onRequest func(string, json.RawMessage) any) *frontClient {
	t.Helper()
	c := dialSSE(t, url, token, onRequest)
	c.initialize(version, caps)
	return c
}

// dialSSE opens the GET stream of an SSE session of the token's caller and waits for its endpoint event; the
// session is not initialised.
func dialSSE(t testing.TB, url, token string, onRequest func(string, json.RawMessage) any) *frontClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", url, err, resp)
	}
	var endpoint string
	c := newFrontClient(t, func(body []byte) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST %s: %d, want 202", body, resp.StatusCode)
		}
		return nil
	}, onRequest)
	endpoints := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if name, ok := strings.CutPrefix(line, "event: "); ok {
				event = name
				continue
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			if event == "endpoint" {
				endpoints <- strings.Split(url, "/sse")[0] + data
				continue
			}
			c.receive([]byte(data))
		}
	}()
	select {
	case endpoint = <-endpoints:
	case <-time.After(10 * time.Second):
		t.Fatal("no endpoint event")
	}
	return c
}

type sseAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// post sends a request and waits for its answer on the stream.
func (c *frontClient) post(method string, params any) sseAnswer {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan json.RawMessage, 1)
	c.answers[fmt.Sprint(id)] = ch
	c.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := c.send(body); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	select {
	case raw := <-ch:
		var a sseAnswer
		if err := json.Unmarshal(raw, &a); err != nil {
			c.t.Fatalf("%s: %q", method, raw)
		}
		return a
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s: no answer on the stream", method)
		return sseAnswer{}
	}
}

// heard is the statuses of task id that notifications/tasks/status told, in order.
func (c *frontClient) heard(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.statuses {
		if w.TaskID == id {
			out = append(out, w.Status)
		}
	}
	return out
}

// TestSSEDiscoverRefused: a server/discover sent on an SSE session the moment its endpoint event arrives is
// answered "method not found" on the stream (the legacy transport does not carry 2026-07-28, and the go-sdk may not
// yet know that of the session: it would offer it), and the session then initialises with an earlier revision.
func TestSSEDiscoverRefused(t *testing.T) {
	r := newTaskRig(t, 0)
	for i := range 5 {
		c := dialSSE(t, r.sse, aliceToken, nil)
		a := c.post("server/discover", map[string]any{"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{}}})
		if a.Error == nil || a.Error.Code != -32601 {
			t.Fatalf("session %d: server/discover = %s %+v, want the error -32601", i, a.Result, a.Error)
		}
		c.initialize("2025-11-25", map[string]any{})
		if a := c.post("tools/list", map[string]any{}); a.Error != nil {
			t.Fatalf("session %d: tools/list after the refused discover: %+v", i, a.Error)
		}
	}
}

// TestTasksOverSSE: over the legacy SSE transport, initialize advertises tasks; a task-augmented tools/call answers
// the task at once on the stream; tasks/get, tasks/list and tasks/result (which waits for the end) answer there
// too, and the session hears the task complete (notifications/tasks/status); another caller's SSE session finds
// none of it; a plain call still answers as the go-sdk does.
func TestTasksOverSSE(t *testing.T) {
	r := newTaskRig(t, 0)
	alice := openSSE(t, r.sse, aliceToken)

	a := alice.post("tools/call", map[string]any{"name": "back__slow", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}})
	var created struct {
		Task tasks.Wire `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &created) != nil || len(created.Task.TaskID) != 32 || created.Task.Status != persistence.TaskWorking {
		t.Fatalf("task-augmented tools/call over SSE = %s %+v", a.Result, a.Error)
	}
	id := created.Task.TaskID
	var got tasks.Wire
	if a := alice.post("tasks/get", map[string]any{"taskId": id}); a.Error != nil || json.Unmarshal(a.Result, &got) != nil || got.Status != persistence.TaskWorking {
		t.Fatalf("tasks/get = %s %+v", a.Result, a.Error)
	}
	if a := alice.post("tasks/list", map[string]any{}); a.Error != nil || !strings.Contains(string(a.Result), id) {
		t.Errorf("tasks/list = %s %+v, want the task", a.Result, a.Error)
	}
	bob := openSSE(t, r.sse, bobToken)
	if a := bob.post("tasks/get", map[string]any{"taskId": id}); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("bob's tasks/get of alice's task = %s %+v, want -32602", a.Result, a.Error)
	}

	waitFor(t, "the slow call at the backend", func() bool { return r.started.Load() >= 1 })
	result := make(chan sseAnswer, 1)
	go func() { result <- alice.post("tasks/result", map[string]any{"taskId": id}) }()
	close(r.release)
	res := <-result
	if res.Error != nil || !strings.Contains(string(res.Result), "slow done") || !strings.Contains(string(res.Result), tasks.RelatedTaskMetaKey) {
		t.Fatalf("tasks/result over SSE = %s %+v", res.Result, res.Error)
	}
	waitFor(t, "the completion heard on alice's stream", func() bool {
		heard := alice.heard(id)
		return len(heard) > 0 && heard[len(heard)-1] == persistence.TaskCompleted
	})
	if heard := bob.heard(id); len(heard) > 0 {
		t.Errorf("bob's stream heard alice's task: %v", heard)
	}

	// A plain call is the go-sdk's, as before.
	if a := alice.post("tools/call", map[string]any{"name": "back__echo", "arguments": map[string]any{"x": 1}}); a.Error != nil || !strings.Contains(string(a.Result), "echo") {
		t.Errorf("plain tools/call over SSE = %s %+v", a.Result, a.Error)
	}
}
