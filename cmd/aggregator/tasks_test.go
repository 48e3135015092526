package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

func TestLoadTaskConfig(t *testing.T) {
	defaults := map[string]string{}
	for _, e := range envVars() {
		defaults[e.Name] = e.Default
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    taskConfig
		wantErr string
	}{
		{"defaults", nil, taskConfig{MaxOpen: 100, TTL: time.Hour, MaxTTL: 24 * time.Hour}, ""},
		{"no cap, short TTLs", map[string]string{"MCP_AGGREGATOR_MAX_OPEN_TASKS": "0", "MCP_AGGREGATOR_TASK_TTL": "60", "MCP_AGGREGATOR_TASK_MAX_TTL": "120"},
			taskConfig{MaxOpen: 0, TTL: time.Minute, MaxTTL: 2 * time.Minute}, ""},
		{"negative cap", map[string]string{"MCP_AGGREGATOR_MAX_OPEN_TASKS": "-1"}, taskConfig{}, "MCP_AGGREGATOR_MAX_OPEN_TASKS"},
		{"cap not a number", map[string]string{"MCP_AGGREGATOR_MAX_OPEN_TASKS": "many"}, taskConfig{}, "MCP_AGGREGATOR_MAX_OPEN_TASKS"},
		{"TTL under a second", map[string]string{"MCP_AGGREGATOR_TASK_TTL": "0.5"}, taskConfig{}, "MCP_AGGREGATOR_TASK_TTL"},
		{"TTL over the maximum", map[string]string{"MCP_AGGREGATOR_TASK_TTL": "7200", "MCP_AGGREGATOR_TASK_MAX_TTL": "3600"}, taskConfig{}, "more than MCP_AGGREGATOR_TASK_MAX_TTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			get := func(name string) string {
				if v, ok := tc.env[name]; ok {
					return v
				}
				return defaults[name]
			}
			got, errs := loadTaskConfig(get, nil)
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0], tc.wantErr) {
					t.Errorf("errors = %v, want one naming %s", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 || got != tc.want {
				t.Errorf("loadTaskConfig = %+v, %v; want %+v", got, errs, tc.want)
			}
		})
	}
}

// scriptedCaller answers the calls of resumeTask from a script, one reply per call (the last repeats), and
// records what it was asked.
type scriptedCaller struct {
	replies []scriptedReply
	calls   int
	resumed []string
}

type scriptedReply struct {
	reply *pb.CallToolReply
	err   error
}

func (c *scriptedCaller) Call(ctx context.Context, r routing.Route, _ []byte, _ func(*pb.Progress)) (*pb.CallToolReply, error) {
	c.resumed = append(c.resumed, r.ServerID+"/"+tasks.ResumeBackendTask(ctx))
	rep := c.replies[min(c.calls, len(c.replies)-1)]
	c.calls++
	return rep.reply, rep.err
}

// TestResumeTask: a resumed task's call names the backend's task and its server; while the server is unavailable
// (taken over, reconnecting) it is asked again; its result completes the task; another failure, or a server that
// no longer exists, fails the task with the reason at once.
func TestResumeTask(t *testing.T) {
	unavailable := scriptedReply{reply: &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerUnavailable, Message: "Server unavailable: tb"}}}
	ok := scriptedReply{reply: &pb.CallToolReply{ResultJson: []byte(`{"content":[{"type":"text","text":"done"}]}`)}}
	gone := scriptedReply{reply: &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ExecutionFailed, Message: "the backend's task b1 is gone"}}}
	tests := []struct {
		name    string
		replies []scriptedReply
		calls   int
		result  string
		message string
	}{
		{"completes", []scriptedReply{ok}, 1, "done", ""},
		{"waits for the server", []scriptedReply{unavailable, unavailable, ok}, 3, "done", ""},
		{"backend task gone", []scriptedReply{unavailable, gone}, 2, "", "following the backend's task again failed: the backend's task b1 is gone"},
		{"server removed", []scriptedReply{{err: fmt.Errorf("lookup: %w", persistence.ErrNotFound)}}, 1, "", "was removed while its node was down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &scriptedCaller{replies: tc.replies}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			out := resumeTask(ctx, c, persistence.Task{ID: "t1", Tool: "tb.countdown", Server: "tb", BackendServer: "srv-1", BackendTaskID: "b1"}, time.Millisecond)
			if c.calls != tc.calls {
				t.Errorf("calls = %d, want %d", c.calls, tc.calls)
			}
			for _, r := range c.resumed {
				if r != "srv-1/b1" {
					t.Errorf("call resumed %q, want srv-1/b1", r)
				}
			}
			if !strings.Contains(string(out.Result), tc.result) || (tc.result == "") != (out.Result == nil) {
				t.Errorf("result = %s, want %q", out.Result, tc.result)
			}
			if !strings.Contains(out.Message, tc.message) || (tc.message == "") != (out.Message == "") {
				t.Errorf("message = %q, want %q", out.Message, tc.message)
			}
		})
	}
	// A server that stays unavailable fails the task once the task's context ends.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := resumeTask(ctx, &scriptedCaller{replies: []scriptedReply{unavailable}}, persistence.Task{Server: "tb", BackendTaskID: "b1"}, time.Millisecond)
	if !strings.Contains(out.Message, "did not become callable again") {
		t.Errorf("message = %q", out.Message)
	}
}
