package validate

import (
	"testing"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// Registration (POST and PATCH) refuses with a field error a literal host the outbound policy refuses: metadata
// and link-local addresses in every IPv4 spelling, and the daemon's own listeners.
func TestOutboundTargets(t *testing.T) {
	out := backend.NewOutbound(backend.OutboundConfig{ListenAddrs: []string{"127.0.0.1:8082", "127.0.0.1:8081"}}, "me")
	for _, tc := range []struct {
		name, body, loc string
	}{
		{"metadata", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"http://169.254.169.254/latest/","allow_insecure_http":true}}`, "body.connection_config.base_url"},
		{"decimal", `{"name":"m","transport_type":"SSE","connection_config":{"url":"http://2852039166/","allow_insecure_http":true}}`, "body.connection_config.url"},
		{"hex", `{"name":"m","transport_type":"SSE","connection_config":{"url":"https://0xA9FEA9FE/"}}`, "body.connection_config.url"},
		{"octal", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"https://0251.0376.0251.0376/mcp"}}`, "body.connection_config.base_url"},
		{"mapped", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"https://[::ffff:169.254.169.254]/mcp"}}`, "body.connection_config.base_url"},
		{"link-local v6", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"https://[fe80::1]/mcp"}}`, "body.connection_config.base_url"},
		{"health metadata", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"https://example.com/mcp"},"health_check_url":"https://169.254.169.254/"}`, "body.health_check_url"},
		{"own mcp", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"http://127.0.0.1:8082/mcp"}}`, "body.connection_config.base_url"},
		{"own mcp by name", `{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"http://localhost:8082/mcp"}}`, "body.connection_config.base_url"},
		{"own sse", `{"name":"m","transport_type":"SSE","connection_config":{"url":"http://[::1]:8082/sse"}}`, "body.connection_config.url"},
	} {
		_, errs := Registration([]byte(tc.body), checksOf(out))
		if !hasError(errs, tc.loc, apierror.FieldValueError) {
			t.Errorf("%s: errors %+v, want a value_error at %s", tc.name, errs, tc.loc)
		}
	}
	// Without a policy the default rules still hold; loopback on another port and names pass.
	if _, errs := Registration([]byte(`{"name":"m","transport_type":"SSE","connection_config":{"url":"https://0xA9FEA9FE/"}}`), Outbound(nil)); len(errs) == 0 {
		t.Error("default rules: hex metadata address accepted")
	}
	for _, ok := range []string{
		`{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"http://127.0.0.1:3001/mcp"}}`,
		`{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"https://10.0.0.5/mcp"}}`,
		`{"name":"m","transport_type":"HTTP","connection_config":{"base_url":"http://${SELF}/mcp"}}`,
	} {
		if _, errs := Registration([]byte(ok), checksOf(out)); len(errs) != 0 {
			t.Errorf("%s refused: %+v", ok, errs)
		}
	}
	if _, errs := Patch([]byte(`{"connection_config":{"base_url":"http://localhost:8081/api"}}`), persistence.TransportHTTP, checksOf(out)); !hasError(errs, "body.connection_config.base_url", apierror.FieldValueError) {
		t.Errorf("PATCH to own REST listener: %+v", errs)
	}
	if _, errs := Patch([]byte(`{"health_check_url":"http://0xA9FEA9FE/"}`), persistence.TransportHTTP, checksOf(out)); !hasError(errs, "body.health_check_url", apierror.FieldValueError) {
		t.Errorf("PATCH health_check_url to metadata: %+v", errs)
	}
}

// checksOf is the checks of an explicit outbound policy.
func checksOf(out *backend.Outbound) connconfig.Checks {
	return connconfig.Checks{URLProblem: out.URLProblem}
}
