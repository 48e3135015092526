package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// FuzzEndpoints feeds arbitrary bodies to every POST and PATCH route of the app (enumerated, so routes added later
// are fuzzed too), authenticated as admin, over a fake store and control with one connected server and one tool:
// nothing may answer 5xx or panic (the recover middleware would turn a panic into a 500). Run longer with
// go test -run '^$' -fuzz '^FuzzEndpoints$' -fuzztime 60s ./http/api
func FuzzEndpoints(f *testing.F) {
	seeds := []string{
		sseBody,
		`{"name":"local","transport_type":"STDIO","connection_config":{"command":"python","args":["-m","srv"],"env":{"A":"1"}},"auto_connect":false}`,
		`{"name":"h","transport_type":"HTTP","connection_config":{"base_url":"https://${HOST}/mcp","headers":{"X":"${K}"}}}`,
		`{"name":"renamed","description":"d","health_check_url":null}`,
		`{"connection_config":{"url":"https://other.example.com/sse"}}`,
		`{"force":true}`, `{"force":false}`, `{"force":"yes"}`,
		`{"name":"one.echo","arguments":{"message":"hi"}}`,
		`{"name":"echo","arguments":{},"server_id":"00000000-0000-0000-0000-000000000001"}`,
		`{"name":"one.echo","arguments":[1,2]}`,
		`{"query":"echo","limit":5}`,
		``, ` `, `{`, `}`, `[]`, `null`, `true`, `0`, `"x"`, `{}`, `{"a":{"b":{"c":[[[[]]]]}}}`,
		`{"name":"a","name":"b"}`, "\xff\xfe{}", `{"name":"` + strings.Repeat("a", 3000) + `"}`,
		`{"name":"a\u0000","description":"\ud800"}`, `{"x":1e999999}`, `{"name":-0}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	toks, err := auth.Parse("ops:"+testAdminToken, "", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e := newEnv(t)
		srv := e.store.put(persistence.Server{ID: "00000000-0000-0000-0000-000000000001", Name: "one",
			Status: persistence.StatusConnected})
		e.control.routes = routing.NewRouteTable([]routing.ServerEntry{{ID: srv.ID, Name: srv.Name, Status: srv.Status}},
			[]persistence.Tool{{ID: 1, Name: "one.echo", OriginalName: "echo", SourceServerID: srv.ID,
				InputSchema: []byte(`{"type":"object"}`)}}, "__")
		e.control.reply = &pb.CallToolReply{ResultJson: []byte(`{"content":[{"type":"text","text":"ok"}]}`)}
		app := New(Deps{Store: e.store, Control: e.control, Curation: e.control, Tokens: toks})
		for _, r := range app.GetRoutes(true) {
			if r.Method != http.MethodPost && r.Method != http.MethodPatch && r.Method != http.MethodPut {
				continue
			}
			path := strings.NewReplacer(":id", srv.ID, ":tool", "echo", ":name", "team").Replace(r.Path)
			req := httptest.NewRequest(r.Method, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			resp, err := app.Test(req, 10_000) // a hung request fails too
			if err != nil {
				t.Fatalf("%s %s: %v", r.Method, path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 || resp.StatusCode == 0 {
				t.Fatalf("%s %s with body %q: %d %s", r.Method, path, body, resp.StatusCode, b)
			}
		}
	})
}
