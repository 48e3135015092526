package mcpserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestPerUserOnMCP: on /mcp, a per_user server's tool runs with the calling token's own secret (the backend sees
// it as the Authorization it names), and a caller without one gets a tool error whose body says
// CREDENTIAL_REQUIRED and where to store the credential.
func TestPerUserOnMCP(t *testing.T) {
	ctx := context.Background()
	inner, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypt.NewKeyring(crypt.NewKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := crypt.Wrap(inner, ring)
	t.Cleanup(st.Close)
	sys, err := actors.Start(ctx, actors.Deps{Store: st, Config: actors.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	toks, err := auth.Parse("ops:"+adminToken, "ci:"+clientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := mcpserver.New(sys, st, mcpserver.Options{RequireIdentity: true})
	t.Cleanup(ep.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep.StreamableHandler())
	hs := httptest.NewServer(auth.Middleware(toks, auth.Policy{}, mux))
	t.Cleanup(hs.Close)

	backend := mcp.NewServer(&mcp.Implementation{Name: "echo-auth", Version: "1"}, nil)
	backend.AddTool(&mcp.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "auth=" + r.Extra.Header.Get("X-Api-Key")}}}, nil
		})
	bs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend }, nil))
	t.Cleanup(bs.Close)
	raw, _ := json.Marshal(map[string]any{"base_url": bs.URL})
	srv, err := sys.Register(ctx, actors.RegisterRequest{Name: "per", TransportType: persistence.TransportHTTP, ConnectionConfig: raw,
		AutoConnect: true, CredentialMode: persistence.CredentialPerUser, UserCredential: &persistence.UserCredentialSlot{Header: "X-Api-Key"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "per.whoami routable", func() bool { return len(sys.Routes().Callable()) == 1 })
	if _, _, err := st.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "token:ci", Secret: []byte("ci-own-key")}); err != nil {
		t.Fatal(err)
	}
	hc := func(token string) *http.Client { return &http.Client{Transport: bearer{token}} }

	ci := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(clientToken)})
	res := callTool(t, ci, "per__whoami", map[string]any{})
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "auth=ci-own-key" {
		t.Fatalf("ci's call: %+v", res.Content)
	}
	ops := connect(t, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: hc(adminToken)})
	res = callTool(t, ops, "per__whoami", map[string]any{})
	body, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || !strings.Contains(string(body), `"error_code":"`+errcode.CredentialRequired+`"`) ||
		!strings.Contains(string(body), "/api/v1/aggregator/servers/"+srv.ID+"/credentials/me") {
		t.Fatalf("ops's call without a credential: error %v, %s", res.IsError, body)
	}
}
