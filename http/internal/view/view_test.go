package view

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
)

// TestServerDetailMasksSecrets: the server views show connection_config and health_check_url masked (connconfig.Mask).
func TestServerDetailMasksSecrets(t *testing.T) {
	const secret = "planted-s3cret-9"
	health := "https://monitor:" + secret + "@h.example/health?token=" + secret
	srv := persistence.Server{ID: "id", Name: "s", TransportType: persistence.TransportSSE, HealthCheckURL: &health,
		ConnectionConfig: json.RawMessage(`{"url":"https://u:` + secret + `@h.example/sse","headers":{"X-API-Key":"` + secret +
			`","Authorization":"Bearer ` + secret + `"}}`)}
	for name, v := range map[string]any{"detail": NewServerDetail(srv), "summary": NewServer(srv)} {
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

// TestShapes: nullable fields are null (an empty description too), lists are [] rather than null, timestamps are
// RFC 3339 in UTC, and the detail is the summary plus its own fields.
func TestShapes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	empty := ""
	srv := persistence.Server{ID: "id", Name: "s", Description: &empty, TransportType: persistence.TransportSTDIO,
		Status: persistence.StatusConnected, RegisteredAt: at, UpdatedAt: at, ConnectionConfig: json.RawMessage(`{"command":"x"}`)}
	b, _ := json.Marshal(NewServerDetail(srv))
	want := `{"id":"id","name":"s","description":null,"transport_type":"STDIO","status":"CONNECTED","health_check_url":null,` +
		`"tool_count":0,"last_health_check":null,"registered_at":"2026-01-02T02:04:05Z","connected_at":null,` +
		`"connection_config":{"command":"x"},"error_message":null,"updated_at":"2026-01-02T02:04:05Z","auto_connect":false,` +
		`"consecutive_failures":0,"health_response_time_ms":null,"credential_mode":"shared","user_credential":null}`
	if string(b) != want {
		t.Errorf("detail\n got %s\nwant %s", b, want)
	}
	srv.CredentialMode, srv.UserCredential = persistence.CredentialPerUser, &persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}
	b, _ = json.Marshal(NewServerDetail(srv))
	if !strings.HasSuffix(string(b), `"credential_mode":"per_user","user_credential":{"header":"Authorization","prefix":"Bearer "}}`) {
		t.Errorf("per_user detail %s", b)
	}
	tools, _ := json.Marshal(NewTools([]persistence.Tool{{ID: 7, Name: "s.t", DiscoveredAt: at}}))
	if !strings.Contains(string(tools), `"id":"7"`) || !strings.Contains(string(tools), `"skill_ids":[]`) {
		t.Errorf("tools %s", tools)
	}
	search, _ := json.Marshal(NewSearch(actors.SearchRequest{Query: "q"}, actors.SearchResponse{}, time.Millisecond))
	if !strings.HasPrefix(string(search), `{"query":"q","tools":[],"matched_skills":[],"metadata":{`) {
		t.Errorf("search %s", search)
	}
	if Raw(json.RawMessage(`{`)) != nil || string(Raw(json.RawMessage(`[1]`))) != `[1]` || Raw(nil) != nil {
		t.Error("Raw")
	}
}
