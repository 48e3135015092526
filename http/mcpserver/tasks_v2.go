package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// Tasks for 2026-07-28 clients: the tasks extension (io.modelcontextprotocol/tasks, SEP-2663), which the
// @modelcontextprotocol/ext-tasks client speaks. The revision has no sessions and the go-sdk's stateless handler
// knows no tasks, so, as for 2025-11-25 (tasks.go), these requests are answered in front of it (modernTasks):
//
//   - server/discover advertises capabilities.extensions["io.modelcontextprotocol/tasks"] = {} on the streamable
//     endpoint (taskCapability);
//   - a tools/call whose request declares the extension (_meta's clientCapabilities.extensions) of a tool whose
//     backend runs it as a task (execution.taskSupport "optional" or "required") is answered with a task
//     (CreateTaskResult, resultType "task"): task creation is the server's choice in this revision, and the
//     aggregator makes that choice where the backend says the tool is long. Other calls go to the go-sdk as plain
//     calls; a "required" tool called without the extension is refused with -32021 (missing client capability);
//   - tasks/get answers the task with its result, its JSON-RPC error, or its pending input requests inlined
//     (inputRequests, keyed by the input key the task's store row keeps: tasks.PendingInput); tasks/update hands
//     the client's inputResponses to the backend's requests waiting for them, on this node or, through the
//     cluster, on the node running the task (tasks.Manager.Answer); tasks/cancel cancels. All three need the
//     extension declared, and find only the caller's own tasks.
//
// The backend's requests during such a task (elicitation, sampling) cannot be sent to a client that has no session:
// they wait, stored on the task (input_required), for a tasks/update (taskInputRelay).

// Names of the tasks extension.
const (
	tasksExtension    = "io.modelcontextprotocol/tasks"
	methodTasksUpdate = "tasks/update"
	clientCapsMeta    = "io.modelcontextprotocol/clientCapabilities"
	// codeMissingCapability is the 2026-07-28 error of a request that needs a capability the client did not
	// declare (MISSING_REQUIRED_CLIENT_CAPABILITY).
	codeMissingCapability = -32021
)

// missingTasksCapability is the refusal of a request that needs the tasks extension from a client that did not
// declare it on the request.
func missingTasksCapability(why string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability: " + why,
		Data: mustJSON(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: struct{}{}}}})}
}

// modernParams are the parameters of a 2026-07-28 request as modernTasks reads them.
type modernParams struct {
	taskParams
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
	Meta           struct {
		Caps json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
	} `json:"_meta"`
}

// declaresTasks reports whether the request's client capabilities declare the tasks extension.
func (p *modernParams) declaresTasks() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(p.Meta.Caps, &caps) != nil {
		return false
	}
	ext, ok := caps.Extensions[tasksExtension]
	return ok && len(ext) > 0 && ext[0] == '{'
}

// modernTasks serves the tasks extension's requests of a 2026-07-28 client (see above) and passes everything else
// to next, the go-sdk. Only a body that names a tasks method or the extension is decoded.
func (s *Server) modernTasks(w http.ResponseWriter, r *http.Request, next http.Handler) {
	r.Header.Set(tasksMarker, "1") // for taskCapability's server/discover answer
	body, ok := peekBody(r, maxTaskRequestBytes)
	if !ok ||
		(!bytes.Contains(body, []byte(`"tasks/`)) && !bytes.Contains(body, []byte(tasksExtension+`"`)) &&
			!bytes.Contains(body, []byte(`"taskIds"`))) {
		next.ServeHTTP(w, r)
		return
	}
	var req rpcRequest
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 {
		next.ServeHTTP(w, r) // a batch, a notification, or not JSON: the go-sdk answers
		return
	}
	var p modernParams
	switch req.Method {
	case "subscriptions/listen": // task status on the listen stream (tasks_listen.go)
		if !s.serveTaskListen(w, r, req, next) {
			next.ServeHTTP(w, r)
		}
		return
	case "tools/call", methodTasksGet, methodTasksUpdate, methodTasksCancel:
	default:
		next.ServeHTTP(w, r) // tasks/list and tasks/result are not of this revision: the go-sdk refuses them
		return
	}
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
		writeRPC(w, req.ID, nil, invalidParams("params must be an object"))
		return
	}
	if req.Method == "tools/call" {
		if support := s.taskSupportOf(p.Name); !p.declaresTasks() || (support != "optional" && support != "required") {
			next.ServeHTTP(w, r) // a plain call (directAt refuses a "required" tool without the extension)
			return
		}
	} else if !p.declaresTasks() {
		writeRPC(w, req.ID, nil, missingTasksCapability(req.Method+" needs the tasks extension declared on the request"))
		return
	}
	res, rerr := s.serveModernTask(r, req.Method, &p)
	writeRPC(w, req.ID, res, rerr)
}

// serveModernTask answers one request of the tasks extension of the caller the HTTP request carries.
func (s *Server) serveModernTask(r *http.Request, method string, p *modernParams) (any, *jsonrpc.Error) {
	ctx := r.Context()
	id, ok := s.callerOf(ctx, nil)
	if !ok {
		e := failure(apierror.CodeUnauthorized, "A valid bearer token is required")
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "A valid bearer token is required", Data: mustJSON(e.StructuredContent)}
	}
	if !id.Allows(auth.ScopeClient) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Tasks need a token with the client scope"}
	}
	m := s.opts.Tasks
	if method == "tools/call" {
		var caps mcp.ClientCapabilities
		_ = json.Unmarshal(p.Meta.Caps, &caps)
		p.Task = json.RawMessage(`{}`) // the server's choice: the default TTL
		t, rerr := s.startTask(r, id, p.taskParams, func(ctx context.Context, ttl time.Duration) context.Context {
			if caps.Elicitation == nil && caps.Sampling == nil {
				return ctx // nothing to ask it: the backend's requests are refused
			}
			return actors.WithRelay(ctx, &taskInputRelay{s: s, caps: caps, task: tasks.TaskID(ctx), owner: tasks.Owner(id), ttl: ttl})
		})
		if rerr != nil {
			return nil, rerr
		}
		w := modernWire(t)
		w.ResultType = "task"
		return w, nil
	}
	if p.TaskID == "" {
		return nil, invalidParams("taskId is required")
	}
	t, err := m.GetOwn(ctx, id, p.TaskID)
	if err != nil {
		return nil, s.taskFailure(err, p.TaskID)
	}
	switch method {
	case methodTasksGet:
		w := modernWire(t)
		w.ResultType = "complete"
		return w, nil
	case methodTasksUpdate:
		// Each answer goes to the backend's request waiting for it, on this node or the one running the task
		// (tasks.Manager.Answer); answers to requests not pending (unknown, answered already) are ignored, as the
		// extension allows.
		for key, answer := range p.InputResponses {
			if _, err := m.Answer(ctx, t, key, answer); err != nil {
				s.log.Warn("a task's input answer did not reach the node running the task", "task", t.ID, "node", t.Node, "error", err)
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The answer could not be handed to the node running the task; send it again"}
			}
		}
		return map[string]string{"resultType": "complete"}, nil
	default: // tasks/cancel: acknowledged, also for a task that had ended (cancellation is cooperative)
		if _, err := m.Cancel(ctx, id, p.TaskID, true); err != nil && !isFinished(err) {
			return nil, s.taskFailure(err, p.TaskID)
		}
		return map[string]string{"resultType": "complete"}, nil
	}
}

func isFinished(err error) bool { return errors.Is(err, tasks.ErrFinished) }

// wireV2 is a task as the tasks extension shows it (Task, DetailedTask, CreateTaskResult).
type wireV2 struct {
	ResultType     string                     `json:"resultType,omitempty"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage,omitempty"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTLMs          int64                      `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs,omitempty"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests,omitempty"`
	Result         json.RawMessage            `json:"result,omitempty"`
	Error          json.RawMessage            `json:"error,omitempty"`
}

// modernWire is t as a DetailedTask: a completed task's CallToolResult (resultType "complete"), a failed task's
// JSON-RPC error, an input_required task's pending request under its input key.
func modernWire(t persistence.Task) wireV2 {
	v1 := tasks.ToWire(t)
	w := wireV2{TaskID: v1.TaskID, Status: v1.Status, StatusMessage: v1.StatusMessage, CreatedAt: v1.CreatedAt,
		LastUpdatedAt: v1.LastUpdatedAt, TTLMs: v1.TTL, PollIntervalMs: v1.PollInterval}
	switch t.Status {
	case persistence.TaskInputRequired:
		w.InputRequests = map[string]json.RawMessage{} // required in this status, even when none is stored
		if key, method, params, ok := tasks.PendingInput(t); ok {
			w.InputRequests[key] = mustJSON(map[string]any{"method": method, "params": inputParams(params)})
		}
	case persistence.TaskCompleted:
		var doc map[string]json.RawMessage
		if json.Unmarshal(t.Result, &doc) != nil || doc == nil {
			doc = map[string]json.RawMessage{"content": json.RawMessage(`[]`)}
		}
		if _, ok := doc["resultType"]; !ok {
			doc["resultType"] = json.RawMessage(`"complete"`)
		}
		w.Result = mustJSON(doc)
	case persistence.TaskFailed:
		var e struct {
			Code    *int64          `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data,omitempty"`
		}
		if json.Unmarshal(t.Error, &e) != nil || e.Code == nil {
			code := int64(jsonrpc.CodeInternalError)
			e.Code, e.Message, e.Data = &code, t.StatusMessage, nil
			if e.Message == "" {
				e.Message = "The task failed"
			}
		}
		w.Error = mustJSON(e)
	}
	return w
}

// taskInputRelay is the actors.Relay of a 2026-07-28 client's task: the backend's elicitation and sampling
// requests wait, stored on the task under their input key (the task's input watcher, tasks.InputKey), for the
// client's tasks/update; for at most the task's TTL, and no longer than the task runs.
type taskInputRelay struct {
	s     *Server
	caps  mcp.ClientCapabilities
	task  string
	owner string // the task's: only its answers are taken
	ttl   time.Duration
}

func (r *taskInputRelay) Supports(method string) bool {
	switch method {
	case "elicitation/create":
		return r.caps.Elicitation != nil
	case "sampling/createMessage":
		return r.caps.Sampling != nil
	}
	return false // roots/list is not an input of a task here: refused, as for a client without roots
}

func (r *taskInputRelay) Elicit(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	var out mcp.ElicitResult
	return &out, r.await(ctx, &out)
}

func (r *taskInputRelay) CreateMessage(ctx context.Context, _ *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	// The client answers sampling in the 2026-07-28 shape (a list of contents); the backend asked in the older
	// revision, which has one content.
	var with mcp.CreateMessageWithToolsResult
	if err := r.await(ctx, &with); err != nil {
		return nil, err
	}
	if len(with.Content) != 1 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("sampling answered with %d contents; the backend takes one", len(with.Content))}
	}
	return &mcp.CreateMessageResult{Meta: with.Meta, Content: with.Content[0], Model: with.Model, Role: with.Role, StopReason: with.StopReason}, nil
}

func (r *taskInputRelay) ListRoots(context.Context, *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "roots/list: not relayed to a task's client"}
}

// Log drops the backend's log messages: the extension sends none for a task.
func (r *taskInputRelay) Log(context.Context, *mcp.LoggingMessageParams) {}

// await waits for the client's answer to the request relayed with ctx and decodes it into out.
func (r *taskInputRelay) await(ctx context.Context, out any) error {
	key := tasks.InputKey(ctx)
	if key == "" || r.task == "" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the request has no input key"}
	}
	ch, stop := r.s.opts.Tasks.AwaitInput(r.owner, r.task, key)
	defer stop()
	timer := time.NewTimer(r.ttl)
	defer timer.Stop()
	select {
	case answer := <-ch:
		if err := json.Unmarshal(answer, out); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the client's response does not fit the request: " + err.Error()}
		}
		return nil
	case <-r.s.opts.Tasks.Done(r.task):
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task ended"}
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client did not answer within the task's TTL"}
	}
}

// inputParams are a pending request's params as the extension's schema takes them: an elicitation's empty mode
// (the go-sdk encodes its ElicitParams with one) is left out, form being the default.
func inputParams(params json.RawMessage) json.RawMessage {
	if !bytes.Contains(params, []byte(`"mode":""`)) {
		return params
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(params, &doc) != nil || doc == nil {
		return params
	}
	delete(doc, "mode")
	return mustJSON(doc)
}
