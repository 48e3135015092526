package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestFollowBackendTaskCancel: over the task wire, a task's call is sent as tools/call with the task's TTL, the
// backend's task is waited for with tasks/result, and when the call is cancelled the backend gets tasks/cancel for
// its task. The backend here is scripted at the JSON-RPC level (server-everything's task tools, used end to end in
// http/mcpserver's TestBackendTaskFollowed, keep no trace of a cancel that a test could read).
func TestFollowBackendTaskCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clientT, serverT := mcp.NewInMemoryTransports()
	peer, err := serverT.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	seen := make(chan *jsonrpc.Request, 16)
	go func() { // the backend: answers initialize with tasks, tools/list, the task-augmented call with a task
		for {
			m, err := peer.Read(ctx)
			if err != nil {
				return
			}
			req, ok := m.(*jsonrpc.Request)
			if !ok || !req.ID.IsValid() {
				continue
			}
			seen <- req
			var result string
			switch req.Method {
			case "initialize":
				result = `{"protocolVersion":"2025-11-25","serverInfo":{"name":"b","version":"1"},"capabilities":{"tools":{},
					"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}}}`
			case "tools/list":
				result = `{"tools":[{"name":"research","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},
					{"name":"plain","inputSchema":{"type":"object"}}]}`
			case "tools/call":
				result = `{"task":{"taskId":"backend-task-1","status":"working","ttl":60000,"createdAt":"2026-11-27T00:00:00Z","lastUpdatedAt":"2026-11-27T00:00:00Z"}}`
			case "tasks/result":
				continue // never ends: the call is cancelled meanwhile
			case "tasks/cancel":
				result = `{"taskId":"backend-task-1","status":"cancelled","ttl":60000,"createdAt":"2026-11-27T00:00:00Z","lastUpdatedAt":"2026-11-27T00:00:00Z"}`
			default:
				result = `{}`
			}
			_ = peer.Write(ctx, &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(result)})
		}
	}()

	w := newTaskWire()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, w.transport(clientT), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	next := func(method string) *jsonrpc.Request {
		t.Helper()
		for {
			select {
			case r := <-seen:
				if r.Method == method {
					return r
				}
			case <-ctx.Done():
				t.Fatalf("the backend never got %s", method)
			}
		}
	}
	next("initialize")
	if _, err := sess.ListTools(withWireWatch(ctx), nil); err != nil {
		t.Fatal(err)
	}
	if !w.supported("research") || w.supported("plain") || w.supported("nothing") {
		t.Fatalf("supported: research %v, plain %v", w.supported("research"), w.supported("plain"))
	}

	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := followBackendTask(cctx, w, sess, &mcp.CallToolParams{Name: "research", Arguments: map[string]any{"topic": "x"}}, 90*time.Second, nil)
		done <- err
	}()
	call := next("tools/call")
	var p struct {
		Name string `json:"name"`
		Task struct {
			TTL int64 `json:"ttl"`
		} `json:"task"`
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(call.Params, &p); err != nil || p.Name != "research" || p.Task.TTL != 90000 || p.Meta[rpcMetaKey] != nil {
		t.Fatalf("task-augmented call params = %s", call.Params)
	}
	res := next("tasks/result")
	if string(res.Params) != `{"taskId":"backend-task-1"}` {
		t.Errorf("tasks/result params = %s", res.Params)
	}
	stop()
	if c := next("tasks/cancel"); string(c.Params) != `{"taskId":"backend-task-1"}` {
		t.Errorf("tasks/cancel params = %s", c.Params)
	}
	if err := <-done; err == nil {
		t.Error("a cancelled follow answered a result")
	}
	// The tasks/result that was never answered is forgotten: plain answers pass the wire unread again.
	if n := w.watched.Load(); n != 0 {
		t.Errorf("the wire still awaits %d answers after the follow ended", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.wrapped) != 0 {
		t.Errorf("the wire holds %d marked requests after the follow ended", len(w.wrapped))
	}
}
