package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/persistence"
)

func TestHopHeaderKeysCanonical(t *testing.T) {
	if hopRequestIDHeader != http.CanonicalHeaderKey(requestid.Header) || hopViaHeader != http.CanonicalHeaderKey(backend.HopHeader) {
		t.Fatalf("%q, %q: not the canonical forms of %q, %q", hopRequestIDHeader, hopViaHeader, requestid.Header, backend.HopHeader)
	}
}

// TestFastHopHeaders: the fast hop's tools/call carries, once each, what every request of the session carries (the
// hop header, the call's request id), the configured headers, and the session's own headers; with and without a
// request id.
func TestFastHopHeaders(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var mu sync.Mutex
	var calls []http.Header
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") != "" {
			mu.Lock()
			calls = append(calls, r.Header.Clone())
			mu.Unlock()
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		instance string
		headers  bool // configured headers (the transport copies the request to add them)
	}{{"instance-a", false}, {"", false}, {"instance-a", true}} {
		instance := tc.instance
		t.Run(fmt.Sprintf("instance %q, configured headers %v", tc.instance, tc.headers), func(t *testing.T) {
			extra := ""
			if tc.headers {
				extra = `,"headers":{"X-Api-Key":"k3y"}`
			}
			rec := persistence.Server{Name: "echo", TransportType: persistence.TransportHTTP,
				ConnectionConfig: json.RawMessage(fmt.Sprintf(`{"base_url":%q,"allow_insecure_http":true%s}`, hs.URL, extra))}
			b, err := backend.Dial(rec, backend.Options{Env: func(string) (string, bool) { return "", false },
				Outbound: backend.NewOutbound(backend.OutboundConfig{}, instance)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Release)
			hop := newFastHop(b)
			client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
			client.AddReceivingMiddleware(hop.capture)
			sess, err := client.Connect(context.Background(), b.Transport(), &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sess.Close() })
			hop.sess.Store(sess)
			for _, rid := range []string{"req-7", ""} {
				ctx := context.Background()
				if rid != "" {
					ctx = requestid.With(ctx, rid)
				}
				mu.Lock()
				calls = nil
				mu.Unlock()
				raw, err := hop.call(ctx, sess, "echo", json.RawMessage(`{"a":1}`), rid, nil)
				if err != nil || !strings.Contains(string(raw), `{\"a\":1}`) {
					t.Fatalf("call: %s %v", raw, err)
				}
				mu.Lock()
				h := calls[len(calls)-1]
				mu.Unlock()
				want := map[string][]string{"X-Request-Id": nil, "Mcp-Aggregator-Via": nil, "X-Api-Key": nil,
					"Mcp-Session-Id": {sess.ID()}, "Mcp-Protocol-Version": {ProtocolVersion},
					"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
				if rid != "" {
					want["X-Request-Id"] = []string{rid}
				}
				if instance != "" {
					want["Mcp-Aggregator-Via"] = []string{instance}
				}
				if tc.headers {
					want["X-Api-Key"] = []string{"k3y"}
				}
				for k, v := range want {
					if got := h.Values(k); strings.Join(got, "|") != strings.Join(v, "|") {
						t.Errorf("request id %q: %s = %q, want %q", rid, k, got, v)
					}
				}
			}
		})
	}
}
