package main

import (
	"strings"
	"testing"
	"time"
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
