package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// A task's backend may wait on its client's answer (input_required) that the client gives later, by a request of
// its own (a 2026-07-28 client's tasks/update): the request waits on the node running the task (AwaitInput), and
// the answer may arrive at any node. The Manager hands it to the waiting request when it waits here, else sends it
// to the node running the task (Config.SendInput), whose Manager takes it (TakeInput). A request takes one answer:
// the first; the others are ignored, as the tasks extension allows.

// Input is a client's answer to the request a task waits on under Key (the task's input key, InputKey), given by
// Owner (the task's owner, as the node that received it checked it).
type Input struct {
	Task, Key, Owner string
	Answer           json.RawMessage
}

// inputWaiter is one request of a task waiting for its client's answer.
type inputWaiter struct {
	owner string
	ch    chan json.RawMessage
}

// inputWaiters are this node's requests waiting for their client's answer, by task id and input key.
type inputWaiters struct {
	mu sync.Mutex
	m  map[string]inputWaiter
}

func waiterKey(task, key string) string { return task + "/" + key }

// AwaitInput registers the request of owner's task waiting under key; the channel gets the client's answer.
// stop unregisters it (once the answer came, or the wait was given up).
func (m *Manager) AwaitInput(owner, task, key string) (answer <-chan json.RawMessage, stop func()) {
	w := inputWaiter{owner: owner, ch: make(chan json.RawMessage, 1)}
	k := waiterKey(task, key)
	m.inputs.mu.Lock()
	m.inputs.m[k] = w
	m.inputs.mu.Unlock()
	return w.ch, func() {
		m.inputs.mu.Lock()
		if m.inputs.m[k].ch == w.ch {
			delete(m.inputs.m, k)
		}
		m.inputs.mu.Unlock()
	}
}

// TakeInput hands in's answer to the request waiting on this node under its task and key, when one does and its
// task is in's owner's; it reports whether one took it (at most one ever does).
func (m *Manager) TakeInput(in Input) bool {
	k := waiterKey(in.Task, in.Key)
	m.inputs.mu.Lock()
	w, ok := m.inputs.m[k]
	if ok && w.owner == in.Owner {
		delete(m.inputs.m, k)
	}
	m.inputs.mu.Unlock()
	if !ok || w.owner != in.Owner {
		return false
	}
	w.ch <- in.Answer // buffered, and only the one that removed the waiter sends
	return true
}

// inputRetry and inputPatience: an answer to the request the task's row says is pending, that no request takes
// yet, is offered again every inputRetry for up to inputPatience (the task is stored input_required just before
// its request starts waiting, and a client may answer in between).
const (
	inputRetry    = 50 * time.Millisecond
	inputPatience = 2 * time.Second
)

// Answer hands the client's answer under key to the request task t (read from the store, the caller's own) waits
// on: on this node, or on the node running t. It reports whether a request took it; an answer no request waits
// for (unknown, answered already, or t running on a node that cannot be reached) is not taken, and no error.
func (m *Manager) Answer(ctx context.Context, t persistence.Task, key string, answer json.RawMessage) (bool, error) {
	in := Input{Task: t.ID, Key: key, Owner: t.Owner, Answer: answer}
	pendingKey, _, _, pending := PendingInput(t)
	deadline := time.Now().Add(inputPatience)
	for {
		if m.TakeInput(in) {
			return true, nil
		}
		if t.Node != "" && t.Node != m.cfg.Node && m.cfg.SendInput != nil {
			taken, err := m.cfg.SendInput(ctx, t.Node, in)
			if err != nil {
				return false, fmt.Errorf("tasks: answer task %s on node %s: %w", t.ID, t.Node, err)
			}
			if taken {
				return true, nil
			}
		}
		if !pending || pendingKey != key || !time.Now().Before(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(inputRetry):
		}
	}
}
