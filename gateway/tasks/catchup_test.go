package tasks

import (
	"context"
	"encoding/json"
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
