package validate

import (
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/apierror"
)

// TestDaemonSettingReferences: a ${VAR} reference to one of the daemon's own settings is refused in every
// resolved field of connection_config, at registration and PATCH, with a message naming the variable; references
// to other variables stay allowed.
func TestDaemonSettingReferences(t *testing.T) {
	tests := []struct {
		name, transport, config, loc, variable string
	}{
		{"env credential key", "STDIO", `{"command":"node","env":{"LEAK":"${MCP_CREDENTIAL_KEY}"}}`, "body.connection_config.env.LEAK", "MCP_CREDENTIAL_KEY"},
		{"env previous key", "STDIO", `{"command":"node","env":{"LEAK":"x-${MCP_CREDENTIAL_KEY_PREVIOUS}"}}`, "body.connection_config.env.LEAK", "MCP_CREDENTIAL_KEY_PREVIOUS"},
		{"arg admin tokens", "STDIO", `{"command":"node","args":["a","--t=${MCP_AGGREGATOR_ADMIN_TOKENS}"]}`, "body.connection_config.args.1", "MCP_AGGREGATOR_ADMIN_TOKENS"},
		{"command database url", "STDIO", `{"command":"${DATABASE_URL}"}`, "body.connection_config.command", "DATABASE_URL"},
		{"cwd qdrant key", "STDIO", `{"command":"node","cwd":"/x/${QDRANT_API_KEY}"}`, "body.connection_config.cwd", "QDRANT_API_KEY"},
		{"header client tokens", "SSE", `{"url":"https://h/sse","headers":{"Authorization":"Bearer ${MCP_AGGREGATOR_CLIENT_TOKENS}"}}`, "body.connection_config.headers.Authorization", "MCP_AGGREGATOR_CLIENT_TOKENS"},
		{"url database url", "SSE", `{"url":"https://h/sse?db=${DATABASE_URL}"}`, "body.connection_config.url", "DATABASE_URL"},
		{"base_url lower case", "HTTP", `{"base_url":"https://h/${mcp_credential_key}"}`, "body.connection_config.base_url", "mcp_credential_key"},
		{"embedding key", "HTTP", `{"base_url":"https://h/mcp","headers":{"X":"${MCP_AGGREGATOR_EMBEDDING_API_KEY}"}}`, "body.connection_config.headers.X", "MCP_AGGREGATOR_EMBEDDING_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"name":"x","transport_type":"` + tt.transport + `","connection_config":` + tt.config + `}`
			_, errs := Registration([]byte(body), Outbound(nil))
			checkRefError(t, "register", errs, tt.loc, tt.variable)
			_, errs = Patch([]byte(`{"connection_config":`+tt.config+`}`), tt.transport, Outbound(nil))
			checkRefError(t, "patch", errs, tt.loc, tt.variable)
		})
	}
	for _, ok := range []struct{ transport, config string }{
		{"STDIO", `{"command":"node","args":["${HOME}/s.js"],"env":{"TOKEN":"${MY_TOKEN}","DATABASE_URL":"postgres://own"}}`},
		{"SSE", `{"url":"https://h/sse","headers":{"Authorization":"Bearer ${GITHUB_TOKEN}"}}`},
		{"HTTP", `{"base_url":"${MCP_URL}"}`},
	} {
		if _, errs := Registration([]byte(`{"name":"x","transport_type":"`+ok.transport+`","connection_config":`+ok.config+`}`), Outbound(nil)); errs != nil {
			t.Errorf("%s: unexpected errors %+v", ok.config, errs)
		}
	}
}

func checkRefError(t *testing.T, what string, errs []apierror.FieldError, loc, variable string) {
	t.Helper()
	for _, e := range errs {
		if e.Path() == loc && e.Type == apierror.FieldValueError && strings.Contains(e.Msg, "${"+variable+"}") {
			return
		}
	}
	t.Errorf("%s: want a value_error at %s naming %s, got %+v", what, loc, variable, errs)
}
