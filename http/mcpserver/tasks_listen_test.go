package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// listenEvent is one message of a subscriptions/listen stream.
type listenEvent struct {
	Method string `json:"method"`
	Params struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
		TaskID        string                     `json:"taskId"`
		Status        string                     `json:"status"`
		Meta          map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// openListen opens a 2026-07-28 subscriptions/listen stream asking for notifications, and sends its messages on the
// channel it returns until the stream ends (then the channel is closed).
func openListen(t *testing.T, url string, notifications map[string]any) <-chan listenEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return openListenCtx(ctx, t, url, notifications)
}

// openListenCtx is openListen for a stream that ctx closes.
func openListenCtx(ctx context.Context, t *testing.T, url string, notifications map[string]any) <-chan listenEvent {
	t.Helper()
	resp, err := postListen(ctx, url, notifications)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("subscriptions/listen: %v %+v", err, resp)
	}
	events := make(chan listenEvent, 64)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			var e listenEvent
			if ok && json.Unmarshal([]byte(data), &e) == nil && e.Method != "" {
				events <- e
			}
		}
	}()
	return events
}

// postListen sends a 2026-07-28 subscriptions/listen asking for notifications (the answer's body is the caller's to
// close).
func postListen(ctx context.Context, url string, notifications map[string]any) (*http.Response, error) {
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
		"params": map[string]any{"notifications": notifications, "_meta": meta}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	return http.DefaultClient.Do(req)
}

// TestTaskStatusOnListenStream: a 2026-07-28 client listens for its task's status by naming it on a
// subscriptions/listen stream (notifications.taskIds, as ext-tasks' contributeTaskFilterV2 writes it): the
// acknowledgement names the tasks agreed to (the caller's own: an unknown id is left out), the task's current status
// follows, and its cancellation arrives as notifications/tasks stamped with the stream's subscription id. The same
// holds on a stream that also takes tools/list_changed (the go-sdk's, whose acknowledgement gets the taskIds). A
// listen naming none of the caller's tasks ends at once, and a caller's 17th open listen is refused.
func TestTaskStatusOnListenStream(t *testing.T) {
	r, _ := newTasksEndpointRig(t)
	registerTaskBackend(t, r)
	url := r.mux.URL + "/mcp"
	withTasks := map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

	// A listen naming none of the caller's tasks is acknowledged with none, and ends.
	events := openListen(t, url, map[string]any{"taskIds": []string{"0123456789abcdef0123456789abcdef"}})
	if ack, ok := <-events; !ok || ack.Method != "notifications/subscriptions/acknowledged" || string(ack.Params.Notifications["taskIds"]) != "[]" {
		t.Errorf("listen for an unknown task: first message %+v (%v), want the acknowledgement with taskIds []", ack, ok)
	}
	for e := range events {
		t.Errorf("listen for an unknown task: then %+v, want the end", e)
	}

	// A caller holds at most 16 listens for task status on a node: the 17th is refused.
	a := modernPost(t, url, "tools/call", map[string]any{"name": "tb__countdown", "arguments": map[string]any{"ms": 600000, "text": "cap"}}, withTasks)
	var held struct {
		TaskID string `json:"taskId"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &held) != nil || held.TaskID == "" {
		t.Fatalf("task call = %s %+v", a.Result, a.Error)
	}
	listenCtx, stopListens := context.WithCancel(context.Background())
	for range 16 {
		if ack := <-openListenCtx(listenCtx, t, url, map[string]any{"taskIds": []string{held.TaskID}}); ack.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("listen = %+v, want the acknowledgement", ack)
		}
	}
	resp, err := postListen(listenCtx, url, map[string]any{"taskIds": []string{held.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	var refused rpcAnswer
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || json.NewDecoder(resp.Body).Decode(&refused) != nil ||
		refused.Error == nil || refused.Error.Code != -32600 {
		t.Errorf("17th listen = %s %+v, want the JSON error -32600", ct, refused.Error)
	}
	resp.Body.Close()
	stopListens()

	for _, tc := range []struct {
		name   string
		others map[string]any
	}{
		{"tasks only", map[string]any{}},
		{"with tools/list_changed", map[string]any{"toolsListChanged": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := modernPost(t, url, "tools/call", map[string]any{"name": "tb__countdown", "arguments": map[string]any{"ms": 600000, "text": "x"}}, withTasks)
			var created struct {
				ResultType string `json:"resultType"`
				TaskID     string `json:"taskId"`
			}
			if a.Error != nil || json.Unmarshal(a.Result, &created) != nil || created.ResultType != "task" || created.TaskID == "" {
				t.Fatalf("task call = %s %+v", a.Result, a.Error)
			}
			notifications := map[string]any{"taskIds": []string{created.TaskID, "0123456789abcdef0123456789abcdef"}}
			for k, v := range tc.others {
				notifications[k] = v
			}
			events := openListen(t, url, notifications)
			next := func(what string) listenEvent {
				t.Helper()
				select {
				case e, ok := <-events:
					if !ok {
						t.Fatalf("the listen stream ended before the %s", what)
					}
					return e
				case <-time.After(30 * time.Second):
					t.Fatalf("no %s on the listen stream", what)
					return listenEvent{}
				}
			}
			ack := next("acknowledgement")
			var ids []string
			if ack.Method != "notifications/subscriptions/acknowledged" || json.Unmarshal(ack.Params.Notifications["taskIds"], &ids) != nil ||
				len(ids) != 1 || ids[0] != created.TaskID {
				t.Fatalf("first message = %+v, want the acknowledgement naming only our task", ack)
			}
			if len(tc.others) > 0 && string(ack.Params.Notifications["toolsListChanged"]) != "true" {
				t.Errorf("acknowledgement = %+v, want toolsListChanged too", ack.Params.Notifications)
			}
			sub := string(ack.Params.Meta["io.modelcontextprotocol/subscriptionId"])
			cur := next("current status")
			for cur.Method == "notifications/tools/list_changed" { // the registration's, on the go-sdk's stream
				cur = next("current status")
			}
			if cur.Method != "notifications/tasks" || cur.Params.TaskID != created.TaskID ||
				cur.Params.Status != persistence.TaskWorking || string(cur.Params.Meta["io.modelcontextprotocol/subscriptionId"]) != sub {
				t.Fatalf("second message = %+v, want the task working, subscription %s", cur, sub)
			}
			if a := modernPost(t, url, "tasks/cancel", map[string]any{"taskId": created.TaskID}, withTasks); a.Error != nil {
				t.Fatalf("tasks/cancel: %+v", a.Error)
			}
			for {
				e := next("cancellation")
				if e.Method == "notifications/tasks" && e.Params.Status == persistence.TaskCancelled {
					if e.Params.TaskID != created.TaskID || string(e.Params.Meta["io.modelcontextprotocol/subscriptionId"]) != sub {
						t.Errorf("cancellation = %+v", e)
					}
					break
				}
			}
		})
	}
}
