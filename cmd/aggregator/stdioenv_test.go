package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/connconfig"
)

// TestEveryConfigVariableIsADaemonSetting: every variable of the configuration table is one of the daemon's
// settings as connconfig sees them, so none can reach a stdio child or be referenced in a connection_config.
func TestEveryConfigVariableIsADaemonSetting(t *testing.T) {
	for _, e := range envVars() {
		if !connconfig.IsDaemonSetting(e.Name) {
			t.Errorf("%s is not covered by connconfig.IsDaemonSetting", e.Name)
		}
	}
}

func TestStdioEnvPassthroughConfig(t *testing.T) {
	tests := []struct {
		raw     string
		want    []string
		wantErr []string
	}{
		{raw: "", want: nil},
		{raw: " GITHUB_TOKEN , NODE_OPTIONS,,", want: []string{"GITHUB_TOKEN", "NODE_OPTIONS"}},
		{raw: "OK,MCP_CREDENTIAL_KEY,DATABASE_URL,qdrant_api_key,MCP_AGGREGATOR_ADMIN_TOKENS",
			wantErr: []string{"MCP_CREDENTIAL_KEY is a setting", "DATABASE_URL is a setting", "qdrant_api_key is a setting", "MCP_AGGREGATOR_ADMIN_TOKENS is a setting"}},
		{raw: "A=B,1X,with space", wantErr: []string{`"A=B" is not`, `"1X" is not`, `"with space" is not`}},
	}
	for _, tt := range tests {
		c, err := loadConfig(func(k string) (string, bool) {
			if k == "MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH" {
				return tt.raw, true
			}
			return "", false
		})
		if len(tt.wantErr) == 0 {
			if err != nil || !slices.Equal(c.Actors.StdioEnvPassthrough, tt.want) {
				t.Errorf("%q: %v %v", tt.raw, c.Actors.StdioEnvPassthrough, err)
			}
			continue
		}
		for _, w := range tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: want an error with %q, got %v", tt.raw, w, err)
			}
		}
	}
}
