package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestBackendTaskFollowed: server-everything's simulate-research-query runs only as a task (taskSupport
// "required": a plain call is refused). Run as a task through /mcp, the aggregator calls it with a task and follows
// the backend's task to its end; the ambiguous query's clarification (elicitation/create, sent by the backend while
// its task is input_required) reaches the client session that started the task, whose answer the report shows.
// Over stdio and streamable HTTP.
func TestBackendTaskFollowed(t *testing.T) {
	for _, transport := range []string{persistence.TransportSTDIO, persistence.TransportHTTP} {
		t.Run(transport, func(t *testing.T) {
			r := newBackendTaskRig(t, transport)
			s := openElicitingRaw(t, r.mux.URL+"/mcp")

			// Without a task, the tool is refused (-32601), as its backend requires a task.
			if a := s.post("tools/call", map[string]any{"name": "every__simulate-research-query", "arguments": map[string]any{"topic": "go"}}, false); a.Error == nil || a.Error.Code != -32601 {
				t.Fatalf("plain call = %s %+v, want -32601", a.Result, a.Error)
			}

			// An ambiguous query: the backend asks which interpretation; the client answers "snake".
			asked := make(chan string, 1)
			stop := s.answerElicitations(t, map[string]any{"interpretation": "snake"}, asked)
			defer stop()
			created, a := s.start("every__simulate-research-query", map[string]any{"topic": "python", "ambiguous": true})
			if a.Error != nil || created.TaskID == "" {
				t.Fatalf("task-augmented call = %s %+v", a.Result, a.Error)
			}
			res := s.post("tasks/result", map[string]any{"taskId": created.TaskID}, false)
			var payload struct {
				Content []struct{ Text string } `json:"content"`
				Meta    map[string]any          `json:"_meta"`
			}
			if res.Error != nil || json.Unmarshal(res.Result, &payload) != nil || len(payload.Content) == 0 {
				t.Fatalf("tasks/result = %s %+v", res.Result, res.Error)
			}
			report := payload.Content[0].Text
			if !strings.Contains(report, "# Research Report: python (snake)") || !strings.Contains(report, "Stage 4: Generating report") {
				t.Errorf("report = %q, want the backend task's report with the client's clarification", report)
			}
			select {
			case msg := <-asked:
				if !strings.Contains(msg, "python") {
					t.Errorf("elicitation message = %q", msg)
				}
			default:
				t.Error("the client never saw the backend's elicitation")
			}
			if rel, _ := payload.Meta[tasks.RelatedTaskMetaKey].(map[string]any); rel["taskId"] != created.TaskID {
				t.Errorf("tasks/result _meta = %v, want our task (not the backend's)", payload.Meta)
			}
			if got, _ := s.task("tasks/get", created.TaskID); got.Status != persistence.TaskCompleted {
				t.Errorf("task = %+v, want completed", got)
			}

			// A task cancelled while the backend's runs: ours is cancelled, and the backend's call ends.
			long, a := s.start("every__simulate-research-query", map[string]any{"topic": "rust"})
			if a.Error != nil {
				t.Fatalf("second task: %+v", a.Error)
			}
			if got, a := s.task("tasks/cancel", long.TaskID); a.Error != nil || got.Status != persistence.TaskCancelled {
				t.Fatalf("tasks/cancel = %+v %+v", got, a.Error)
			}
			waitFor(t, "the followed call to end", func() bool { return r.tasks.Running() == 0 })
		})
	}
}

type backendTaskRig struct {
	*rig
	tasks *tasks.Manager
}

func newBackendTaskRig(t *testing.T, transport string) backendTaskRig {
	r, mgr := newTasksEndpointRig(t)
	if transport == persistence.TransportSTDIO {
		cmd, args := peertest.EverythingStdio(t)
		r.register(t, "every", map[string]any{"command": cmd, "args": args}, transport)
	} else {
		p := peertest.StartEverything(t, "streamableHttp")
		r.register(t, "every", map[string]any{"base_url": p.URL()}, transport)
	}
	waitFor(t, "every's task tool routable", func() bool {
		_, ok := r.sys.Routes().Tool("every.simulate-research-query")
		return ok && len(r.sys.Routes().Callable()) > 0
	})
	return backendTaskRig{rig: r, tasks: mgr}
}

// openElicitingRaw is openRaw for a client that declares elicitation.
func openElicitingRaw(t *testing.T, url string) *rawSession {
	s := &rawSession{t: t, url: url}
	a := s.post("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"elicitation": map[string]any{}},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}}, false)
	if a.Error != nil || s.sid == "" {
		t.Fatalf("initialize: %+v (session %q)", a, s.sid)
	}
	s.post("notifications/initialized", nil, true)
	return s
}

// answerElicitations opens the session's GET stream and answers every elicitation/create on it with accept and
// content, sending each request's message to asked; stop closes the stream.
func (s *rawSession) answerElicitations(t *testing.T, content map[string]any, asked chan<- string) (stop func()) {
	return s.answerElicitationsAfter(t, content, asked, nil)
}

// answerElicitationsAfter is answerElicitations that answers each request only once release is closed (nil: at
// once).
func (s *rawSession) answerElicitationsAfter(t *testing.T, content map[string]any, asked chan<- string, release <-chan struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", s.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Message string `json:"message"`
					Meta    map[string]struct {
						TaskID string `json:"taskId"`
					} `json:"_meta"`
				} `json:"params"`
			}
			if json.Unmarshal([]byte(line), &m) != nil || m.Method != "elicitation/create" {
				continue
			}
			msg := m.Params.Message
			if rel, ok := m.Params.Meta[tasks.RelatedTaskMetaKey]; ok {
				msg += " [task " + rel.TaskID + "]" // the task the request is tied to
			}
			select {
			case asked <- msg:
			default:
			}
			if release != nil {
				select {
				case <-release:
				case <-ctx.Done():
					return
				}
			}
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"action": "accept", "content": content}})
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			r.Header.Set("Mcp-Session-Id", s.sid)
			r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			if res, err := http.DefaultClient.Do(r); err == nil {
				res.Body.Close()
			}
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

// registerTaskBackend starts the TypeScript SDK task backend (testdata/peers/task-backend.mjs: countdown, quick,
// plain) and registers it as "tb", over streamable HTTP.
func registerTaskBackend(t *testing.T, r *rig) {
	t.Helper()
	backend := peertest.StartTaskBackend(t)
	r.register(t, "tb", map[string]any{"base_url": backend.URL()}, persistence.TransportHTTP)
	waitFor(t, "tb's tools routable", func() bool {
		_, ok := r.sys.Routes().Tool("tb.countdown")
		return ok && len(r.sys.Routes().Callable()) > 0
	})
}

// wantTaskSupport checks the execution.taskSupport of the tools named in want (tool -> taskSupport) in the
// tools/list answer list gives (its result, and whether it answered without error), once tb's tools are listed.
func wantTaskSupport(t *testing.T, list func() (json.RawMessage, bool), want map[string]string) {
	t.Helper()
	var listed struct {
		Tools []struct {
			Name      string         `json:"name"`
			Execution map[string]any `json:"execution"`
		} `json:"tools"`
	}
	waitFor(t, "tb's tools listed", func() bool {
		res, ok := list()
		return ok && json.Unmarshal(res, &listed) == nil && strings.Contains(string(res), "tb__plain")
	})
	want = maps.Clone(want)
	for _, tool := range listed.Tools {
		if w, ok := want[tool.Name]; ok {
			if got, _ := tool.Execution["taskSupport"].(string); got != w {
				t.Errorf("tool %s: execution %v, want taskSupport %q", tool.Name, tool.Execution, w)
			}
			delete(want, tool.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tools not listed: %v", want)
	}
}

// TestTaskSupportOverMCP: the backend's execution.taskSupport of each tool (the TypeScript SDK task backend:
// countdown "required", quick "optional", plain "forbidden") reaches tools/list on /mcp, which the go-sdk alone
// would drop: "required" and "optional" as the backend said, "forbidden" as "optional" (the aggregator holds the
// task around the plain call). A plain call of the required tool is refused with -32601 (the 2025-11-25 tasks
// revision: servers MUST); as a task, it runs as the backend's task; the forbidden one runs as a task held by the
// aggregator.
func TestTaskSupportOverMCP(t *testing.T) {
	r, _ := newTasksEndpointRig(t)
	registerTaskBackend(t, r)
	s := openElicitingRaw(t, r.mux.URL+"/mcp")
	wantTaskSupport(t, func() (json.RawMessage, bool) {
		a := s.post("tools/list", map[string]any{}, false)
		return a.Result, a.Error == nil
	}, map[string]string{"tb__countdown": "required", "tb__quick": "optional", "tb__plain": "optional"})

	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		asTask   bool
		wantCode int64
		wantText string
	}{
		{"required without a task", "tb__countdown", map[string]any{"ms": 10, "text": "a"}, false, -32601, ""},
		{"required as a task", "tb__countdown", map[string]any{"ms": 10, "text": "a"}, true, 0, "countdown done: a"},
		{"optional without a task", "tb__quick", map[string]any{"text": "b"}, false, 0, "quick: b"},
		{"optional as a task", "tb__quick", map[string]any{"text": "b"}, true, 0, "quick: b"},
		{"forbidden without a task", "tb__plain", map[string]any{"text": "c"}, false, 0, "plain: c"},
		{"forbidden as a task held here", "tb__plain", map[string]any{"text": "c"}, true, 0, "plain: c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := s.post("tools/call", map[string]any{"name": tc.tool, "arguments": tc.args}, false)
			if tc.asTask {
				created, ca := s.start(tc.tool, tc.args)
				if ca.Error != nil || created.TaskID == "" {
					t.Fatalf("task-augmented call = %s %+v", ca.Result, ca.Error)
				}
				a = s.post("tasks/result", map[string]any{"taskId": created.TaskID}, false)
			}
			if tc.wantCode != 0 {
				// The go-sdk writes its own message for -32601 ("method not found: \"tools/call\"").
				if a.Error == nil || a.Error.Code != tc.wantCode {
					t.Fatalf("answer = %s %+v, want error %d", a.Result, a.Error, tc.wantCode)
				}
				return
			}
			if a.Error != nil || !strings.Contains(string(a.Result), tc.wantText) || strings.Contains(string(a.Result), `"isError":true`) {
				t.Errorf("answer = %s %+v, want %q", a.Result, a.Error, tc.wantText)
			}
		})
	}
}

// TestTaskInputRequiredOverMCP: while the backend's task waits on the client's answer to its elicitation (server-
// everything's ambiguous simulate-research-query), our task is input_required, with the backend's request stored on
// it: another session of the same caller sees the status and the question through tasks/get; once the client that
// started the task answers, the task works again and completes with the answer in its result, the stored request
// cleared. The relayed request is tied to our task (related-task _meta), not the backend's. Over stdio and
// streamable HTTP.
func TestTaskInputRequiredOverMCP(t *testing.T) {
	for _, transport := range []string{persistence.TransportSTDIO, persistence.TransportHTTP} {
		t.Run(transport, func(t *testing.T) {
			r := newBackendTaskRig(t, transport)
			s := openElicitingRaw(t, r.mux.URL+"/mcp")
			asked, release := make(chan string, 1), make(chan struct{})
			stop := s.answerElicitationsAfter(t, map[string]any{"interpretation": "snake"}, asked, release)
			defer stop()
			created, a := s.start("every__simulate-research-query", map[string]any{"topic": "python", "ambiguous": true})
			if a.Error != nil || created.TaskID == "" {
				t.Fatalf("task-augmented call = %s %+v", a.Result, a.Error)
			}
			select {
			case msg := <-asked:
				if !strings.Contains(msg, "[task "+created.TaskID+"]") {
					t.Errorf("elicitation %q: want it tied to our task %s (related-task _meta)", msg, created.TaskID)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the client never saw the backend's elicitation")
			}

			// Another session of the same caller sees the task waiting on its input.
			other := openElicitingRaw(t, r.mux.URL+"/mcp")
			var got tasks.Wire
			waitFor(t, "the task input_required", func() bool {
				got, _ = other.task("tasks/get", created.TaskID)
				return got.Status == persistence.TaskInputRequired
			})
			if !strings.Contains(got.StatusMessage, "python") {
				t.Errorf("status message = %q, want the backend's question", got.StatusMessage)
			}
			stored, err := r.store.GetTask(context.Background(), created.TaskID)
			if err != nil || !strings.Contains(string(stored.InputRequest), `"elicitation/create"`) || !strings.Contains(string(stored.InputRequest), "python") {
				t.Errorf("stored input request = %s, %v", stored.InputRequest, err)
			}

			close(release) // the client answers
			res := other.post("tasks/result", map[string]any{"taskId": created.TaskID}, false)
			if res.Error != nil || !strings.Contains(string(res.Result), "python (snake)") {
				t.Fatalf("tasks/result = %s %+v", res.Result, res.Error)
			}
			stored, err = r.store.GetTask(context.Background(), created.TaskID)
			if err != nil || stored.Status != persistence.TaskCompleted || stored.InputRequest != nil {
				t.Errorf("stored task after the answer = %s %s, %v", stored.Status, stored.InputRequest, err)
			}
		})
	}
}

// end ends the session (DELETE), as a client that closes it.
func (s *rawSession) end() {
	req, _ := http.NewRequest(http.MethodDelete, s.url, nil)
	req.Header.Set("Mcp-Session-Id", s.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// TestTaskInputResentToOwnerSession: the backend's elicitation of a task (server-everything's ambiguous
// simulate-research-query) goes to the session that started the task; that session goes away (DELETE) without
// answering; the request is sent again to another session of the same caller (one that read the task), whose
// answer reaches the backend: the task completes with it.
func TestTaskInputResentToOwnerSession(t *testing.T) {
	r := newBackendTaskRig(t, persistence.TransportSTDIO)
	first := openElicitingRaw(t, r.mux.URL+"/mcp")
	askedFirst, never := make(chan string, 1), make(chan struct{})
	stopFirst := first.answerElicitationsAfter(t, map[string]any{"interpretation": "snake"}, askedFirst, never)
	created, a := first.start("every__simulate-research-query", map[string]any{"topic": "python", "ambiguous": true})
	if a.Error != nil || created.TaskID == "" {
		t.Fatalf("task-augmented call = %s %+v", a.Result, a.Error)
	}
	select {
	case <-askedFirst:
	case <-time.After(30 * time.Second):
		t.Fatal("the starting session never saw the backend's elicitation")
	}

	second := openElicitingRaw(t, r.mux.URL+"/mcp")
	if got, _ := second.task("tasks/get", created.TaskID); got.Status != persistence.TaskInputRequired {
		t.Errorf("task seen from the second session = %+v, want input_required", got)
	}
	askedSecond := make(chan string, 1)
	stopSecond := second.answerElicitations(t, map[string]any{"interpretation": "comedy"}, askedSecond)
	defer stopSecond()

	first.end() // the session that got the request goes away without answering
	stopFirst()
	select {
	case msg := <-askedSecond:
		if !strings.Contains(msg, "python") || !strings.Contains(msg, "[task "+created.TaskID+"]") {
			t.Errorf("request re-sent to the second session = %q, want the backend's question tied to our task", msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pending request never reached the owner's other session")
	}
	res := second.post("tasks/result", map[string]any{"taskId": created.TaskID}, false)
	if res.Error != nil || !strings.Contains(string(res.Result), "python (comedy)") {
		t.Fatalf("tasks/result = %s %+v, want the second session's answer in the result", res.Result, res.Error)
	}
}
