package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// TestServerDetailMasksSecrets: the server views show connection_config and health_check_url masked (connconfig.Mask).
func TestServerDetailMasksSecrets(t *testing.T) {
	const secret = "planted-s3cret-9"
	health := "https://monitor:" + secret + "@h.example/health?token=" + secret
	srv := persistence.Server{ID: "id", Name: "s", TransportType: persistence.TransportSSE, HealthCheckURL: &health,
		ConnectionConfig: json.RawMessage(`{"url":"https://u:` + secret + `@h.example/sse","headers":{"X-API-Key":"` + secret +
			`","Authorization":"Bearer ` + secret + `"}}`)}
	for name, v := range map[string]any{"detail": ServerDetailJSON(srv), "summary": ServerSummaryJSON(srv)} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s shows the secret: %s", name, b)
		}
		if !strings.Contains(string(b), `"health_check_url":"https://monitor:***@h.example/health?token=***"`) {
			t.Errorf("%s: health_check_url not masked as expected: %s", name, b)
		}
	}
}
