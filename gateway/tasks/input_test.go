package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestAnswer: a client's answer reaches the request its task waits on, once: on this node when it waits here (only
// an answer of the task's owner), else on the node running the task (Config.SendInput), whose taker decides; an
// answer to a request not pending is not taken, and a pending one whose request does not wait yet is offered again
// until it does.
func TestAnswer(t *testing.T) {
	answer := json.RawMessage(`{"action":"accept"}`)
	pending := func(key string) json.RawMessage {
		return json.RawMessage(`{"key":"` + key + `","method":"elicitation/create","params":{}}`)
	}
	tests := []struct {
		name      string
		task      persistence.Task // the task as the store has it
		waitOwner string           // the owner a request of the task waits here under key "k" for; "" none
		waitLate  time.Duration    // the request starts waiting this late
		remote    func(Input) (bool, error)
		want      bool
		wantErr   bool
		wantSent  int
	}{
		{name: "waits here", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-a"}, waitOwner: "token:alice", want: true},
		{name: "another owner's request", task: persistence.Task{ID: "t", Owner: "token:bob", Node: "node-a"}, waitOwner: "token:alice"},
		{name: "not pending anywhere", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-a"}},
		{name: "pending, waits a moment later", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-a", InputRequest: pending("k")},
			waitOwner: "token:alice", waitLate: 200 * time.Millisecond, want: true},
		{name: "runs on another node that takes it", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-b"},
			remote: func(in Input) (bool, error) { return in.Owner == "token:alice" && in.Key == "k", nil }, want: true, wantSent: 1},
		{name: "runs on another node that does not take it", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-b"},
			remote: func(Input) (bool, error) { return false, nil }, wantSent: 1},
		{name: "the other node cannot be reached", task: persistence.Task{ID: "t", Owner: "token:alice", Node: "node-b"},
			remote: func(Input) (bool, error) { return false, errors.New("timeout") }, wantErr: true, wantSent: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			sent := 0
			cfg := Config{}
			if tc.remote != nil {
				cfg.SendInput = func(_ context.Context, node string, in Input) (bool, error) {
					mu.Lock()
					sent++
					mu.Unlock()
					if node != tc.task.Node {
						t.Errorf("sent to %q, want %q", node, tc.task.Node)
					}
					return tc.remote(in)
				}
			}
			m, _ := newManager(t, cfg)
			var got <-chan json.RawMessage
			ready := make(chan struct{})
			register := func() {
				ch, stop := m.AwaitInput(tc.waitOwner, "t", "k")
				t.Cleanup(stop)
				got = ch
				close(ready)
			}
			switch {
			case tc.waitOwner == "":
				close(ready)
			case tc.waitLate == 0:
				register()
			default:
				go func() {
					time.Sleep(tc.waitLate)
					register()
				}()
			}
			taken, err := m.Answer(t.Context(), tc.task, "k", answer)
			if taken != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("Answer = %v, %v; want %v (error %v)", taken, err, tc.want, tc.wantErr)
			}
			if sent != tc.wantSent {
				t.Errorf("sent to the other node %d times, want %d", sent, tc.wantSent)
			}
			<-ready
			if got != nil {
				select {
				case a := <-got:
					if !tc.want || string(a) != string(answer) {
						t.Errorf("the waiting request got %s", a)
					}
				default:
					if tc.want {
						t.Errorf("the waiting request got nothing")
					}
				}
			}
			// Taken once at most: the same answer again finds no request.
			if tc.want && m.TakeInput(Input{Task: "t", Key: "k", Owner: tc.task.Owner, Answer: answer}) {
				t.Errorf("a second answer was taken")
			}
		})
	}
}

// TestAnnounce: the status changes this node makes are announced (Config.Announce) and told to the hooks; those
// another node announced (Announced) are told to the hooks and not announced again.
func TestAnnounce(t *testing.T) {
	announced := make(chan string, 16)
	m, _ := newManager(t, Config{Announce: func(t persistence.Task) { announced <- t.ID + " " + t.Status }})
	heard := make(chan string, 16)
	defer m.OnStatus(func(t persistence.Task) { heard <- t.ID + " " + t.Status })()
	task, err := m.Start(t.Context(), alice, "every.echo", "every", nil, func(context.Context) Outcome {
		return Outcome{Result: json.RawMessage(`{"content":[]}`)}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan string{announced, heard} {
		select {
		case got := <-ch:
			if got != task.ID+" completed" {
				t.Errorf("got %q, want the completion", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the completion was not told")
		}
	}
	m.Announced(persistence.Task{ID: "elsewhere", Status: persistence.TaskInputRequired})
	if got := <-heard; got != "elsewhere input_required" {
		t.Errorf("hook heard %q, want another node's change", got)
	}
	select {
	case got := <-announced:
		t.Errorf("another node's change announced again: %q", got)
	default:
	}
}

// TestAnnouncedEndStopsTheRun: a task running here that another node announces final (cancelled through it) has
// its call stopped; an announced status change of a task still open does not stop it.
func TestAnnouncedEndStopsTheRun(t *testing.T) {
	m, _ := newManager(t, Config{})
	stopped := make(chan struct{})
	task, err := m.Start(t.Context(), alice, "every.slow", "every", nil, func(ctx context.Context) Outcome {
		<-ctx.Done()
		close(stopped)
		return Outcome{Message: "stopped"}
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Announced(persistence.Task{ID: task.ID, Owner: task.Owner, Status: persistence.TaskInputRequired})
	select {
	case <-stopped:
		t.Fatal("an open status stopped the run")
	case <-time.After(200 * time.Millisecond):
	}
	m.Announced(persistence.Task{ID: task.ID, Owner: task.Owner, Status: persistence.TaskCancelled})
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not stopped by another node's cancellation")
	}
}
