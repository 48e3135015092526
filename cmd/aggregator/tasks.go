package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/persistence"
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
func startTasks(ctx context.Context, cfg config, store persistence.Store, nodeID string, logger *slog.Logger) *tasks.Manager {
	maxOpen := cfg.Tasks.MaxOpen
	if maxOpen == 0 {
		maxOpen = -1 // tasks.Config: negative is no cap
	}
	alive := 3 * cfg.Actors.LeaseTTL // a node writes its heartbeat every third of a lease TTL
	m := tasks.New(tasks.Config{Store: store, Node: nodeID, MaxOpenPerOwner: maxOpen, DefaultTTL: cfg.Tasks.TTL,
		MaxTTL: cfg.Tasks.MaxTTL, Logger: logger, LiveNodes: func(ctx context.Context) ([]string, error) {
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
	return m
}
