package integration_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// keyedResponse is an answer with the headers the idempotency test reads.
type keyedResponse struct {
	response
	header http.Header
}

// keyedDo sends one request with a bearer token and, when key is not nil, an Idempotency-Key header.
func (e *env) keyedDo(t *testing.T, token, method, path, body string, key *string) keyedResponse {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if key != nil {
		req.Header.Set("Idempotency-Key", *key)
	}
	resp, err := e.app.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return keyedResponse{response{status: resp.StatusCode, body: b}, resp.Header}
}

// TestIdempotentRegistration drives POST /servers with an Idempotency-Key through the real router, actor system and
// each store: a retry with the same key and body answers 201 with the same server (Idempotent-Replayed: true, the
// body's spacing and key order aside), the same key with another body 422 IDEMPOTENCY_KEY_REUSED, a malformed key
// 400 INVALID_IDEMPOTENCY_KEY, no key 409 as before; another token's same key is its own; concurrent retries make
// one server; the registration is audited once; a deleted server's key registers anew.
func TestIdempotentRegistration(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) persistence.Store
	}{
		{"sqlite", func(t *testing.T) persistence.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agg.db"))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"postgres", func(t *testing.T) persistence.Store {
			st, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.open(t)
			t.Cleanup(st.Close)
			testIdempotentRegistration(t, st)
		})
	}
}

func testIdempotentRegistration(t *testing.T, st persistence.Store) {
	logger := slog.New(slog.NewJSONHandler(&syncbuf.Buffer{}, nil))
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Logger: logger, Config: actors.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	toks, err := auth.Parse("ops:"+auditAdminToken+",ops2:admin-secret-token-0002", "", "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Logger: logger, Tokens: toks})}
	url := goBackend(t)
	body := `{"name":"keyed","transport_type":"HTTP","connection_config":{"base_url":"` + url + `","headers":{"X-Key":"s3cr3t"}}}`
	// The same request, spaced and ordered differently.
	same := `{ "connection_config": {"headers": {"X-Key": "s3cr3t"}, "base_url": "` + url + `"},
		"transport_type": "HTTP", "name": "keyed" }`
	other := `{"name":"keyed","description":"another request","transport_type":"HTTP","connection_config":{"base_url":"` + url + `"}}`
	k1 := "8e03978e-40d5-43e8-bc93-6894a57f9324"
	post := func(token, body string, key *string) keyedResponse {
		t.Helper()
		return e.keyedDo(t, token, "POST", base+"/servers", body, key)
	}

	first := post(auditAdminToken, body, &k1)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first keyed registration: %d %v %s", first.status, first.header, first.body)
	}
	id := first.json(t)["id"].(string)
	for i, b := range []string{body, same} {
		r := post(auditAdminToken, b, &k1)
		if r.status != http.StatusCreated || r.json(t)["id"] != id || r.header.Get("Idempotent-Replayed") != "true" ||
			r.header.Get("Location") != base+"/servers/"+id {
			t.Fatalf("retry %d: %d %v %s; want 201 with server %s, replayed", i, r.status, r.header, r.body, id)
		}
		if name := r.json(t)["name"]; name != "keyed" {
			t.Errorf("retry %d answered name %v", i, name)
		}
	}
	// The quoted form of the IETF draft is the same key.
	if r := post(auditAdminToken, body, ptr(`"`+k1+`"`)); r.status != http.StatusCreated || r.json(t)["id"] != id {
		t.Fatalf("quoted key: %d %s", r.status, r.body)
	}

	wantError(t, post(auditAdminToken, other, &k1).response, http.StatusUnprocessableEntity, apierror.CodeIdempotencyKeyReused)
	wantError(t, post(auditAdminToken, body, nil).response, http.StatusConflict, apierror.CodeServerAlreadyExists)
	// Another caller's key of the same spelling does not reach the first caller's server.
	wantError(t, post("admin-secret-token-0002", body, &k1).response, http.StatusConflict, apierror.CodeServerAlreadyExists)

	fresh := `{"name":"never","transport_type":"HTTP","connection_config":{"base_url":"` + url + `"}}`
	for _, bad := range []string{"", "   ", strings.Repeat("k", 256), "caf\u00e9", `"a"b"`} {
		m := wantError(t, post(auditAdminToken, fresh, &bad).response, http.StatusBadRequest, apierror.CodeInvalidIdempotencyKey)
		if ctx, _ := m["context"].(map[string]any); ctx["header"] != "Idempotency-Key" {
			t.Errorf("key %q: context %v", bad, m["context"])
		}
	}
	if _, err := st.GetServerByName(t.Context(), "never"); err == nil {
		t.Error("a registration with a malformed key was stored")
	}

	// Concurrent retries of a new key: one server, every answer names it.
	k2 := "concurrent-key"
	racing := `{"name":"raced","transport_type":"HTTP","connection_config":{"base_url":"` + url + `"}}`
	const n = 8
	ids := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(auditAdminToken, racing, &k2)
			if r.status != http.StatusCreated {
				t.Errorf("concurrent retry %d: %d %s", i, r.status, r.body)
				return
			}
			ids[i] = r.json(t)["id"]
		}()
	}
	wg.Wait()
	for i := range n {
		if ids[i] != ids[0] {
			t.Errorf("concurrent retries answered servers %v and %v", ids[0], ids[i])
		}
	}

	// Each registration is audited once, however often it was retried.
	recs, _, err := st.ListAudit(t.Context(), 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]int{}
	for _, r := range recs {
		if r.Event == audit.ServerRegistered && r.ServerName != nil {
			registered[*r.ServerName]++
		}
	}
	if registered["keyed"] != 1 || registered["raced"] != 1 {
		t.Errorf("server.registered records by name: %v, want keyed and raced once each", registered)
	}

	// A deleted server's key went with it: the same request registers anew.
	if r := e.keyedDo(t, auditAdminToken, "DELETE", base+"/servers/"+id, "", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	again := post(auditAdminToken, body, &k1)
	if again.status != http.StatusCreated || again.json(t)["id"] == id || again.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("key of a deleted server: %d %v %s; want a new registration", again.status, again.header, again.body)
	}
}
