package auth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// TestErrorAnswersGolden pins the whole answer of package auth's refusals: status, headers and body. The 401 and
// 403 bodies are pinned byte for byte; the host guard's body is pinned as JSON (its keys' order is not part of the
// contract).
func TestErrorAnswersGolden(t *testing.T) {
	guard := NewHostGuard([]string{"127.0.0.1:8082"}, nil, nil).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the guard let a refused request through")
	}))
	for _, tc := range []struct {
		name    string
		serve   func(w http.ResponseWriter)
		status  int
		headers map[string]string
		body    string // exact bytes, when set
		json    string // the body as JSON, when set
	}{
		{
			name:   "401 no token",
			serve:  func(w http.ResponseWriter) { WriteHTTPError(w, http.StatusUnauthorized, ScopeClient) },
			status: http.StatusUnauthorized,
			headers: map[string]string{"Content-Type": "application/json", "Retry-After": "",
				"WWW-Authenticate": `Bearer realm="mcp-aggregator"`},
			body: `{"detail":"A valid bearer token is required (Authorization: Bearer \u003ctoken\u003e)","error_code":"UNAUTHORIZED"}` + "\n",
		},
		{
			name:   "403 missing scope",
			serve:  func(w http.ResponseWriter) { WriteHTTPError(w, http.StatusForbidden, ScopeAdmin) },
			status: http.StatusForbidden,
			headers: map[string]string{"Content-Type": "application/json", "Retry-After": "",
				"WWW-Authenticate": `Bearer realm="mcp-aggregator", error="insufficient_scope", scope="admin"`},
			body: `{"detail":"This operation needs a token with the admin scope","error_code":"FORBIDDEN"}` + "\n",
		},
		{
			name: "403 host not allowed",
			serve: func(w http.ResponseWriter) {
				guard.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "http://evil.example:8082/mcp", strings.NewReader("{}")))
			},
			status:  http.StatusForbidden,
			headers: map[string]string{"Content-Type": "application/json", "Retry-After": "", "WWW-Authenticate": ""},
			json: `{"detail":"Host \"evil.example:8082\" is not allowed: use the listen address, a loopback name, or add it to MCP_AGGREGATOR_ALLOWED_HOSTS",` +
				`"error_code":"HOST_NOT_ALLOWED","context":{"reason":"dns_rebinding_or_cross_origin"}}`,
		},
		{
			name: "403 origin not allowed",
			serve: func(w http.ResponseWriter) {
				req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8082/mcp", strings.NewReader("{}"))
				req.Header.Set("Origin", "http://evil.example")
				guard.ServeHTTP(w, req)
			},
			status:  http.StatusForbidden,
			headers: map[string]string{"Content-Type": "application/json", "Retry-After": "", "WWW-Authenticate": ""},
			json: `{"detail":"Origin \"http://evil.example\" is not allowed: add it to MCP_AGGREGATOR_ALLOWED_ORIGINS",` +
				`"error_code":"ORIGIN_NOT_ALLOWED","context":{"reason":"dns_rebinding_or_cross_origin"}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.serve(rec)
			if rec.Code != tc.status {
				t.Errorf("status %d, want %d", rec.Code, tc.status)
			}
			for k, v := range tc.headers {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.body != "" && rec.Body.String() != tc.body {
				t.Errorf("body\n%s\nwant\n%s", rec.Body, tc.body)
			}
			if tc.json != "" {
				var got, want any
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatalf("body %q: %v", rec.Body, err)
				}
				if err := json.Unmarshal([]byte(tc.json), &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("body\n%s\nwant\n%s", rec.Body, tc.json)
				}
			}
		})
	}
}
