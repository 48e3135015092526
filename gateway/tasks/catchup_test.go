package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// feedPair is two nodes' Managers on one store whose announcements reach each other while the feed is up.
type feedPair struct {
	a, b  *Manager
	up    atomic.Bool
	heard chan string // "id status" told to b's hooks
}

func newFeedPair(t *testing.T) *feedPair {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "tasks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	p := &feedPair{heard: make(chan string, 64)}
	p.up.Store(true)
	to := func(m **Manager) func(persistence.Task) {
		return func(t persistence.Task) {
			if p.up.Load() {
				t.Result, t.Error, t.InputRequest = nil, nil, nil
				(*m).Announced(t)
			}
		}
	}
	p.a = New(Config{Store: s, Node: "node-a", Announce: to(&p.b)})
	p.b = New(Config{Store: s, Node: "node-b", Announce: to(&p.a)})
	t.Cleanup(p.a.Close)
	t.Cleanup(p.b.Close)
	t.Cleanup(p.b.OnStatus(func(t persistence.Task) { p.heard <- t.ID + " " + t.Status }))
	return p
}

// drain is what b's hooks were told so far.
func (p *feedPair) drain() []string {
	var out []string
	for {
		select {
		case s := <-p.heard:
			out = append(out, s)
		default:
			return out
		}
	}
}

// waitDone waits for the run of task id on m to end.
func waitDone(t *testing.T, m *Manager, id string) {
	t.Helper()
	if done := m.Done(id); done != nil {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("task %s still runs", id)
		}
	}
}

// TestCatchUp: node B's feed breaks while tasks change on node A; once it is back, B's catch-up tells its hooks of
// each change it missed for the owners that use B (once: a second catch-up tells nothing), of a task it was last
// told open whoever owns it, and of nothing for an owner that never used B; a task running on B that was cancelled
// through A meanwhile has its call stopped.
func TestCatchUp(t *testing.T) {
	ok := Outcome{Result: json.RawMessage(`{"content":[]}`)}
	tests := []struct {
		name string
		// run makes the changes while B's feed is down; it returns the task and what B's hooks must be told of it
		// by the catch-up ("" nothing).
		run func(t *testing.T, p *feedPair) (id, want string)
	}{
		{name: "a task of an owner that used B ended unheard", run: func(t *testing.T, p *feedPair) (string, string) {
			if _, _, err := p.b.List(t.Context(), alice, false, 10, 0); err != nil { // alice's session on B
				t.Fatal(err)
			}
			p.b.catching.Wait() // (her tasks caught up on: none yet)
			task, release := startHeld(t, p.a, ok)
			p.up.Store(false)
			close(release)
			waitDone(t, p.a, task.ID)
			return task.ID, task.ID + " completed"
		}},
		{name: "a task B was told open, of an owner that never used B, cancelled unheard", run: func(t *testing.T, p *feedPair) (string, string) {
			task, err := p.a.Start(t.Context(), bob, "every.slow", "every", nil, func(ctx context.Context) Outcome {
				<-ctx.Done()
				return Outcome{Message: "stopped"}
			})
			if err != nil {
				t.Fatal(err)
			}
			task.Status = persistence.TaskInputRequired
			p.b.Announced(task) // as A announced it while the feed was up
			p.drain()
			p.up.Store(false)
			if _, err := p.a.Cancel(t.Context(), bob, task.ID, true); err != nil {
				t.Fatal(err)
			}
			return task.ID, task.ID + " cancelled"
		}},
		{name: "a task a listen on B follows, older than its owner's newest", run: func(t *testing.T, p *feedPair) (string, string) {
			task, release := startHeld(t, p.a, ok)
			read, err := p.b.GetOwn(t.Context(), alice, task.ID) // a listen on B names it
			if err != nil {
				t.Fatal(err)
			}
			p.b.Follow(read)
			p.b.catching.Wait()
			time.Sleep(2 * time.Millisecond) // the newer tasks are created later
			for range catchUpPage {
				newer, err := p.a.Start(t.Context(), alice, "every.echo", "every", nil, func(context.Context) Outcome { return ok })
				if err != nil {
					t.Fatal(err)
				}
				waitDone(t, p.a, newer.ID)
				p.drain() // (told to B's hooks while the feed is up)
			}
			p.up.Store(false)
			close(release)
			waitDone(t, p.a, task.ID)
			return task.ID, task.ID + " completed"
		}},
		{name: "a task of an owner that never used B", run: func(t *testing.T, p *feedPair) (string, string) {
			p.up.Store(false)
			task, err := p.a.Start(t.Context(), bob, "every.echo", "every", nil, func(context.Context) Outcome { return ok })
			if err != nil {
				t.Fatal(err)
			}
			waitDone(t, p.a, task.ID)
			return task.ID, ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newFeedPair(t)
			id, want := tc.run(t, p)
			if heard := p.drain(); len(heard) > 0 {
				t.Fatalf("B heard %v while its feed was down", heard)
			}
			p.up.Store(true)
			n, err := p.b.CatchUp(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			heard := p.drain()
			var wantHeard []string
			if want != "" {
				wantHeard = []string{want}
			}
			if len(heard) != len(wantHeard) || (len(heard) == 1 && heard[0] != want) || n != len(wantHeard) {
				t.Errorf("catch-up told %d: %v, want %v of task %s", n, heard, wantHeard, id)
			}
			if n, err := p.b.CatchUp(t.Context()); err != nil || n != 0 {
				t.Errorf("a second catch-up told %d (%v), want nothing", n, err)
			}
			if heard := p.drain(); len(heard) > 0 {
				t.Errorf("a second catch-up told %v", heard)
			}
		})
	}

	t.Run("a task running on B cancelled through A", func(t *testing.T) {
		p := newFeedPair(t)
		stopped := make(chan struct{})
		task, err := p.b.Start(t.Context(), alice, "every.slow", "every", nil, func(ctx context.Context) Outcome {
			<-ctx.Done()
			close(stopped)
			return Outcome{Message: "stopped"}
		})
		if err != nil {
			t.Fatal(err)
		}
		p.up.Store(false)
		if _, err := p.a.Cancel(t.Context(), alice, task.ID, true); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
			t.Fatal("the run stopped without hearing of the cancellation")
		case <-time.After(200 * time.Millisecond):
		}
		p.up.Store(true)
		if _, err := p.b.CatchUp(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("the catch-up did not stop the run of a task cancelled elsewhere")
		}
	})
}

// TestAnnouncedStale: an announcement older than what the hooks were told (a final status, or a later update) is
// not told again.
func TestAnnouncedStale(t *testing.T) {
	m, _ := newManager(t, Config{})
	heard := make(chan string, 16)
	defer m.OnStatus(func(t persistence.Task) { heard <- t.Status })()
	at := time.Now()
	task := func(status string, updated time.Time) persistence.Task {
		return persistence.Task{ID: "elsewhere", Owner: "token:alice", Status: status, UpdatedAt: updated}
	}
	tests := []struct {
		task persistence.Task
		want string // "" not told
	}{
		{task("input_required", at), "input_required"},
		{task("working", at.Add(-time.Second)), ""}, // older than the one told
		{task("working", at.Add(time.Second)), "working"},
		{task("completed", at.Add(2*time.Second)), "completed"},
		{task("input_required", at.Add(3*time.Second)), ""}, // after the final status
		{task("completed", at.Add(2*time.Second)), ""},      // the final status again
	}
	for i, tc := range tests {
		m.Announced(tc.task)
		got := ""
		select {
		case got = <-heard:
		default:
		}
		if got != tc.want {
			t.Errorf("announcement %d (%s): told %q, want %q", i, tc.task.Status, got, tc.want)
		}
	}
}

// startHeld starts a task of alice on m that runs until release is closed, then ends with out.
func startHeld(t *testing.T, m *Manager, out Outcome) (persistence.Task, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	task, err := m.Start(t.Context(), alice, "every.slow", "every", nil, func(context.Context) Outcome {
		<-release
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	return task, release
}

// readsStore is a task store whose reads of an owner's newest tasks as a catch-up reads them (catchUpPage) are
// counted, and go through read when it is set.
type readsStore struct {
	persistence.TaskStore
	pages atomic.Int32
	read  func(ctx context.Context) error
}

func (s *readsStore) ListTasks(ctx context.Context, f persistence.ListTasksFilter) ([]persistence.Task, bool, error) {
	if f.Limit == catchUpPage && f.Owner != "" {
		s.pages.Add(1)
		if s.read != nil {
			if err := s.read(ctx); err != nil {
				return nil, false, err
			}
		}
	}
	return s.TaskStore.ListTasks(ctx, f)
}

// inputRequiredElsewhere stores a task of owner running on node-a, input_required with a pending request.
func inputRequiredElsewhere(t *testing.T, s persistence.TaskStore, owner string) persistence.Task {
	t.Helper()
	task := persistence.Task{Owner: owner, Tool: "every.ask", Server: "every", Node: "node-a", TTL: time.Hour}
	if err := s.CreateTask(t.Context(), &task, 0); err != nil {
		t.Fatal(err)
	}
	msg := "Waiting for the client's answer: which python?"
	task, err := s.UpdateTask(t.Context(), task.ID, persistence.TaskUpdate{Status: persistence.TaskInputRequired,
		StatusMessage: &msg, InputRequest: json.RawMessage(`{"key":"in-1","method":"elicitation/create","params":{}}`)})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestCatchUpNewOwner: node B starts after a task of alice's went input_required on node A (B never heard it). The
// first task request of alice on B, whichever it is, has B's hooks told of that task (in the background), and of
// none of bob's; her next requests read nothing more. A read that failed is tried again at her next request; Close
// ends a read under way and starts none after.
func TestCatchUpNewOwner(t *testing.T) {
	ok := Outcome{Result: json.RawMessage(`{"content":[]}`)}
	setup := func(t *testing.T) (*readsStore, persistence.Task) {
		db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "tasks.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		s := &readsStore{TaskStore: db}
		task := inputRequiredElsewhere(t, s, Owner(alice))
		inputRequiredElsewhere(t, s, Owner(bob))
		return s, task
	}
	nodeB := func(t *testing.T, s persistence.TaskStore) (*Manager, chan string) {
		m := New(Config{Store: s, Node: "node-b"})
		t.Cleanup(m.Close)
		heard := make(chan string, 16)
		t.Cleanup(m.OnStatus(func(t persistence.Task) { heard <- t.ID + " " + t.Status }))
		return m, heard
	}
	drain := func(heard chan string) []string {
		var out []string
		for {
			select {
			case s := <-heard:
				out = append(out, s)
			default:
				return out
			}
		}
	}
	// settle waits for the catch-ups under way and returns the store's catch-up reads so far and what the hooks
	// heard since the last look.
	settle := func(m *Manager, s *readsStore, heard chan string) (int32, []string) {
		m.catching.Wait()
		return s.pages.Load(), drain(heard)
	}
	tests := []struct {
		name  string
		first func(t *testing.T, m *Manager)
	}{
		{"tasks/list", func(t *testing.T, m *Manager) {
			if _, _, err := m.List(t.Context(), alice, false, 10, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"tasks/get of an unknown task", func(t *testing.T, m *Manager) {
			if _, err := m.GetOwn(t.Context(), alice, "unknown"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get = %v, want not found", err)
			}
		}},
		{"a task-augmented call (its own task is not told: it runs here)", func(t *testing.T, m *Manager) {
			if _, err := m.Start(t.Context(), alice, "every.echo", "every", nil, func(ctx context.Context) Outcome {
				<-ctx.Done()
				return ok
			}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, task := setup(t)
			m, heard := nodeB(t, s)
			tc.first(t, m)
			want := task.ID + " " + persistence.TaskInputRequired
			select {
			case got := <-heard:
				if got != want {
					t.Fatalf("B's hooks heard %q first, want %q", got, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("B's hooks never heard alice's task input_required on A")
			}
			m.catching.Wait()
			if more := drain(heard); len(more) > 0 {
				t.Errorf("B's hooks heard %v too, want only alice's task on A", more)
			}
			if _, _, err := m.List(t.Context(), alice, false, 10, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := m.GetOwn(t.Context(), alice, task.ID); err != nil {
				t.Fatal(err)
			}
			n, more := settle(m, s, heard)
			if n != 1 {
				t.Errorf("alice's tasks read %d times for catch-ups, want once", n)
			}
			if len(more) > 0 {
				t.Errorf("B's hooks heard %v after alice's next requests", more)
			}
		})
	}

	t.Run("a failed read is tried again", func(t *testing.T) {
		s, task := setup(t)
		var fail atomic.Bool
		fail.Store(true)
		s.read = func(context.Context) error {
			if fail.Swap(false) {
				return errors.New("store unreachable")
			}
			return nil
		}
		m, heard := nodeB(t, s)
		if _, _, err := m.List(t.Context(), alice, false, 10, 0); err != nil {
			t.Fatal(err)
		}
		m.catching.Wait()
		if got := drain(heard); len(got) > 0 {
			t.Fatalf("B's hooks heard %v of a read that failed", got)
		}
		if _, _, err := m.List(t.Context(), alice, false, 10, 0); err != nil {
			t.Fatal(err)
		}
		n, got := settle(m, s, heard)
		if len(got) != 1 || got[0] != task.ID+" "+persistence.TaskInputRequired {
			t.Errorf("after the retry B's hooks heard %v, want alice's task input_required", got)
		}
		if n != 2 {
			t.Errorf("alice's tasks read %d times for catch-ups, want twice", n)
		}
	})

	t.Run("Close ends a read under way and starts none", func(t *testing.T) {
		s, _ := setup(t)
		reading := make(chan struct{})
		s.read = func(ctx context.Context) error {
			close(reading)
			<-ctx.Done()
			return ctx.Err()
		}
		m, heard := nodeB(t, s)
		if _, _, err := m.List(t.Context(), alice, false, 10, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reading:
		case <-time.After(10 * time.Second):
			t.Fatal("alice's first request on B started no catch-up")
		}
		closed := make(chan struct{})
		go func() { m.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(ownerCatchUpTimeout / 2):
			t.Fatal("Close waits for an owner's catch-up to time out")
		}
		if _, _, err := m.List(t.Context(), bob, false, 10, 0); err != nil {
			t.Fatal(err)
		}
		n, got := settle(m, s, heard)
		if n != 1 {
			t.Errorf("%d catch-up reads, want alice's only (none after Close)", n)
		}
		if len(got) > 0 {
			t.Errorf("B's hooks heard %v", got)
		}
	})
}
