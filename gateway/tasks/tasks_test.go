package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

var (
	alice = auth.Identity{Name: "alice", Scope: auth.ScopeClient}
	bob   = auth.Identity{Name: "bob", Scope: auth.ScopeClient}
	admin = auth.Identity{Name: "root", Scope: auth.ScopeAdmin}
)

func newManager(t *testing.T, cfg Config) (*Manager, persistence.Store) {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg.Store = s
	if cfg.Node == "" {
		cfg.Node = "node-a"
	}
	m := New(cfg)
	t.Cleanup(m.Close)
	return m, s
}

func TestOwner(t *testing.T) {
	tests := []struct {
		id   auth.Identity
		want string
	}{
		{auth.Anonymous("10.0.0.1"), "anonymous"},
		{alice, "token:alice"},
		{auth.Identity{Name: "alice", OAuth: true}, "sub:alice"},
	}
	for _, tc := range tests {
		if got := Owner(tc.id); got != tc.want {
			t.Errorf("Owner(%+v) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

func TestTTL(t *testing.T) {
	m := New(Config{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour})
	d := func(v time.Duration) *time.Duration { return &v }
	tests := []struct {
		asked *time.Duration
		want  time.Duration
	}{
		{nil, time.Hour},
		{d(time.Millisecond), MinTTL},
		{d(90 * time.Minute), 90 * time.Minute},
		{d(48 * time.Hour), 2 * time.Hour},
	}
	for _, tc := range tests {
		if got := m.TTL(tc.asked); got != tc.want {
			t.Errorf("TTL(%v) = %v, want %v", tc.asked, got, tc.want)
		}
	}
}

func TestCompletesAndIsolates(t *testing.T) {
	m, _ := newManager(t, Config{})
	ctx := t.Context()
	result := json.RawMessage(`{"content":[{"type":"text","text":"42"}]}`)
	task, err := m.Start(ctx, alice, "srv__answer", "srv", nil, func(context.Context) Outcome { return Outcome{Result: result} })
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != persistence.TaskWorking || task.Owner != "token:alice" || task.Node != "node-a" || task.TTL != DefaultTTL {
		t.Errorf("started task = %+v", task)
	}
	got, err := m.Wait(ctx, alice, task.ID, time.Minute, true)
	if err != nil || got.Status != persistence.TaskCompleted || string(got.Result) != string(result) {
		t.Fatalf("Wait = %+v, %v; want completed with the result", got, err)
	}
	tests := []struct {
		name   string
		caller auth.Identity
		own    bool
		found  bool
	}{
		{"owner", alice, true, true},
		{"another caller", bob, false, false},
		{"another caller, own", bob, true, false},
		{"admin reads any", admin, false, true},
		{"admin's own only", admin, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			get := m.Get
			if tc.own {
				get = m.GetOwn
			}
			_, err := get(ctx, tc.caller, task.ID)
			if tc.found != (err == nil) || (!tc.found && !errors.Is(err, ErrNotFound)) {
				t.Errorf("get = %v, found want %v", err, tc.found)
			}
			if _, err := m.Cancel(ctx, tc.caller, task.ID, tc.own); tc.found && !errors.Is(err, ErrFinished) || !tc.found && !errors.Is(err, ErrNotFound) {
				t.Errorf("cancel of a completed task = %v", err)
			}
		})
	}
	list, _, err := m.List(ctx, bob, true, 0, 0)
	if err != nil || len(list) != 0 {
		t.Errorf("bob's listing (all asked, not admin) = %v, %v; want none", list, err)
	}
	list, _, err = m.List(ctx, admin, true, 0, 0)
	if err != nil || len(list) != 1 {
		t.Errorf("admin's listing of all = %v, %v; want alice's task", list, err)
	}
}

func TestFailureCancelLimitAndStop(t *testing.T) {
	m, s := newManager(t, Config{MaxOpenPerOwner: 2})
	ctx := t.Context()
	failedTask, err := m.Start(ctx, alice, "srv__boom", "srv", nil, func(context.Context) Outcome {
		return Outcome{Error: json.RawMessage(`{"code":-32603,"message":"boom"}`), Message: "boom"}
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := m.Wait(ctx, alice, failedTask.ID, time.Minute, true)
	if got.Status != persistence.TaskFailed || got.StatusMessage != "boom" || string(got.Error) != `{"code":-32603,"message":"boom"}` {
		t.Errorf("failed task = %+v", got)
	}

	stopped := make(chan struct{})
	block := func(ctx context.Context) Outcome {
		<-ctx.Done()
		close(stopped)
		return Outcome{Message: ctx.Err().Error()}
	}
	running, err := m.Start(ctx, alice, "srv__slow", "srv", nil, block)
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.Start(ctx, alice, "srv__slow", "srv", nil, func(ctx context.Context) Outcome { <-ctx.Done(); return Outcome{} })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, alice, "srv__slow", "srv", nil, block); !errors.Is(err, ErrLimit) {
		t.Fatalf("third open task = %v, want ErrLimit", err)
	}
	if _, err := m.Cancel(ctx, bob, running.ID, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob cancels alice's task: %v, want not found", err)
	}
	c, err := m.Cancel(ctx, alice, running.ID, true)
	if err != nil || c.Status != persistence.TaskCancelled {
		t.Fatalf("Cancel = %+v, %v", c, err)
	}
	<-stopped // the call's context was cancelled
	got, _ = m.Wait(ctx, alice, running.ID, time.Minute, true)
	if got.Status != persistence.TaskCancelled || got.StatusMessage != MsgCancelled {
		t.Errorf("cancelled task after its call returned = %+v", got)
	}

	m.Close() // the daemon stops: the task still running fails with the reason
	got, err = s.GetTask(ctx, other.ID)
	if err != nil || got.Status != persistence.TaskFailed || got.StatusMessage != MsgStopped {
		t.Errorf("task running at Close = %+v, %v", got, err)
	}
}

func TestWaitTimesOutAndRecover(t *testing.T) {
	m, s := newManager(t, Config{})
	ctx := t.Context()
	release := make(chan struct{})
	task, err := m.Start(ctx, alice, "srv__slow", "srv", nil, func(context.Context) Outcome {
		<-release
		return Outcome{Result: json.RawMessage(`{}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Wait(ctx, alice, task.ID, 10*time.Millisecond, true)
	if err != nil || got.Status != persistence.TaskWorking {
		t.Errorf("Wait before the end = %+v, %v; want working", got, err)
	}
	close(release)
	if got, _ := m.Wait(ctx, alice, task.ID, time.Minute, true); got.Status != persistence.TaskCompleted {
		t.Errorf("Wait = %+v, want completed", got)
	}

	orphan := persistence.Task{Owner: "token:alice", Tool: "srv__x", Node: "dead-node", TTL: time.Hour}
	if err := s.CreateTask(ctx, &orphan, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := m.Recover(ctx, []string{"node-a"}); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	got, _ = m.Get(ctx, alice, orphan.ID)
	if got.Status != persistence.TaskFailed || got.StatusMessage != MsgStopped {
		t.Errorf("orphan after Recover = %+v", got)
	}
	expired := persistence.Task{Owner: "token:alice", Tool: "srv__x", TTL: time.Millisecond}
	if err := s.CreateTask(ctx, &expired, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, err := m.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want 1", n, err)
	}
	if _, err := m.Get(ctx, alice, expired.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired task after Sweep: %v", err)
	}
}

// TestRecoverResumesFollowedTasks: at start, with Resume set, this node's own open tasks of a previous run and
// those of a stopped node that follow a backend's task are claimed and resumed (the task id reaches the resumed
// call's context, the outcome is stored); the plain ones fail; a live node's task is left alone. Without Resume,
// every orphan fails.
func TestRecoverResumesFollowedTasks(t *testing.T) {
	for _, resume := range []bool{true, false} {
		t.Run(map[bool]string{true: "resume", false: "no resume"}[resume], func(t *testing.T) {
			resumed := make(chan string, 4)
			cfg := Config{Node: "node-a", LiveNodes: func(context.Context) ([]string, error) { return []string{"node-a", "node-live"}, nil }}
			if resume {
				cfg.Resume = func(ctx context.Context, task persistence.Task) Outcome {
					resumed <- TaskID(ctx) + "/" + task.BackendTaskID
					return Outcome{Result: json.RawMessage(`{"content":[]}`)}
				}
			}
			m, s := newManager(t, cfg)
			ctx := t.Context()
			mk := func(node, backendTask string) string {
				task := persistence.Task{Owner: "token:alice", Tool: "tb.countdown", Server: "tb", Node: node, TTL: time.Hour}
				if err := s.CreateTask(ctx, &task, 0); err != nil {
					t.Fatal(err)
				}
				if backendTask != "" {
					if err := s.SetTaskBackend(ctx, task.ID, backendTask, "srv-1"); err != nil {
						t.Fatal(err)
					}
				}
				return task.ID
			}
			own, dead, plain, live := mk("node-a", "b-own"), mk("node-dead", "b-dead"), mk("node-a", ""), mk("node-live", "b-live")
			if err := m.RecoverAtStart(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{own: persistence.TaskFailed, dead: persistence.TaskFailed, plain: persistence.TaskFailed, live: persistence.TaskWorking}
			if resume {
				got := map[string]bool{<-resumed: true, <-resumed: true}
				if !got[own+"/b-own"] || !got[dead+"/b-dead"] {
					t.Errorf("resumed %v, want %s/b-own and %s/b-dead", got, own, dead)
				}
				for _, id := range []string{own, dead} {
					if task, err := m.Wait(ctx, alice, id, 10*time.Second, true); err != nil || task.Status != persistence.TaskCompleted {
						t.Errorf("resumed task %s = %+v, %v", id, task, err)
					}
				}
				want[own], want[dead] = persistence.TaskCompleted, persistence.TaskCompleted
			}
			for id, status := range want {
				if task, err := s.GetTask(ctx, id); err != nil || task.Status != status {
					t.Errorf("task %s = %s, %v; want %s", id, task.Status, err, status)
				}
			}
		})
	}
}

// TestInputWatcher: a task's call sees an input watcher in its context; while one or more of its backend's
// requests wait on the client, the task is input_required with the last request stored and the elicitation's
// question in its status message; once all are answered it works again, the request cleared.
func TestInputWatcher(t *testing.T) {
	m, s := newManager(t, Config{})
	ctx := t.Context()
	type step struct{ want, msg string }
	seen := make(chan []step, 1)
	started, err := m.Start(ctx, alice, "every.research", "every", nil, func(ctx context.Context) Outcome {
		watch := InputWatch(ctx)
		if watch == nil {
			return Outcome{Message: "no input watcher in the call's context"}
		}
		id := TaskID(ctx)
		var steps []step
		keys := map[string]string{} // input key -> its name in the steps
		look := func() {
			task, _ := s.GetTask(ctx, id)
			pending := ""
			if key, method, params, ok := PendingInput(task); ok {
				pending = keys[key] + " " + method + " " + string(params)
			}
			steps = append(steps, step{strings.TrimSpace(task.Status + " " + pending), task.StatusMessage})
		}
		fctx, first := watch(ctx, "elicitation/create", json.RawMessage(`{"message":"Which python?"}`))
		keys[InputKey(fctx)] = "k1"
		look()
		sctx, second := watch(ctx, "sampling/createMessage", json.RawMessage(`{"maxTokens":5}`))
		keys[InputKey(sctx)] = "k2"
		if len(keys) != 2 || keys[""] != "" {
			return Outcome{Message: fmt.Sprintf("input keys %v: want two distinct ones", keys)}
		}
		look()
		first()
		first() // answering twice counts once
		look()
		second()
		look()
		seen <- steps
		return Outcome{Result: json.RawMessage(`{"content":[]}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := <-seen
	want := []step{
		{`input_required k1 elicitation/create {"message":"Which python?"}`, "Waiting for the client's answer: Which python?"},
		{`input_required k2 sampling/createMessage {"maxTokens":5}`, "Waiting for the client's answer to sampling/createMessage"},
		{`input_required k2 sampling/createMessage {"maxTokens":5}`, "Waiting for the client's answer to sampling/createMessage"},
		{"working", ""},
	}
	if len(steps) != len(want) {
		t.Fatalf("steps = %v", steps)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d = %+v, want %+v", i, steps[i], want[i])
		}
	}
	if got, err := m.Wait(ctx, alice, started.ID, 10*time.Second, true); err != nil || got.Status != persistence.TaskCompleted {
		t.Errorf("task = %+v, %v", got, err)
	}
}

// TestHandOverLeavesFollowedTasksOpen: when the daemon begins to stop, a task that follows a backend's task is
// handed over: however its call then ends (the drain cancels it), nothing is stored and it stays open, and Close
// neither cancels nor waits for it; a task held around a plain call is still failed as stopped.
func TestHandOverLeavesFollowedTasksOpen(t *testing.T) {
	m, s := newManager(t, Config{Resume: func(context.Context, persistence.Task) Outcome { return Outcome{} }})
	ctx := t.Context()
	release := make(chan struct{})
	callEnded := make(chan struct{})
	followed, err := m.Start(ctx, alice, "tb.countdown", "tb", nil, func(ctx context.Context) Outcome {
		if err := s.SetTaskBackend(ctx, TaskID(ctx), "backend-1", "srv-1"); err != nil {
			return Outcome{Message: err.Error()}
		}
		<-release // the daemon's drain ends the call
		defer close(callEnded)
		return Outcome{Error: json.RawMessage(`{"code":-32603,"message":"shutting down"}`), Message: "shutting down"}
	})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := m.Start(ctx, alice, "back.slow", "back", nil, func(ctx context.Context) Outcome {
		<-ctx.Done()
		return Outcome{Message: "cancelled"}
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if task, _ := s.GetTask(ctx, followed.ID); task.BackendTaskID != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.HandOver()
	close(release)
	<-callEnded
	m.Close() // returns without the followed run
	for id, want := range map[string]string{followed.ID: persistence.TaskWorking, plain.ID: persistence.TaskFailed} {
		task, err := s.GetTask(ctx, id)
		if err != nil || task.Status != want {
			t.Errorf("task %s = %s %q, %v; want %s", id, task.Status, task.StatusMessage, err, want)
		}
	}
}

// TestStatusHook: the hooks registered with OnStatus hear each status this node stores (input_required and back,
// completed, cancelled), as stored; once removed, a hook hears nothing more.
func TestStatusHook(t *testing.T) {
	m, _ := newManager(t, Config{})
	ctx := t.Context()
	heard := make(chan string, 16)
	remove := m.OnStatus(func(task persistence.Task) { heard <- task.ID + " " + task.Status })
	release := make(chan struct{})
	done, err := m.Start(ctx, alice, "every.echo", "every", nil, func(ctx context.Context) Outcome {
		_, answered := InputWatch(ctx)(ctx, "elicitation/create", json.RawMessage(`{"message":"?"}`))
		answered()
		return Outcome{Result: json.RawMessage(`{"content":[]}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{done.ID + " input_required", done.ID + " working", done.ID + " completed"}
	for _, w := range want {
		select {
		case got := <-heard:
			if got != w {
				t.Errorf("heard %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("never heard %q", w)
		}
	}
	slow, err := m.Start(ctx, alice, "every.slow", "every", nil, func(ctx context.Context) Outcome {
		<-release
		return Outcome{Result: json.RawMessage(`{"content":[]}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cancel(ctx, alice, slow.ID, true); err != nil {
		t.Fatal(err)
	}
	if got := <-heard; got != slow.ID+" cancelled" {
		t.Errorf("heard %q, want the cancellation", got)
	}
	close(release)
	remove()
	last, err := m.Start(ctx, alice, "every.echo", "every", nil, func(context.Context) Outcome { return Outcome{Result: json.RawMessage(`{}`)} })
	if err != nil {
		t.Fatal(err)
	}
	// Hooks run before the run ends: once Wait sees the task final, a registered hook would have heard it.
	if got, err := m.Wait(ctx, alice, last.ID, 10*time.Second, true); err != nil || got.Status != persistence.TaskCompleted {
		t.Fatalf("last task = %+v, %v", got, err)
	}
	select {
	case got := <-heard:
		t.Errorf("removed hook heard %q", got)
	default:
	}
}
