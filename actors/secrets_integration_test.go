package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/syncbuf"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestErrorTextsAreScrubbed: connection failures whose texts carry a server's secrets (a child printing its
// environment, a URL with a password, a backend echoing the request headers, a refused plain-http URL) reach
// ERROR with error_message, history, status and logs free of the secret.
func TestErrorTextsAreScrubbed(t *testing.T) {
	secret := fmt.Sprintf("scrub-me-%d", time.Now().UnixNano())
	env := map[string]string{
		"SCRUB_SECRET": secret,
		"SCRUB_REMOTE": "http://u:" + secret + "@h.example/mcp",
	}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		for k, v := range r.Header {
			fmt.Fprintf(w, "%s: %s\n", k, strings.Join(v, ","))
		}
	}))
	defer echo.Close()

	logs := &syncbuf.Buffer{}
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := testConfig()
	cfg.ConnectionTimeout = 5 * time.Second
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Env:    func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	}()

	closed := peertest.FreePort(t)
	servers := []struct {
		name, transport string
		cfg             map[string]any
		want            string // in error_message
	}{
		{"child-prints-env", persistence.TransportSTDIO, map[string]any{"command": "sh",
			"args": []string{"-c", `echo "leaking $LEAKY" >&2; exit 3`}, "env": map[string]string{"LEAKY": "${SCRUB_SECRET}"}},
			"leaking ***"},
		{"password-in-url", persistence.TransportSSE, map[string]any{
			"url":     fmt.Sprintf("http://user:%s@127.0.0.1:%d/sse", secret, closed),
			"headers": map[string]string{"X-API-Key": secret}}, "127.0.0.1"},
		{"backend-echoes-headers", persistence.TransportHTTP, map[string]any{"base_url": echo.URL + "/mcp",
			"headers": map[string]string{"Authorization": "Bearer ${SCRUB_SECRET}", "X-Custom-Token": secret}}, ""},
		{"plain-http-from-env", persistence.TransportHTTP, map[string]any{"base_url": "${SCRUB_REMOTE}"}, "plain http"},
	}
	ids := map[string]string{}
	for _, s := range servers {
		raw, _ := json.Marshal(s.cfg)
		srv, err := sys.Register(context.Background(), actors.RegisterRequest{Name: s.name, TransportType: s.transport,
			ConnectionConfig: raw, AutoConnect: true})
		if err != nil {
			t.Fatalf("register %s: %v", s.name, err)
		}
		ids[s.name] = srv.ID
	}
	for _, s := range servers {
		id := ids[s.name]
		deadline := time.Now().Add(15 * time.Second)
		var got persistence.Server
		for {
			got, err = st.GetServer(context.Background(), id)
			if err == nil && got.Status == persistence.StatusError && got.ErrorMessage != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in ERROR: %s %v", s.name, got.Status, got.ErrorMessage)
			}
			time.Sleep(20 * time.Millisecond)
		}
		msg := *got.ErrorMessage
		t.Logf("%s: %s", s.name, msg)
		if strings.Contains(msg, secret) {
			t.Errorf("%s: error_message shows the secret: %s", s.name, msg)
		}
		if !strings.Contains(msg, s.want) {
			t.Errorf("%s: error_message %q lacks %q", s.name, msg, s.want)
		}
		hist, _ := st.ListHistory(context.Background(), id, 100)
		for _, h := range hist {
			if strings.Contains(string(h.Details), secret) {
				t.Errorf("%s: history shows the secret: %s", s.name, h.Details)
			}
		}
		if rep, err := sys.Status(context.Background(), id); err != nil || strings.Contains(rep.LastError, secret) {
			t.Errorf("%s: status %v, last error %q", s.name, err, rep.GetLastError())
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the logs show the secret:\n%s", logs.String())
	}
}
