package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// taskConfig is the durable tasks' part of the configuration (issue 30).
type taskConfig struct {
	// MaxOpen caps the open tasks of one caller (0: no cap).
	MaxOpen int
	// TTL is a task's TTL when its caller asks none; MaxTTL the longest granted.
	TTL, MaxTTL time.Duration
}

func loadTaskConfig(get func(string) string, errs []string) (taskConfig, []string) {
	var c taskConfig
	raw := get("MCP_AGGREGATOR_MAX_OPEN_TASKS")
	if n, err := strconv.Atoi(raw); err != nil || n < 0 {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_MAX_OPEN_TASKS=%q: want a number of tasks >= 0 (0: no cap)", raw))
	} else {
		c.MaxOpen = n
	}
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{"MCP_AGGREGATOR_TASK_TTL", &c.TTL}, {"MCP_AGGREGATOR_TASK_MAX_TTL", &c.MaxTTL}} {
		raw := get(v.name)
		d, err := parseSeconds(raw)
		if err != nil || d < tasks.MinTTL {
			errs = append(errs, fmt.Sprintf("%s=%q: want at least 1 second", v.name, raw))
			continue
		}
		*v.dst = d
	}
	if c.TTL > c.MaxTTL && c.MaxTTL > 0 {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_TASK_TTL=%q: more than MCP_AGGREGATOR_TASK_MAX_TTL=%q",
			get("MCP_AGGREGATOR_TASK_TTL"), get("MCP_AGGREGATOR_TASK_MAX_TTL")))
	}
	return c, errs
}

// startTasks makes the daemon's task manager: tasks its previous run left open are marked failed (it is not
// running them), and expired tasks are swept, and the open tasks of nodes that stopped failed, until ctx ends.
// Through the cluster, a client's answer to a task's pending request goes to the node running the task, and
// status changes reach the other nodes' endpoints (taskSystem).
func startTasks(ctx context.Context, cfg config, store persistence.Store, nodeID string, sys taskSystem, logger *slog.Logger) *tasks.Manager {
	maxOpen := cfg.Tasks.MaxOpen
	if maxOpen == 0 {
		maxOpen = -1 // tasks.Config: negative is no cap
	}
	alive := 3 * cfg.Actors.LeaseTTL // a node writes its heartbeat every third of a lease TTL
	m := tasks.New(tasks.Config{Store: store, Node: nodeID, MaxOpenPerOwner: maxOpen, DefaultTTL: cfg.Tasks.TTL,
		MaxTTL: cfg.Tasks.MaxTTL, Logger: logger, OrphanInterval: cfg.Actors.LeaseTTL,
		Resume: func(ctx context.Context, t persistence.Task) tasks.Outcome {
			return resumeTask(ctx, sys, t, time.Second)
		},
		SendInput: func(ctx context.Context, node string, in tasks.Input) (bool, error) {
			return sys.SendTaskInput(ctx, node, &pb.TaskInput{TaskId: in.Task, Key: in.Key, Owner: in.Owner, AnswerJson: in.Answer})
		},
		Announce: sys.PublishTaskStatus,
		LiveNodes: func(ctx context.Context) ([]string, error) {
			nodes, err := store.ListNodes(ctx, alive)
			ids := make([]string, 0, len(nodes))
			for _, n := range nodes {
				ids = append(ids, n.ID)
			}
			return ids, err
		}})
	if err := m.RecoverAtStart(ctx); err != nil {
		logger.Warn("tasks of a previous run not checked", "error", err)
	}
	go m.Run(ctx)
	sys.ServeTaskInputs(func(in *pb.TaskInput) bool {
		return m.TakeInput(tasks.Input{Task: in.GetTaskId(), Key: in.GetKey(), Owner: in.GetOwner(), Answer: in.GetAnswerJson()})
	})
	// The other nodes' announcements arrive on the feed's goroutine: they are told to the endpoints (which write
	// into clients' streams) from a queue of their own; beyond it they are dropped (clients poll too).
	// After a break of the feed the announcements meanwhile were missed, and so is one dropped from a full queue:
	// the manager re-reads the tasks its callers follow (tasks.Manager.CatchUp), off the feed's goroutine; a
	// catch-up that failed is tried again.
	gap := make(chan struct{}, 1)
	missed := func() {
		select {
		case gap <- struct{}{}:
		default: // one is pending already
		}
	}
	announced := make(chan persistence.Task, announceQueue)
	stop := sys.OnTaskStatus(func(t persistence.Task) {
		select {
		case announced <- t:
		default:
			logger.Debug("a task status change of another node not told yet: the queue is full; caught up later", "task", t.ID)
			missed()
		}
	})
	stopGap := sys.OnTaskFeedGap(missed)
	go func() {
		defer stop()
		defer stopGap()
		var retry <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case t := <-announced:
				m.Announced(t)
				continue
			case <-gap:
			case <-retry:
			}
			retry = nil
			if _, err := m.CatchUp(ctx); err != nil && ctx.Err() == nil {
				logger.Warn("task status changes missed during a break of the feed not read; trying again", "error", err)
				retry = time.After(catchUpRetry)
			}
		}
	}()
	return m
}

// catchUpRetry is how long after a failed catch-up (the store unreachable) it is tried again.
const catchUpRetry = 5 * time.Second

// announceQueue bounds the other nodes' task status changes waiting to be told to this node's endpoints.
const announceQueue = 1024

// taskSystem is what the task manager needs of the actor system (actors.System): calls to resume backend tasks,
// and the cluster's ways to the other nodes.
type taskSystem interface {
	taskCaller
	SendTaskInput(ctx context.Context, node string, in *pb.TaskInput) (bool, error)
	ServeTaskInputs(take func(*pb.TaskInput) bool)
	PublishTaskStatus(t persistence.Task)
	OnTaskStatus(fn func(persistence.Task)) (cancel func())
	OnTaskFeedGap(fn func()) (cancel func())
}

// taskCaller runs a call through a server's actor (actors.System.Call).
type taskCaller interface {
	Call(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*pb.CallToolReply, error)
}

// resumeRetryFor bounds how long a resumed task waits for its server to be callable again (its node died: the
// server is taken over by another node, which reconnects it).
const resumeRetryFor = 2 * time.Minute

// resumeTask follows again the backend's task of t, whose node stopped (tasks.Config.Resume): a call to t's
// server's actor, wherever it lives now, that follows the backend's task instead of calling the tool. While the
// server is unavailable (being taken over, reconnecting) the call is retried every retry, within resumeRetryFor;
// another failure fails the task with its reason.
func resumeTask(ctx context.Context, calls taskCaller, t persistence.Task, retry time.Duration) tasks.Outcome {
	ctx = tasks.WithResumeBackendTask(ctx, t.BackendTaskID)
	if dl, ok := ctx.Deadline(); ok {
		ctx = tasks.WithBackendTask(ctx, time.Until(dl)) // the call lasts as long as the task
	}
	route := routing.Route{ServerID: t.BackendServer, ServerName: t.Server, Tool: t.Tool, Name: t.Tool}
	giveUp := time.Now().Add(resumeRetryFor)
	for {
		reply, err := calls.Call(ctx, route, nil, nil)
		var msg string
		switch {
		case err == nil && reply.Error == nil:
			return tasks.Outcome{Result: reply.ResultJson}
		case errors.Is(err, persistence.ErrNotFound):
			return resumeFailed(fmt.Sprintf("The task's server %s was removed while its node was down", t.Server))
		case err != nil:
			msg = err.Error()
		case reply.Error.Code != errcode.ServerUnavailable && reply.Error.Code != errcode.ServerBusy && reply.Error.Code != errcode.ServerMoved:
			return resumeFailed(fmt.Sprintf("The task's node stopped; following the backend's task again failed: %s", reply.Error.Message))
		default:
			msg = reply.Error.Message
		}
		if ctx.Err() != nil || time.Now().After(giveUp) {
			return resumeFailed(fmt.Sprintf("The task's node stopped and its server %s did not become callable again: %s", t.Server, msg))
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

func resumeFailed(msg string) tasks.Outcome {
	doc, _ := json.Marshal(map[string]any{"code": -32603, "message": msg})
	return tasks.Outcome{Error: doc, Message: msg}
}
