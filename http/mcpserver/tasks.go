package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/persistence"
)

// Tasks on /mcp (MCP 2025-11-25, experimental in core; issue 30). The go-sdk knows nothing of tasks: it drops a
// tools/call's "task" parameter and refuses the tasks/* methods. So the streamable HTTP endpoint answers them
// itself, in front of the go-sdk (taskRequests), for the sessions it knows:
//
//   - a tools/call with params.task creates a task of the caller (its subject; the open-task cap applies), answers
//     at once with CreateTaskResult, and runs the call through the gateway in the background (the aggregator
//     holds the task around a normal backend call);
//   - tasks/get, tasks/result (which waits for the end, as the revision says), tasks/list and tasks/cancel read
//     the store, so they answer on any session, any node, and after a restart. A task is found only by the
//     subject that created it.
//
// The capability is advertised (capabilities.tasks) in the initialize answer by taskCapability, for streamable
// HTTP sessions, and for SSE (tasks_sse.go) and stdio (tasks_stdio.go) sessions through their handle. Status
// notifications are written into the sessions' streams by the endpoint itself (tasks_notify.go): the go-sdk sends
// no notification it does not know, and every tasks/* answer here is a plain JSON response.

// Methods of the tasks revision.
const (
	methodTasksGet    = "tasks/get"
	methodTasksResult = "tasks/result"
	methodTasksList   = "tasks/list"
	methodTasksCancel = "tasks/cancel"
)

// tasksMarker is the header taskRequests sets on the requests it passes to the go-sdk, so that taskCapability and
// taskTools offer tasks to the streamable HTTP sessions it serves them to (a client's own value is removed first;
// SSE and stdio sessions are known by the handle in their context instead: tasks_front.go).
const tasksMarker = "X-Mcpgw-Tasks-Endpoint"

// maxTaskRequestBytes bounds the body taskRequests reads to look at a request; a larger one goes to the go-sdk
// untouched (the listener's body limit applies there).
const maxTaskRequestBytes = 4 << 20

// taskListPage is how many tasks one tasks/list answer holds.
const taskListPage = 100

// rpcRequest is a JSON-RPC request as taskRequests reads it.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// taskParams are the parameters of every tasks/* method and of a task-augmented tools/call.
type taskParams struct {
	TaskID    string          `json:"taskId"`
	Cursor    string          `json:"cursor"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Task      json.RawMessage `json:"task"`
}

// taskMeta is a task-augmented request's task parameter (TTL in milliseconds).
type taskMeta struct {
	TTL *float64 `json:"ttl"`
}

// taskCapability adds capabilities.tasks to the initialize answer of a session (streamable HTTP, SSE, stdio) that
// agreed on the tasks revision (2025-11-25).
func (s *Server) taskCapability(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == "server/discover" && err == nil {
			// A 2026-07-28 client learns of the tasks extension here (tasks_v2.go), on the streamable endpoint.
			if d, ok := res.(*mcp.DiscoverResult); ok && d != nil && d.Capabilities != nil && req.GetExtra() != nil &&
				req.GetExtra().Header.Get(tasksMarker) != "" {
				cp := *d
				caps := *d.Capabilities
				caps.Extensions = maps.Clone(caps.Extensions)
				if caps.Extensions == nil {
					caps.Extensions = map[string]any{}
				}
				caps.Extensions[tasksExtension] = struct{}{}
				cp.Capabilities = &caps
				return &cp, nil
			}
		}
		if method != "initialize" || err != nil {
			return res, err
		}
		init, ok := res.(*mcp.InitializeResult)
		if !ok || init == nil || !servesTasks(ctx, req) || init.ProtocolVersion != "2025-11-25" {
			return res, err
		}
		if f := frontSessionOf(ctx); f != nil { // an SSE or stdio session: its tools/list shows taskSupport too
			f.mu.Lock()
			f.agreed = true
			f.mu.Unlock()
		}
		return &tasksInitResult{InitializeResult: init}, nil
	}
}

// tasksInitResult is an initialize answer with the tasks capability: list, cancel, and task-augmented tools/call.
type tasksInitResult struct {
	*mcp.InitializeResult
}

func (r *tasksInitResult) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(r.InitializeResult)
	if err != nil {
		return nil, err
	}
	return withTaskCaps(raw)
}

// withTaskCaps is the initialize answer raw with capabilities.tasks.
func withTaskCaps(raw json.RawMessage) (json.RawMessage, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var caps map[string]any
	if err := json.Unmarshal(doc["capabilities"], &caps); err != nil || caps == nil {
		caps = map[string]any{}
	}
	caps["tasks"] = map[string]any{"list": struct{}{}, "cancel": struct{}{},
		"requests": map[string]any{"tools": map[string]any{"call": struct{}{}}}}
	var err error
	if doc["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// optionalTask is the execution of a tool that may be called as a task (its backend declared nothing).
var optionalTask = json.RawMessage(`{"taskSupport":"optional"}`)

// taskSupportOf is the execution.taskSupport its backend declared for the tool asked names (an alias, a
// namespaced or an original name), as stored with its definition; "" when it declared none (or the name does not
// resolve).
func (s *Server) taskSupportOf(asked string) string {
	s.mu.Lock()
	e, ok := s.exposed[asked]
	s.mu.Unlock()
	name := asked
	if ok {
		name = e.name
	}
	rt := s.gw.Routes()
	entry, found := rt.Tool(name)
	if !found {
		if route, err := rt.ResolveIn(s.opts.Scope, asked, ""); err == nil {
			entry, found = rt.Tool(route.Name)
		}
	}
	if !found || !bytes.Contains(entry.Definition, []byte(`"taskSupport"`)) {
		return ""
	}
	var def struct {
		Execution struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	}
	_ = json.Unmarshal(entry.Definition, &def)
	return def.Execution.TaskSupport
}

// requiresTaskError is the refusal of a plain call (no task) of a tool whose backend runs it only as a task
// (execution.taskSupport "required"): the tasks revision says servers MUST answer -32601 then. nil: the call may go
// on. (The go-sdk sends every -32601 with a message of its own, "method not found: \"tools/call\"".)
func (s *Server) requiresTaskError(asked string) *jsonrpc.Error {
	if s.taskSupportOf(asked) != "required" {
		return nil
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: "Tool " + asked + ` requires task augmentation (execution.taskSupport "required"): call it as a task`}
}

// taskTools adds execution.taskSupport to the backend tools of a tools/list answer on a 2025-11-25 session
// (streamable HTTP, SSE, stdio: tasksSession), which clients read to decide whether to call a tool as a task: the backend's own declaration when its
// definition has one ("required", "optional"; the server actor keeps it with the definition, the go-sdk drops it),
// else "optional" (the aggregator holds the task around a plain call, also of a tool whose backend says
// "forbidden"). The go-sdk's Tool has
// no execution field, so the answer is rewritten as it is encoded (tasksToolsResult).
func (s *Server) taskTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/list" || err != nil {
			return res, err
		}
		list, ok := res.(*mcp.ListToolsResult)
		if !ok || list == nil || !tasksSession(ctx, req) {
			return res, err
		}
		names := make(map[string]string, len(list.Tools)) // alias -> canonical name
		s.mu.Lock()
		for _, t := range list.Tools {
			if e, ok := s.exposed[t.Name]; ok {
				names[t.Name] = e.name
			}
		}
		s.mu.Unlock()
		rt := s.gw.Routes()
		exec := make(map[string]json.RawMessage, len(names))
		for alias, name := range names {
			exec[alias] = optionalTask
			if e, ok := rt.Tool(name); ok && bytes.Contains(e.Definition, []byte(`"execution"`)) {
				var def struct {
					Execution json.RawMessage `json:"execution"`
				}
				// The backend's execution is passed on, but for "forbidden": the aggregator holds a task around
				// the backend's plain call, so the tool may run as a task here all the same ("optional").
				if json.Unmarshal(e.Definition, &def) == nil && len(def.Execution) > 0 && def.Execution[0] == '{' &&
					!bytes.Contains(def.Execution, []byte(`"forbidden"`)) {
					exec[alias] = def.Execution
				}
			}
		}
		return &tasksToolsResult{ListToolsResult: list, exec: exec}, nil
	}
}

// tasksSession reports whether req is of a session that agreed on the tasks revision: a streamable session's
// request (marked, with its 2025-11-25 protocol header), or an SSE or stdio session's whose initialize agreed on it.
func tasksSession(ctx context.Context, req mcp.Request) bool {
	if f := frontSessionOf(ctx); f != nil {
		return f.tasksAgreed()
	}
	extra := req.GetExtra()
	return extra != nil && extra.Header.Get(tasksMarker) != "" && extra.Header.Get("Mcp-Protocol-Version") == "2025-11-25"
}

// tasksToolsResult is a tools/list answer whose tools get their execution as encoded.
type tasksToolsResult struct {
	*mcp.ListToolsResult
	exec map[string]json.RawMessage // by tool name
}

func (r *tasksToolsResult) MarshalJSON() ([]byte, error) {
	// Each tool is encoded as the go-sdk would, its execution spliced in before its closing brace (the go-sdk's Tool
	// has no such field, and always a name: never "{}"), and the answer encoded around them; decoding the whole
	// answer again to add the field cost twice the allocations.
	tools := make([]json.RawMessage, len(r.Tools))
	for i, t := range r.Tools {
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if t != nil {
			if e, ok := r.exec[t.Name]; ok && len(raw) > 2 && raw[len(raw)-1] == '}' {
				raw = append(append(append(raw[:len(raw)-1:len(raw)-1], `,"execution":`...), e...), '}')
			}
		}
		tools[i] = raw
	}
	return json.Marshal(struct {
		*mcp.ListToolsResult
		Tools []json.RawMessage `json:"tools"` // shadows the embedded result's
	}{r.ListToolsResult, tools})
}

// taskRequests serves the task methods (and task-augmented tools/call) of known streamable sessions and passes
// everything else to next: a request without a session, of an unknown one, or of the 2026-07-28 revision goes to
// the go-sdk, which refuses the task methods. Only a body that mentions "task" is decoded here.
func (s *Server) taskRequests(next http.Handler) http.Handler {
	if s.opts.Tasks == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(tasksMarker)
		if sid := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodGet && sid != "" {
			s.streams.serve(next, w, r, sid) // the session's stream, for notifications/tasks/status (tasks_notify.go)
			return
		}
		if r.Method == http.MethodPost && isModern(r) {
			s.modernTasks(w, r, next) // the tasks extension of 2026-07-28 (tasks_v2.go)
			return
		}
		if r.Method != http.MethodPost || r.ContentLength > maxTaskRequestBytes {
			next.ServeHTTP(w, r)
			return
		}
		r.Header.Set(tasksMarker, "1") // for taskCapability and taskTools, which the go-sdk runs
		body, ok := peekBody(r, maxTaskRequestBytes)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		var req rpcRequest
		if !bytes.Contains(body, []byte(`"task`)) || json.Unmarshal(body, &req) != nil || len(req.ID) == 0 {
			next.ServeHTTP(w, r) // a batch, a notification, or not JSON: the go-sdk answers
			return
		}
		sid := r.Header.Get("Mcp-Session-Id")
		if !isTaskRequest(req) || sid == "" || !s.sessions.known(sid) {
			next.ServeHTTP(w, r) // the go-sdk refuses an unknown session, or the method
			return
		}
		var p taskParams
		if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
			writeRPC(w, req.ID, nil, invalidParams("params must be an object"))
			return
		}
		res, rerr := s.serveTask(r, req.Method, p)
		writeRPC(w, req.ID, res, rerr)
	})
}

// writeRPC answers one JSON-RPC response as application/json.
// peekBody reads r's body when it is at most limit bytes, and gives it back to r to be read again; false: the
// body is larger (by its declared length or as read) or could not be read, and r reads the same bytes anyway.
func peekBody(r *http.Request, limit int64) ([]byte, bool) {
	if r.ContentLength > limit {
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	return body, err == nil && int64(len(body)) <= limit
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, rerr *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rpcAnswer(id, result, rerr))
}

func invalidParams(msg string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

// taskFailure is a task manager failure as a JSON-RPC error: an unknown (or another caller's) task and a
// finished one are invalid params, as the revision says; the cap and the store's outage carry the shared error
// body in data.
func (s *Server) taskFailure(err error, id string) *jsonrpc.Error {
	e := apierror.TaskError(err, id, s.opts.Tasks.MaxOpen())
	switch e.Code {
	case apierror.CodeTaskNotFound, apierror.CodeTaskFinished:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: e.Message(), Data: mustJSON(e.Body())}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Message(), Data: mustJSON(e.Body())}
}

// serveTask answers one task method (or a task-augmented tools/call) of the caller the HTTP request carries.
func (s *Server) serveTask(r *http.Request, method string, p taskParams) (any, *jsonrpc.Error) {
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
	sid := r.Header.Get("Mcp-Session-Id")
	// A session of the owner, for its tasks' requests (tasks_relay.go); noted before the Manager hears of the owner,
	// so that the catch-up of an owner new to this node (tasks.Manager) finds this session to ask (tasks_remote.go).
	s.noteTaskSession(sid, tasks.Owner(id))
	switch method {
	case "tools/call":
		relayTo := s.sessionByID(sid)
		t, rerr := s.startTask(r, id, p, func(ctx context.Context, ttl time.Duration) context.Context {
			// The backend's requests meanwhile (input_required: elicitation, sampling) go to the session that
			// started the task, or, when it went away, to another session of the task's owner.
			if relayTo != nil {
				ctx = s.withOwnerRelay(ctx, relayTo, tasks.Owner(id), ttl)
			}
			return ctx
		})
		if rerr != nil {
			return nil, rerr
		}
		return map[string]any{"task": tasks.ToWire(t)}, nil
	case methodTasksList:
		offset := 0
		if p.Cursor != "" {
			n, err := strconv.Atoi(p.Cursor)
			if err != nil || n < 0 {
				return nil, invalidParams("Invalid cursor")
			}
			offset = n
		}
		list, more, err := m.List(ctx, id, false, taskListPage, offset)
		if err != nil {
			return nil, s.taskFailure(err, "")
		}
		out := struct {
			Tasks      []tasks.Wire `json:"tasks"`
			NextCursor string       `json:"nextCursor,omitempty"`
		}{Tasks: make([]tasks.Wire, 0, len(list))}
		for _, t := range list {
			out.Tasks = append(out.Tasks, tasks.ToWire(t))
		}
		if more {
			out.NextCursor = strconv.Itoa(offset + len(list))
		}
		return out, nil
	}
	if p.TaskID == "" {
		return nil, invalidParams("taskId is required")
	}
	switch method {
	case methodTasksGet:
		t, err := m.GetOwn(ctx, id, p.TaskID)
		if err != nil {
			return nil, s.taskFailure(err, p.TaskID)
		}
		s.relayRemoteInput(t, sid) // waiting on another node for its client: asked here too (tasks_remote.go)
		return tasks.ToWire(t), nil
	case methodTasksCancel:
		t, err := m.Cancel(ctx, id, p.TaskID, true)
		if err != nil {
			return nil, s.taskFailure(err, p.TaskID)
		}
		return tasks.ToWire(t), nil
	default: // tasks/result: wait for the end (as long as the request lasts), then the call's own answer
		if t, err := m.GetOwn(ctx, id, p.TaskID); err == nil {
			s.relayRemoteInput(t, sid) // waiting on another node for its client: asked here too (tasks_remote.go)
		}
		t, err := m.Wait(ctx, id, p.TaskID, 24*time.Hour, true)
		if err != nil {
			return nil, s.taskFailure(err, p.TaskID)
		}
		return taskPayload(t)
	}
}

// taskPayload is the answer of tasks/result: a completed task's CallToolResult with the related-task _meta, a
// failed task's JSON-RPC error, and for a task that ended without an answer (cancelled, stopped, expired) an
// internal error saying why.
func taskPayload(t persistence.Task) (any, *jsonrpc.Error) {
	switch {
	case persistence.TaskOpen(t.Status):
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The task has not finished yet; retry tasks/result"}
	case t.Status == persistence.TaskCompleted && t.Result != nil:
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(t.Result, &doc); err != nil || doc == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The task's stored result is not an object"}
		}
		var meta map[string]any
		_ = json.Unmarshal(doc["_meta"], &meta)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[tasks.RelatedTaskMetaKey] = map[string]string{"taskId": t.ID}
		doc["_meta"] = mustJSON(meta)
		return doc, nil
	}
	var e struct {
		Code    *int64          `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if json.Unmarshal(t.Error, &e) == nil && e.Code != nil {
		return nil, &jsonrpc.Error{Code: *e.Code, Message: e.Message, Data: e.Data}
	}
	msg := t.StatusMessage
	if msg == "" {
		msg = "The task " + t.Status
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
}

// startTask creates the caller's task for a tools/call of a backend tool and runs the call in the background, its
// context given the relay of the backend's requests by relay (which may see the task's id: tasks.TaskID). A
// name that does not resolve, bad arguments, a meta-tool, the rate limit and the open-task cap are answered at
// once, with no task.
func (s *Server) startTask(r *http.Request, id auth.Identity, p taskParams, relay func(ctx context.Context, ttl time.Duration) context.Context) (persistence.Task, *jsonrpc.Error) {
	fail := func(e *jsonrpc.Error) (persistence.Task, *jsonrpc.Error) { return persistence.Task{}, e }
	var meta taskMeta
	if err := json.Unmarshal(p.Task, &meta); err != nil || (meta.TTL != nil && *meta.TTL < 0) {
		return fail(invalidParams("task must be an object whose ttl is a number of milliseconds >= 0"))
	}
	if fe := validate.ToolName(p.Name); fe != "" {
		return fail(invalidParams("name: " + fe))
	}
	if isMetaTool(p.Name) {
		return fail(invalidParams("Tool " + p.Name + " does not support task-augmented calls"))
	}
	args, ferrs := validate.Arguments(p.Arguments)
	if len(ferrs) > 0 {
		e := apierror.Validation(ferrs)
		return fail(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: e.Message(), Data: mustJSON(e.Body())})
	}
	c := gateway.CallRequest{Caller: id, Name: p.Name, Within: s.opts.Scope, Arguments: args, Object: true}
	route, err := s.cases.Resolve(r.Context(), c)
	var re *gateway.RouteError
	var amb *routing.AmbiguousToolError
	switch {
	case errors.As(err, &amb) && errors.As(err, &re):
		e := apierror.RouteError(err, apierror.Resolution{Name: p.Name, Candidates: re.Candidates()})
		return fail(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: e.Message(), Data: mustJSON(e.ToolResult())})
	case errors.As(err, &re):
		return fail(invalidParams("Unknown tool " + strconv.Quote(p.Name)))
	case err != nil: // denied by the access policy, or the store could not say
		e := apierror.FromError(err, apierror.Subject{})
		if e == nil {
			e = apierror.Internal()
		}
		return fail(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: e.Message(), Data: mustJSON(e.Body())})
	}
	if e := apierror.RateLimit(s.limiter, id); e != nil {
		return fail(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Message(), Data: mustJSON(e.Body())})
	}
	var ttl *time.Duration
	if meta.TTL != nil {
		d := time.Duration(*meta.TTL * float64(time.Millisecond))
		ttl = &d
	}
	rid := requestid.Sanitize(r.Header.Get(requestid.Header))
	if rid == "" {
		rid = uuid.NewString()
	}
	c.Start = time.Now()
	s.recordUse(actorName(id), p.Name)
	granted := s.opts.Tasks.TTL(ttl)
	t, err := s.opts.Tasks.Start(r.Context(), id, p.Name, route.ServerName, ttl, func(ctx context.Context) tasks.Outcome {
		// A backend that supports tasks is called with one and its task followed (actors/server/tasks_backend.go).
		ctx = tasks.WithBackendTask(requestid.With(ctx, rid), granted)
		return s.taskCall(relay(ctx, granted), c)
	})
	if err != nil {
		return fail(s.taskFailure(err, ""))
	}
	return t, nil
}

// taskCall runs a task's call through the gateway as a direct call of the tool runs (call), and keeps its answer:
// the CallToolResult (a tool error included) completes the task, a JSON-RPC error fails it.
func (s *Server) taskCall(ctx context.Context, c gateway.CallRequest) tasks.Outcome {
	res, err := s.call(ctx, c)
	if err != nil {
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		return tasks.Outcome{Error: mustJSON(map[string]any{"code": je.Code, "message": je.Message}), Message: je.Message}
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return tasks.Outcome{Message: "The call's result could not be encoded: " + err.Error()}
	}
	return tasks.Outcome{Result: raw}
}

// known reports whether sid is a streamable session this endpoint opened and has not seen end.
func (t *sessionTable) known(sid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byID[sid]
	return ok
}

// sessionByID is the go-sdk session of a streamable, SSE or stdio session id (nil when it has none, or it ended).
func (s *Server) sessionByID(sid string) *mcp.ServerSession {
	if sid == "" {
		return nil
	}
	if isFrontID(sid) {
		return s.fronts.session(sid) // tasks_front.go
	}
	if fs := s.fast.known(sid); fs != nil { // a streamable session the fast path tracks since its initialize
		return fs.ss
	}
	for ss := range s.mcp.Sessions() {
		if ss.ID() == sid {
			return ss
		}
	}
	return nil
}
