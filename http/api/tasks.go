package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Durable tasks over REST (issue 30): POST /api/v1/tools/call with "task": {"ttl_ms": N} answers 202 with the
// task and runs the call in the background; GET /api/v1/tasks/{id} reads it (?wait=N long-polls up to N seconds
// for its end), DELETE cancels it. A task is visible to the subject that created it and to admins.

// TasksPath is where tasks are read and cancelled.
const TasksPath = "/api/v1/tasks"

// MaxTaskWait bounds ?wait= of GET /api/v1/tasks/{id}, in seconds.
const MaxTaskWait = 60

// taskView is a task as REST shows it.
type taskView struct {
	TaskID         string          `json:"task_id"`
	Status         string          `json:"status"`
	StatusMessage  *string         `json:"status_message"`
	Tool           string          `json:"tool"`
	Server         *string         `json:"server"`
	CreatedAt      string          `json:"created_at"`
	UpdatedAt      string          `json:"updated_at"`
	ExpiresAt      string          `json:"expires_at"`
	TTLMs          int64           `json:"ttl_ms"`
	PollIntervalMs int64           `json:"poll_interval_ms"`
	Result         json.RawMessage `json:"result"`
	Error          json.RawMessage `json:"error"`
	// InputRequest is the request the task waits on while input_required (the backend's elicitation or sampling
	// request relayed to the task's client: method and params); null otherwise.
	InputRequest json.RawMessage `json:"input_request"`
}

func newTaskView(t persistence.Task) taskView {
	v := taskView{TaskID: t.ID, Status: t.Status, Tool: t.Tool, CreatedAt: view.Time(t.CreatedAt),
		UpdatedAt: view.Time(t.UpdatedAt), ExpiresAt: view.Time(t.ExpiresAt), TTLMs: t.TTL.Milliseconds(),
		PollIntervalMs: t.PollInterval.Milliseconds(), Result: t.Result, Error: t.Error, InputRequest: t.InputRequest}
	if v.InputRequest == nil {
		v.InputRequest = json.RawMessage("null")
	}
	if t.StatusMessage != "" {
		v.StatusMessage = &t.StatusMessage
	}
	if t.Server != "" {
		v.Server = &t.Server
	}
	if v.Result == nil {
		v.Result = json.RawMessage("null")
	}
	if v.Error == nil {
		v.Error = json.RawMessage("null")
	}
	return v
}

// splitTask takes the "task" member out of a tools/call body: the rest is validated as a plain call. present is
// false when the body has none (or is not an object: the call's validation answers that); the body is then handed
// on as it came. Most calls are not tasks, so a body in which no key can be "task" is not parsed here at all (issue
// 26: that parse and the body's rebuild took a quarter of the REST call handler's CPU in a profile): a key decodes
// to "task" only from those four letters or from \u escapes.
func splitTask(body []byte) (rest []byte, task json.RawMessage, present bool) {
	if !bytes.Contains(body, []byte("task")) && !bytes.Contains(body, []byte(`\u`)) {
		return body, nil, false
	}
	var raw json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &raw) != nil {
		return body, nil, false
	}
	members, ok := strictjson.ObjectMembers(raw)
	if !ok || !slices.ContainsFunc(members, func(m strictjson.Member) bool { return m.Key == "task" }) {
		return body, nil, false
	}
	return withoutTask(members)
}

// withoutTask rebuilds an object from its members without its first "task" member, and returns that member.
func withoutTask(members []strictjson.Member) (rest []byte, task json.RawMessage, present bool) {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, m := range members {
		if m.Key == "task" && !present {
			task, present = m.Value, true
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.Key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.Value)
		n++
	}
	b.WriteByte('}')
	return b.Bytes(), task, present
}

// taskTTL validates the task member: an object with an optional ttl_ms (integer, 1000..), nothing else.
func taskTTL(task json.RawMessage) (*time.Duration, []apierror.FieldError) {
	loc := []any{"body", "task"}
	if !strictjson.IsObject(task) {
		return nil, []apierror.FieldError{{Loc: loc, Msg: "task must be an object", Type: apierror.FieldTypeError}}
	}
	members, _ := strictjson.ObjectMembers(task)
	var ttl *time.Duration
	var errs []apierror.FieldError
	for _, m := range members {
		switch m.Key {
		case "ttl_ms":
			var ms int64
			if err := json.Unmarshal(m.Value, &ms); err != nil {
				errs = append(errs, apierror.FieldError{Loc: append(loc, "ttl_ms"), Msg: "Input should be a valid integer", Type: apierror.FieldTypeError})
			} else if ms < tasks.MinTTL.Milliseconds() {
				errs = append(errs, apierror.FieldError{Loc: append(loc, "ttl_ms"), Msg: "Input should be greater than or equal to 1000", Type: apierror.FieldValueError})
			} else {
				d := time.Duration(ms) * time.Millisecond
				ttl = &d
			}
		default:
			errs = append(errs, apierror.FieldError{Loc: append(loc, m.Key), Msg: "Extra inputs are not permitted", Type: apierror.FieldExtraForbidden})
		}
	}
	return ttl, errs
}

// tasksOff answers the task routes of an app without a task manager.
func tasksOff() error {
	return &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
		Detail: "Tasks are not enabled on this daemon"}
}

// startTaskCall answers a task-augmented POST /api/v1/tools/call: 202 with the task (Location: its URL), the call
// running in the background. A name that does not resolve, the rate limit (checked before, by the route) and the
// open-task cap are answered at once.
func (s *server) startTaskCall(c *fiber.Ctx, id auth.Identity, req validate.CallRequest, task json.RawMessage, start time.Time) error {
	if s.tasks == nil {
		return tasksOff()
	}
	ttl, ferrs := taskTTL(task)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs)
	}
	call := gateway.CallRequest{Caller: id, Name: req.Name, ServerID: req.ServerID, Profile: req.Profile,
		Within: gateway.Bound(s.gw.Routes(), id), Arguments: req.Arguments, Start: start}
	route, err := s.gw.Resolve(c.UserContext(), call)
	if err != nil {
		return mapError(err, subject{id: req.ServerID})
	}
	granted := s.tasks.TTL(ttl)
	t, err := s.tasks.Start(c.UserContext(), id, req.Name, route.ServerName, ttl, func(ctx context.Context) tasks.Outcome {
		// A tool its backend runs as a task is called with one, and the backend's task followed
		// (actors/server/tasks_backend.go).
		return s.taskCall(tasks.WithBackendTask(ctx, granted), call)
	})
	if err != nil {
		if e := apierror.TaskError(err, "", s.tasks.MaxOpen()); e != nil && e.Code != apierror.CodeInternal {
			return e
		}
		return err
	}
	c.Location(TasksPath + "/" + t.ID)
	return c.Status(fiber.StatusAccepted).JSON(newTaskView(t))
}

// taskCall runs a task's call as POST /api/v1/tools/call does and keeps its answer: the result body (a tool
// error included) completes the task; a failure fails it with the error body it would have answered.
func (s *server) taskCall(ctx context.Context, call gateway.CallRequest) tasks.Outcome {
	res, err := s.gw.Call(ctx, call)
	if err != nil {
		var e *apierror.Error
		if !errors.As(mapError(err, subject{id: call.ServerID}), &e) {
			e = apierror.Internal()
		}
		body, _ := json.Marshal(e.Body())
		return tasks.Outcome{Error: body, Message: e.Message()}
	}
	out, err := resultBody(res.Reply.ResultJson, res.Call.MetadataJSON())
	if err != nil {
		return tasks.Outcome{Message: "The backend's result is not a JSON object"}
	}
	return tasks.Outcome{Result: out}
}

// GET /api/v1/tasks/{id}[?wait=N]: the task; with wait, once it is final or after N seconds (at most
// MaxTaskWait), whichever comes first.
func (s *server) getTask(c *fiber.Ctx) error {
	if s.tasks == nil {
		return tasksOff()
	}
	v := strictjson.New("query")
	wait := queryInt(c, v, "wait", 0, 0, MaxTaskWait)
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}
	id := c.Params("id")
	t, err := s.tasks.Wait(c.UserContext(), identityOf(c), id, time.Duration(wait)*time.Second, false)
	if err != nil {
		return s.taskError(err, id)
	}
	return c.JSON(newTaskView(t))
}

// DELETE /api/v1/tasks/{id}: cancels an open task (its call is stopped where it runs on this node) and answers
// it; a final task is 409 TASK_FINISHED.
func (s *server) cancelTask(c *fiber.Ctx) error {
	if s.tasks == nil {
		return tasksOff()
	}
	id := c.Params("id")
	t, err := s.tasks.Cancel(c.UserContext(), identityOf(c), id, false)
	if err != nil {
		return s.taskError(err, id)
	}
	return c.JSON(newTaskView(t))
}

func (s *server) taskError(err error, id string) error {
	if e := apierror.TaskError(err, id, s.tasks.MaxOpen()); e != nil && e.Code != apierror.CodeInternal {
		return e
	}
	return err
}

// taskList is a page of tasks, newest first.
type taskList struct {
	Tasks   []taskView `json:"tasks"`
	Limit   int        `json:"limit"`
	Offset  int        `json:"offset"`
	HasMore bool       `json:"has_more"`
}

// GET /api/v1/tasks[?all=true&limit=N&offset=N]: a page of the caller's tasks, newest first; an admin with
// all=true gets every owner's (all from another caller is refused 403, never silently narrowed).
func (s *server) listTasks(c *fiber.Ctx) error {
	if s.tasks == nil {
		return tasksOff()
	}
	v := strictjson.New("query")
	limit := queryInt(c, v, "limit", defaultLimit, 1, maxLimit)
	offset := queryInt(c, v, "offset", 0, 0, maxOffset)
	all := queryBool(c, v, "all")
	if v.Count() > 0 {
		return apierror.Validation(v.Errors())
	}
	id := identityOf(c)
	if all && !id.Allows(auth.ScopeAdmin) {
		return &apierror.Error{Status: fiber.StatusForbidden, Code: apierror.CodeForbidden,
			Detail: "Listing every caller's tasks (all=true) needs the admin scope"}
	}
	list, more, err := s.tasks.List(c.UserContext(), id, all, limit, offset)
	if err != nil {
		return s.taskError(err, "")
	}
	out := taskList{Tasks: make([]taskView, 0, len(list)), Limit: limit, Offset: offset, HasMore: more}
	for _, t := range list {
		out.Tasks = append(out.Tasks, newTaskView(t))
	}
	return c.JSON(out)
}
