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

// sseSession speaks JSON-RPC over the legacy SSE transport by hand: POSTs to the endpoint the stream names, answers
// and notifications read from the stream.
type sseSession struct {
	t        *testing.T
	token    string
	endpoint string
	mu       sync.Mutex
	answers  map[string]chan json.RawMessage // by request id
	statuses []tasks.Wire                    // notifications/tasks/status heard
	next     int
}

func openSSE(t *testing.T, url, token string) *sseSession {
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
	s := &sseSession{t: t, token: token, answers: map[string]chan json.RawMessage{}}
	endpoint := make(chan string, 1)
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
				endpoint <- strings.Split(url, "/sse")[0] + data
				continue
			}
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params tasks.Wire      `json:"params"`
			}
			if json.Unmarshal([]byte(data), &msg) != nil {
				continue
			}
			s.mu.Lock()
			if msg.Method == "notifications/tasks/status" {
				s.statuses = append(s.statuses, msg.Params)
			} else if ch := s.answers[string(msg.ID)]; ch != nil && msg.Method == "" {
				ch <- json.RawMessage(data)
			}
			s.mu.Unlock()
		}
	}()
	select {
	case s.endpoint = <-endpoint:
	case <-time.After(10 * time.Second):
		t.Fatal("no endpoint event")
	}
	if a := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "sse-test", "version": "1"}}); a.Error != nil {
		t.Fatalf("initialize: %+v", a.Error)
	} else {
		var init struct {
			Capabilities map[string]any `json:"capabilities"`
		}
		if json.Unmarshal(a.Result, &init) != nil || init.Capabilities["tasks"] == nil {
			t.Fatalf("initialize over SSE = %s, want capabilities.tasks", a.Result)
		}
	}
	s.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized", "params": map[string]any{}})
	return s
}

type sseAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (s *sseSession) send(msg map[string]any) {
	s.t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, s.endpoint, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		s.t.Fatalf("POST %s: %d, want 202", body, resp.StatusCode)
	}
}

// post sends a request and waits for its answer on the stream.
func (s *sseSession) post(method string, params any) sseAnswer {
	s.t.Helper()
	s.mu.Lock()
	s.next++
	id := fmt.Sprint(s.next)
	ch := make(chan json.RawMessage, 1)
	s.answers[id] = ch
	s.mu.Unlock()
	s.send(map[string]any{"jsonrpc": "2.0", "id": s.next, "method": method, "params": params})
	select {
	case raw := <-ch:
		var a sseAnswer
		if err := json.Unmarshal(raw, &a); err != nil {
			s.t.Fatalf("%s: %q", method, raw)
		}
		return a
	case <-time.After(30 * time.Second):
		s.t.Fatalf("%s: no answer on the stream", method)
		return sseAnswer{}
	}
}

func (s *sseSession) heard(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, w := range s.statuses {
		if w.TaskID == id {
			out = append(out, w.Status)
		}
	}
	return out
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
