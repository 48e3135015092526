package integration_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

const (
	taskAliceToken = "alice-secret-token-0001"
	taskBobToken   = "bob-secret-token-000001"
)

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestTasksThroughREST: on the real actors and store, POST /api/v1/tools/call with "task" answers 202 with the
// task and runs the call in the background; GET /api/v1/tasks/{id}?wait=N returns it once finished, with the call's
// result or error body; DELETE cancels it; only its creator (and admins) find it; bad task parameters are 422, the
// open-task cap 429.
func TestTasksThroughREST(t *testing.T) {
	st, sys, logger := startSystem(t)
	toks, err := auth.Parse("ops:"+auditAdminToken, "alice:"+taskAliceToken+",bob:"+taskBobToken, "")
	if err != nil {
		t.Fatal(err)
	}
	mgr := tasks.New(tasks.Config{Store: st, Node: "node-1", MaxOpenPerOwner: 1})
	t.Cleanup(mgr.Close)
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks, Tasks: mgr})}
	url := goBackend(t)
	if r := e.authDo(t, auditAdminToken, "POST", base+"/servers",
		`{"name":"go","transport_type":"HTTP","connection_config":{"base_url":"`+url+`"},"auto_connect":true}`); r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	waitUntil(t, "go.echo callable", func() bool { return callable(sys, "go.echo") })

	start := func(token, body string) response {
		return e.authDo(t, token, "POST", "/api/v1/tools/call", body)
	}
	r := start(taskAliceToken, `{"name":"go.echo","arguments":{"a":1},"task":{"ttl_ms":60000}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("task call: %d %s", r.status, r.body)
	}
	created := r.json(t)
	id, _ := created["task_id"].(string)
	if !hexID.MatchString(id) || created["status"] != persistence.TaskWorking || created["tool"] != "go.echo" ||
		created["server"] != "go" || created["ttl_ms"] != float64(60000) {
		t.Fatalf("created task = %v", created)
	}
	wantTime(t, created["created_at"])
	r = e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/"+id+"?wait=30", "")
	done := r.json(t)
	result, _ := done["result"].(map[string]any)
	if r.status != http.StatusOK || done["status"] != persistence.TaskCompleted || result == nil ||
		!strings.Contains(string(r.body), `{\"a\":1}`) || result["isError"] != false || result["metadata"] == nil {
		t.Fatalf("finished task: %d %s", r.status, r.body)
	}

	// Only its creator and admins find it.
	for _, tc := range []struct {
		token, method string
		status        int
		code          string
	}{
		{taskBobToken, "GET", http.StatusNotFound, "TASK_NOT_FOUND"},
		{taskBobToken, "DELETE", http.StatusNotFound, "TASK_NOT_FOUND"},
		{auditAdminToken, "GET", http.StatusOK, ""},
		{taskAliceToken, "DELETE", http.StatusConflict, "TASK_FINISHED"},
	} {
		r := e.authDo(t, tc.token, tc.method, api.TasksPath+"/"+id, "")
		if tc.code == "" {
			if r.status != tc.status {
				t.Errorf("%s by %s: %d %s", tc.method, tc.token, r.status, r.body)
			}
			continue
		}
		wantError(t, r, tc.status, tc.code)
	}
	wantError(t, e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/0123456789abcdef0123456789abcdef", ""), http.StatusNotFound, "TASK_NOT_FOUND")

	// A backend's JSON-RPC error fails the task with the error body the plain call would have answered.
	r = start(taskAliceToken, `{"name":"go.fail","task":{}}`)
	failed := e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/"+r.json(t)["task_id"].(string)+"?wait=30", "").json(t)
	if failed["status"] != persistence.TaskFailed || failed["error"].(map[string]any)["error_code"] != "EXECUTION_FAILED" ||
		failed["result"] != nil || failed["status_message"] == nil {
		t.Errorf("failed task = %v", failed)
	}

	// A running task: still working after a short wait, then cancelled; the cap holds meanwhile.
	r = start(taskAliceToken, `{"name":"go.slow","task":{"ttl_ms":60000}}`)
	slowID, _ := r.json(t)["task_id"].(string)
	if r.status != http.StatusAccepted {
		t.Fatalf("slow task: %d %s", r.status, r.body)
	}
	if got := e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/"+slowID+"?wait=0", "").json(t); got["status"] != persistence.TaskWorking {
		t.Errorf("slow task right away = %v", got)
	}
	limited := start(taskAliceToken, `{"name":"go.echo","task":{}}`)
	wantError(t, limited, http.StatusTooManyRequests, "TASK_LIMIT_REACHED")
	if r := start(taskBobToken, `{"name":"go.echo","task":{}}`); r.status != http.StatusAccepted {
		t.Errorf("bob's task under alice's cap: %d %s", r.status, r.body)
	}
	r = e.authDo(t, taskAliceToken, "DELETE", api.TasksPath+"/"+slowID, "")
	if got := r.json(t); r.status != http.StatusOK || got["status"] != persistence.TaskCancelled {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if got := e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/"+slowID+"?wait=1", "").json(t); got["status"] != persistence.TaskCancelled {
		t.Errorf("cancelled task = %v", got)
	}

	// GET /api/v1/tasks: each caller lists its own tasks (alice 3, bob 1, the admin none of its own); only an admin
	// lists everyone's (all=true), another caller asking for all is 403.
	listIDs := func(token, query string) (ids []string, more bool) {
		t.Helper()
		r := e.authDo(t, token, "GET", api.TasksPath+query, "")
		if r.status != http.StatusOK {
			t.Fatalf("list %s by %s: %d %s", query, token, r.status, r.body)
		}
		page := r.json(t)
		list, _ := page["tasks"].([]any)
		for _, it := range list {
			ids = append(ids, it.(map[string]any)["task_id"].(string))
		}
		return ids, page["has_more"] == true
	}
	aliceIDs, _ := listIDs(taskAliceToken, "")
	bobIDs, _ := listIDs(taskBobToken, "")
	opsIDs, _ := listIDs(auditAdminToken, "")
	allIDs, _ := listIDs(auditAdminToken, "?all=true")
	if len(aliceIDs) != 3 || len(bobIDs) != 1 || len(opsIDs) != 0 || len(allIDs) != 4 ||
		!slices.Contains(aliceIDs, id) || !slices.Contains(aliceIDs, slowID) || slices.Contains(bobIDs, id) || !slices.Contains(allIDs, bobIDs[0]) {
		t.Errorf("lists: alice %v, bob %v, ops %v, all %v", aliceIDs, bobIDs, opsIDs, allIDs)
	}
	if first, more := listIDs(taskAliceToken, "?limit=2"); len(first) != 2 || !more || first[0] != aliceIDs[0] {
		t.Errorf("first page = %v (more %v)", first, more)
	}
	if rest, more := listIDs(taskAliceToken, "?limit=2&offset=2"); len(rest) != 1 || more || rest[0] != aliceIDs[2] {
		t.Errorf("second page = %v (more %v)", rest, more)
	}
	wantError(t, e.authDo(t, taskBobToken, "GET", api.TasksPath+"?all=true", ""), http.StatusForbidden, "FORBIDDEN")
	wantError(t, e.authDo(t, taskBobToken, "GET", api.TasksPath+"?limit=0", ""), 422, "VALIDATION_ERROR")

	// Refused at once, with no task.
	before, _, _ := st.ListTasks(context.Background(), persistence.ListTasksFilter{})
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"task not an object", `{"name":"go.echo","task":"soon"}`, 422, "VALIDATION_ERROR"},
		{"ttl too short", `{"name":"go.echo","task":{"ttl_ms":5}}`, 422, "VALIDATION_ERROR"},
		{"unknown task field", `{"name":"go.echo","task":{"when":"now"}}`, 422, "VALIDATION_ERROR"},
		{"other field still checked", `{"name":"go.echo","task":{},"extra":1}`, 422, "VALIDATION_ERROR"},
		{"unknown tool", `{"name":"go.nothing","task":{}}`, 404, "TOOL_NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantError(t, start(taskAliceToken, tc.body), tc.status, tc.code) })
	}
	wantError(t, e.authDo(t, taskAliceToken, "GET", api.TasksPath+"/"+id+"?wait=61", ""), 422, "VALIDATION_ERROR")
	after, _, _ := st.ListTasks(context.Background(), persistence.ListTasksFilter{})
	if len(after) != len(before) {
		t.Errorf("refused task calls stored %d tasks", len(after)-len(before))
	}
	// Without "task" the call is the plain one.
	if r := start(taskAliceToken, `{"name":"go.echo","arguments":{"b":2}}`); r.status != http.StatusOK || !strings.Contains(string(r.body), "isError") {
		t.Errorf("plain call: %d %s", r.status, r.body)
	}
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(30 * time.Millisecond)
	}
}
