package actors

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Durable tasks across nodes (issue 30). A task runs on the node that started it (its row's node), but its owner
// may come back through any node: a status change is announced to the other processes through the feed
// (PublishTaskStatus, OnTaskStatus), and a client's answer to a request the task waits on is sent to the node
// running it, to that node's task-inputs actor (SendTaskInput, ServeTaskInputs).

// TaskInputsActor is the name of each cluster node's actor that takes the answers to its tasks' pending requests.
const TaskInputsActor = "task-inputs"

// ServeTaskInputs sets take as the taker of the answers other nodes send to this node's tasks (SendTaskInput):
// it reports whether a request took the answer. Until it is called, no answer is taken.
func (s *System) ServeTaskInputs(take func(*pb.TaskInput) bool) {
	s.taskInputs.Store(&take)
}

// taskInputsProps is the task-inputs actor: each TaskInput is answered with whether a request took it.
func (s *System) taskInputsProps() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*pb.TaskInput); ok {
			c.Respond(&pb.TaskInputReply{Taken: s.takeTaskInput(m)})
		}
	})
}

func (s *System) takeTaskInput(m *pb.TaskInput) bool {
	take := s.taskInputs.Load()
	return take != nil && (*take)(m)
}

// SendTaskInput sends in to the task-inputs actor of node (a member id) and reports whether a request there took
// it. A node that is not a member (it stopped: its tasks are resumed or failed elsewhere), or that has no such
// actor, takes nothing; an error means the answer may not have arrived.
func (s *System) SendTaskInput(ctx context.Context, node string, in *pb.TaskInput) (bool, error) {
	if s.members == nil {
		return false, nil
	}
	addr, ok := s.members.Addr(node)
	if !ok || addr == "" {
		return false, nil
	}
	if addr == s.sys.Address() {
		return s.takeTaskInput(in), nil
	}
	timeout := s.deps.Config.AskTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return false, context.DeadlineExceeded
	}
	res, err := s.sys.Root.RequestFuture(actor.NewPID(addr, TaskInputsActor), in, timeout).Result()
	if err != nil {
		return false, fmt.Errorf("send a task's input to node %s: %w", node, err)
	}
	switch r := res.(type) {
	case *pb.TaskInputReply:
		return r.GetTaken(), nil
	case *actor.DeadLetterResponse:
		return false, nil
	default:
		return false, fmt.Errorf("send a task's input to node %s: unexpected reply %T", node, res)
	}
}

// PublishTaskStatus tells the other processes that this node changed t's status (nothing without a feed). A
// status message too long for a notice is cut.
func (s *System) PublishTaskStatus(t persistence.Task) {
	if s.feed == nil {
		return
	}
	msg := t.StatusMessage
	if len(msg) > maxFeedStatusMessage {
		msg = strings.ToValidUTF8(msg[:maxFeedStatusMessage], "") // a proto string is valid UTF-8
	}
	s.feed.Publish(&pb.TaskStatusChanged{TaskId: t.ID, Owner: t.Owner, Status: t.Status, StatusMessage: msg,
		CreatedUnixMs: t.CreatedAt.UnixMilli(), UpdatedUnixMs: t.UpdatedAt.UnixMilli(), TtlMs: t.TTL.Milliseconds(),
		PollIntervalMs: t.PollInterval.Milliseconds()})
}

// maxFeedStatusMessage bounds the status message a task's notice carries (a notice holds at most
// persistence.MaxNoticeBytes, base64 encoded, with the owner and the rest).
const maxFeedStatusMessage = 2048

// OnTaskStatus calls fn with the status changes of tasks that the other processes announced (PublishTaskStatus),
// each task as its notification shows it (no result, error or pending request), until the returned function is
// called. fn must not block.
func (s *System) OnTaskStatus(fn func(persistence.Task)) (cancel func()) {
	return s.taskHooks.Add(func(e *pb.TaskStatusChanged) {
		fn(persistence.Task{ID: e.GetTaskId(), Owner: e.GetOwner(), Status: e.GetStatus(), StatusMessage: e.GetStatusMessage(),
			CreatedAt: time.UnixMilli(e.GetCreatedUnixMs()), UpdatedAt: time.UnixMilli(e.GetUpdatedUnixMs()),
			TTL: time.Duration(e.GetTtlMs()) * time.Millisecond, PollInterval: time.Duration(e.GetPollIntervalMs()) * time.Millisecond})
	})
}

// OnTaskFeedGap calls fn each time the feed reconnected after a break, until the returned function is called: the
// task status changes other processes announced meanwhile were missed, and the caller reads them from the store
// (tasks.Manager.CatchUp). fn runs on the feed's goroutine, before any notice of the new connection, and must not
// block.
func (s *System) OnTaskFeedGap(fn func()) (cancel func()) {
	return s.taskGaps.Add(func(struct{}) { fn() })
}
