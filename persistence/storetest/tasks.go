package storetest

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

var taskIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func newTask(owner, node string, ttl time.Duration) *persistence.Task {
	return &persistence.Task{Owner: owner, Tool: "github__search", Server: "github", Node: node, TTL: ttl,
		PollInterval: time.Second}
}

func mustCreateTask(t *testing.T, s persistence.Store, task *persistence.Task, maxOpen int) persistence.Task {
	t.Helper()
	if err := s.CreateTask(t.Context(), task, maxOpen); err != nil {
		t.Fatalf("CreateTask(%s): %v", task.Owner, err)
	}
	return *task
}

// testTasks: a created task reads back as written, with an unguessable id; listing is newest first, per owner or
// (owner empty) everybody's, paged; an unknown id is ErrNotFound.
func testTasks(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	a1 := mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 0)
	if !taskIDPattern.MatchString(a1.ID) {
		t.Errorf("task id %q is not 128 random bits in hex", a1.ID)
	}
	if a1.Status != persistence.TaskWorking || a1.CreatedAt.Before(before) || !a1.UpdatedAt.Equal(a1.CreatedAt) ||
		!a1.ExpiresAt.Equal(a1.CreatedAt.Add(time.Hour)) {
		t.Errorf("created task = %+v", a1)
	}
	got, err := s.GetTask(ctx, a1.ID)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got.Owner != "sub:alice" || got.Tool != "github__search" || got.Server != "github" || got.Node != "n1" ||
		got.TTL != time.Hour || got.PollInterval != time.Second || !got.CreatedAt.Equal(a1.CreatedAt) ||
		!got.ExpiresAt.Equal(a1.ExpiresAt) || got.Result != nil || got.Error != nil {
		t.Errorf("GetTask = %+v, want %+v", got, a1)
	}
	time.Sleep(2 * time.Millisecond) // distinct creation times order the listing
	a2 := mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 0)
	if a2.ID == a1.ID {
		t.Fatalf("two tasks got the same id %s", a1.ID)
	}
	time.Sleep(2 * time.Millisecond)
	b1 := mustCreateTask(t, s, newTask("sub:bob", "n1", time.Hour), 0)

	tests := []struct {
		name     string
		f        persistence.ListTasksFilter
		want     []string
		wantMore bool
	}{
		{"alice's", persistence.ListTasksFilter{Owner: "sub:alice"}, []string{a2.ID, a1.ID}, false},
		{"bob's", persistence.ListTasksFilter{Owner: "sub:bob"}, []string{b1.ID}, false},
		{"nobody's", persistence.ListTasksFilter{Owner: "sub:carol"}, nil, false},
		{"everybody's", persistence.ListTasksFilter{}, []string{b1.ID, a2.ID, a1.ID}, false},
		{"first page", persistence.ListTasksFilter{Limit: 2}, []string{b1.ID, a2.ID}, true},
		{"last page", persistence.ListTasksFilter{Limit: 2, Offset: 2}, []string{a1.ID}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, more, err := s.ListTasks(ctx, tc.f)
			if err != nil {
				t.Fatalf("ListTasks: %v", err)
			}
			var ids []string
			for _, task := range list {
				ids = append(ids, task.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") || more != tc.wantMore {
				t.Errorf("ListTasks(%+v) = %v more=%v, want %v more=%v", tc.f, ids, more, tc.want, tc.wantMore)
			}
		})
	}
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "", strings.Repeat("a", 100)} {
		if _, err := s.GetTask(ctx, id); !errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("GetTask(%q) = %v, want ErrNotFound", id, err)
		}
	}
	for _, bad := range []*persistence.Task{
		{Owner: "", Tool: "x", TTL: time.Hour},
		{Owner: "o", Tool: "", TTL: time.Hour},
		{Owner: "o", Tool: "x", TTL: 0},
		{Owner: "o", Tool: "x", TTL: time.Hour, Status: "done"},
		{Owner: strings.Repeat("o", persistence.MaxTaskOwnerBytes+1), Tool: "x", TTL: time.Hour},
	} {
		if err := s.CreateTask(ctx, bad, 0); err == nil {
			t.Errorf("CreateTask(%+v) succeeded", bad)
		}
	}
}

// testTaskLimit: an owner at its limit of open tasks gets ErrTaskLimit, other owners do not, a final task frees a
// place; concurrent creations never pass the limit.
func testTaskLimit(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	first := mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 2)
	mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 2)
	if err := s.CreateTask(ctx, newTask("sub:alice", "n1", time.Hour), 2); !errors.Is(err, persistence.ErrTaskLimit) {
		t.Fatalf("third open task = %v, want ErrTaskLimit", err)
	}
	mustCreateTask(t, s, newTask("sub:bob", "n1", time.Hour), 2)
	mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 0) // no limit
	if _, err := s.UpdateTask(ctx, first.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted}); err != nil {
		t.Fatalf("UpdateTask: %v", err)
	}
	if err := s.CreateTask(ctx, newTask("sub:alice", "n1", time.Hour), 3); err != nil {
		t.Fatalf("a place freed by a completed task: %v", err)
	}

	const racers, limit = 8, 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, limited := 0, 0
	for range racers {
		wg.Go(func() {
			err := s.CreateTask(ctx, newTask("sub:racer", "n1", time.Hour), limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, persistence.ErrTaskLimit):
				limited++
			default:
				t.Errorf("CreateTask: %v", err)
			}
		})
	}
	wg.Wait()
	if created != limit || limited != racers-limit {
		t.Errorf("concurrent creations: %d created, %d limited; want %d and %d", created, limited, limit, racers-limit)
	}
}

// testTaskUpdates: an open task moves to input_required and back, ends once with its result or error; a final
// task refuses every update (ErrTaskFinished, with the stored task); a result over the bound is refused.
func testTaskUpdates(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	task := mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 0)
	msg := "waiting for the user"
	input := json.RawMessage(`{"method":"elicitation/create","params":{"message":"Which one?"}}`)
	got, err := s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Status: persistence.TaskInputRequired, StatusMessage: &msg, InputRequest: input})
	if err != nil || got.Status != persistence.TaskInputRequired || got.StatusMessage != msg || got.UpdatedAt.Before(task.UpdatedAt) {
		t.Fatalf("UpdateTask(input_required) = %+v, %v", got, err)
	}
	// The pending input request is kept while input_required, and cleared when the task works again.
	if stored, err := s.GetTask(ctx, task.ID); err != nil || !jsonEqual(stored.InputRequest, input) {
		t.Errorf("stored input request = %s, %v; want %s", stored.InputRequest, err, input)
	}
	if got, err := s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Status: persistence.TaskWorking, StatusMessage: ptr("")}); err != nil || got.InputRequest != nil {
		t.Errorf("UpdateTask(working) = %+v, %v; want the input request cleared", got, err)
	}
	if stored, err := s.GetTask(ctx, task.ID); err != nil || stored.InputRequest != nil || stored.Status != persistence.TaskWorking {
		t.Errorf("stored after working again = %+v, %v", stored, err)
	}
	result := json.RawMessage(`{"content":[{"type":"text","text":"done"}],"isError":false}`)
	big := json.RawMessage(`"` + strings.Repeat("x", persistence.MaxTaskPayloadBytes) + `"`)
	if _, err := s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: big}); !errors.Is(err, persistence.ErrTaskTooLarge) {
		t.Errorf("oversized result = %v, want ErrTaskTooLarge", err)
	}
	if _, err := s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Result: json.RawMessage(`{"no`)}); err == nil {
		t.Error("invalid JSON result accepted")
	}
	got, err = s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: result, StatusMessage: ptr("")})
	if err != nil || got.Status != persistence.TaskCompleted || got.StatusMessage != "" {
		t.Fatalf("UpdateTask(completed) = %+v, %v", got, err)
	}
	stored, err := s.GetTask(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(stored.Result, result) || stored.Status != persistence.TaskCompleted {
		t.Errorf("stored = %+v, want completed with %s", stored, result)
	}
	again, err := s.UpdateTask(ctx, task.ID, persistence.TaskUpdate{Status: persistence.TaskCancelled})
	if !errors.Is(err, persistence.ErrTaskFinished) || again.Status != persistence.TaskCompleted {
		t.Errorf("update of a final task = %+v, %v; want the completed task and ErrTaskFinished", again, err)
	}
	if _, err := s.UpdateTask(ctx, "0123456789abcdef0123456789abcdef", persistence.TaskUpdate{Status: persistence.TaskFailed}); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("update of an unknown task = %v, want ErrNotFound", err)
	}

	// Racing final updates: exactly one wins.
	race := mustCreateTask(t, s, newTask("sub:alice", "n1", time.Hour), 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for _, st := range []string{persistence.TaskCompleted, persistence.TaskCancelled, persistence.TaskFailed, persistence.TaskCancelled} {
		wg.Go(func() {
			_, err := s.UpdateTask(ctx, race.ID, persistence.TaskUpdate{Status: st})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if !errors.Is(err, persistence.ErrTaskFinished) {
				t.Errorf("racing UpdateTask: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d racing final updates applied, want 1", won)
	}
}

// testTaskOrphansAndExpiry: the open tasks of a node that is not live fail with the message, the rest stay;
// expired tasks are deleted in bounded batches.
func testTaskOrphansAndExpiry(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	live := mustCreateTask(t, s, newTask("sub:alice", "n-live", time.Hour), 0)
	dead := mustCreateTask(t, s, newTask("sub:alice", "n-dead", time.Hour), 0)
	doneDead := mustCreateTask(t, s, newTask("sub:alice", "n-dead", time.Hour), 0)
	if _, err := s.UpdateTask(ctx, doneDead.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	n, err := s.FailOrphanedTasks(ctx, []string{"n-live"}, "the node running the task stopped", false)
	if err != nil || n != 1 {
		t.Fatalf("FailOrphanedTasks = %d, %v; want 1", n, err)
	}
	for _, tc := range []struct {
		id, status, msg string
	}{
		{live.ID, persistence.TaskWorking, ""},
		{dead.ID, persistence.TaskFailed, "the node running the task stopped"},
		{doneDead.ID, persistence.TaskCompleted, ""},
	} {
		got, err := s.GetTask(ctx, tc.id)
		if err != nil || got.Status != tc.status || got.StatusMessage != tc.msg {
			t.Errorf("task %s = %s %q, %v; want %s %q", tc.id, got.Status, got.StatusMessage, err, tc.status, tc.msg)
		}
	}
	if n, err := s.FailOrphanedTasks(ctx, nil, "all gone", false); err != nil || n != 1 {
		t.Errorf("FailOrphanedTasks(none live) = %d, %v; want 1", n, err)
	}

	short := []persistence.Task{
		mustCreateTask(t, s, newTask("sub:bob", "n1", time.Minute), 0),
		mustCreateTask(t, s, newTask("sub:bob", "n1", time.Minute), 0),
		mustCreateTask(t, s, newTask("sub:bob", "n1", time.Minute), 0),
	}
	later := time.Now().Add(10 * time.Minute)
	if n, err := s.DeleteExpiredTasks(ctx, time.Now(), 100); err != nil || n != 0 {
		t.Errorf("DeleteExpiredTasks(now) = %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteExpiredTasks(ctx, later, 2); err != nil || n != 2 {
		t.Errorf("DeleteExpiredTasks(batch of 2) = %d, %v; want 2", n, err)
	}
	if n, err := s.DeleteExpiredTasks(ctx, later, 100); err != nil || n != 1 {
		t.Errorf("DeleteExpiredTasks(rest) = %d, %v; want 1", n, err)
	}
	for _, task := range short {
		if _, err := s.GetTask(ctx, task.ID); !errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("expired task %s: %v, want ErrNotFound", task.ID, err)
		}
	}
	if _, err := s.GetTask(ctx, live.ID); err != nil {
		t.Errorf("a task within its TTL was deleted: %v", err)
	}
}

// testTaskBackendClaim: the backend's task is recorded on an open task (not on a final one); claiming the orphans
// moves to the claimer only the open tasks of dead nodes that follow a backend's task, each to one claimer of
// several racing, and the claimed tasks are then no orphans of FailOrphanedTasks.
func testTaskBackendClaim(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	follows := mustCreateTask(t, s, newTask("sub:alice", "n-dead", time.Hour), 0)
	plain := mustCreateTask(t, s, newTask("sub:alice", "n-dead", time.Hour), 0)
	alive := mustCreateTask(t, s, newTask("sub:alice", "n-live", time.Hour), 0)
	done := mustCreateTask(t, s, newTask("sub:alice", "n-dead", time.Hour), 0)
	for _, id := range []string{follows.ID, alive.ID} {
		if err := s.SetTaskBackend(ctx, id, "backend-"+id, "srv-1"); err != nil {
			t.Fatalf("SetTaskBackend: %v", err)
		}
	}
	if _, err := s.UpdateTask(ctx, done.ID, persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTaskBackend(ctx, done.ID, "late", "srv-1"); err != nil {
		t.Fatalf("SetTaskBackend(final task): %v", err)
	}
	if err := s.SetTaskBackend(ctx, "0123456789abcdef0123456789abcdef", "x", "srv-1"); err != nil {
		t.Fatalf("SetTaskBackend(unknown task): %v", err)
	}
	if got, err := s.GetTask(ctx, follows.ID); err != nil || got.BackendTaskID != "backend-"+follows.ID || got.BackendServer != "srv-1" {
		t.Fatalf("task after SetTaskBackend = %+v, %v", got, err)
	}
	if got, _ := s.GetTask(ctx, done.ID); got.BackendTaskID != "" {
		t.Errorf("a final task got a backend task: %+v", got)
	}

	// Sparing the followed tasks fails only the plain orphan.
	if n, err := s.FailOrphanedTasks(ctx, []string{"n-live"}, "gone", true); err != nil || n != 1 {
		t.Errorf("FailOrphanedTasks(spare followed) = %d, %v; want 1 (the plain task)", n, err)
	}
	// Three claimers race; exactly one gets the orphan.
	var mu sync.Mutex
	claimed := map[string][]string{}
	var wg sync.WaitGroup
	for _, node := range []string{"n-a", "n-b", "n-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.ClaimOrphanedTasks(ctx, []string{"n-live", "n-a", "n-b", "n-c"}, node)
			if err != nil {
				t.Errorf("ClaimOrphanedTasks(%s): %v", node, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, task := range got {
				claimed[task.ID] = append(claimed[task.ID], node)
				if task.Node != node || task.BackendTaskID != "backend-"+follows.ID || task.Status != persistence.TaskWorking {
					t.Errorf("claimed task = %+v", task)
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != 1 || len(claimed[follows.ID]) != 1 {
		t.Fatalf("claimed = %v, want %s claimed once", claimed, follows.ID)
	}
	if n, err := s.FailOrphanedTasks(ctx, []string{"n-live", "n-a", "n-b", "n-c"}, "gone", false); err != nil || n != 0 {
		t.Errorf("FailOrphanedTasks after the claim = %d, %v; want none left", n, err)
	}
	for id, want := range map[string]string{follows.ID: persistence.TaskWorking, plain.ID: persistence.TaskFailed, alive.ID: persistence.TaskWorking} {
		if got, err := s.GetTask(ctx, id); err != nil || got.Status != want {
			t.Errorf("task %s = %s, %v; want %s", id, got.Status, err, want)
		}
	}
	if again, err := s.ClaimOrphanedTasks(ctx, []string{"n-live", "n-a", "n-b", "n-c"}, "n-a"); err != nil || len(again) != 0 {
		t.Errorf("a second claim = %v, %v; want none", again, err)
	}
}
