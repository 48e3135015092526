package apierror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/errcode"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

func TestFromError(t *testing.T) {
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{fmt.Errorf("list: %w", persistence.ErrUnavailable), http.StatusServiceUnavailable, CodeStoreUnavailable, true},
		{persistence.ErrNotFound, http.StatusNotFound, CodeServerNotFound, false},
		{persistence.ErrAlreadyExists, http.StatusConflict, CodeServerAlreadyExists, false},
		{fmt.Errorf("create: %w", persistence.ErrKeyReused), http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, false},
		{actors.ErrMaxServers, http.StatusConflict, CodeServerLimitReached, false},
		{actors.ErrShuttingDown, http.StatusServiceUnavailable, CodeServiceUnavailable, false},
		{actors.ErrAskTimeout, http.StatusServiceUnavailable, CodeServiceBusy, true},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, CodeServiceBusy, true},
		{context.Canceled, http.StatusServiceUnavailable, CodeServiceUnavailable, false},
	} {
		e := FromError(tc.err, Subject{ID: "id", Name: "name"})
		if e == nil || e.Status != tc.status || e.Code != tc.code || (e.RetryAfter > 0) != tc.retryAfter {
			t.Errorf("%v: got %+v, want %d %s", tc.err, e, tc.status, tc.code)
		}
	}
	if e := FromError(errors.New("boom"), Subject{}); e != nil {
		t.Errorf("an unknown error must stay unmapped, got %+v", e)
	}
}

func TestCallError(t *testing.T) {
	route := routing.Route{ServerID: "sid", ServerName: "srv", ServerStatus: persistence.StatusConnected, Name: "srv.t", Strategy: routing.StrategyAlias}
	now := time.Now()
	for _, tc := range []struct {
		code, want string
		status     int
		retry      bool
	}{
		{errcode.ServerBusy, CodeServerBusy, http.StatusServiceUnavailable, true},
		{errcode.ResponseTooLarge, CodeResponseTooLarge, http.StatusBadGateway, false},
		{errcode.LoopDetected, CodeLoopDetected, http.StatusLoopDetected, false},
		{errcode.ExecutionFailed, CodeExecutionFailed, http.StatusBadGateway, false},
		{errcode.RequestTimeout, CodeRequestTimeout, http.StatusGatewayTimeout, false},
		{errcode.ServerUnavailable, CodeServerUnavailable, http.StatusServiceUnavailable, false},
		{errcode.CredentialRequired, CodeCredentialRequired, http.StatusForbidden, false},
	} {
		e := CallError(Call{Route: route, Asked: "t", Start: now, Routed: now, Done: now, MaxCallsPerServer: 8}, &pb.ErrorInfo{Code: tc.code, Message: "m"})
		if e.Status != tc.status || e.Code != tc.want || (e.RetryAfter > 0) != tc.retry {
			t.Errorf("%s: got %+v", tc.code, e)
		}
		if tc.code == errcode.CredentialRequired && e.Context["credential_url"] != "/api/v1/aggregator/servers/sid/credentials/me" {
			t.Errorf("CREDENTIAL_REQUIRED context %v must name where to store the credential", e.Context)
		}
		if tc.code == errcode.ServerBusy && (e.Context["server"] != "srv" || e.Context["limit"] != 8) {
			t.Errorf("SERVER_BUSY context %v must name the server and the limit", e.Context)
		}
	}
}

func TestMetadata(t *testing.T) {
	now := time.Now()
	m := Metadata(Call{Route: routing.Route{ServerName: "srv", ServerStatus: persistence.StatusDegraded, Strategy: routing.StrategyAlias}, Start: now, Routed: now, Done: now})
	if m["strategy"] != routing.StrategyAlias || m["warning"] == nil {
		t.Errorf("metadata %v", m)
	}
}

// TestUnavailableError: a server that cannot take the request now answers 503 SERVER_UNAVAILABLE naming it, on
// every front end (REST's tool refresh, the proxy's new session).
func TestUnavailableError(t *testing.T) {
	err := fmt.Errorf("refresh: %w", &routing.UnavailableError{Server: routing.ServerEntry{ID: "i", Name: "n", Status: "ERROR"}})
	e := FromError(err, Subject{})
	if e == nil || e.Status != http.StatusServiceUnavailable || e.Code != CodeServerUnavailable ||
		e.Detail != "Server unavailable: n" || *e.Server != (ServerRef{ID: "i", Name: "n", Status: "ERROR"}) {
		t.Errorf("got %+v", e)
	}
	if e.RetryAfterHeader() != "" {
		t.Errorf("Retry-After %q for an unavailable server that says nothing of when", e.RetryAfterHeader())
	}
	// A server no cluster node can place now (the node is rejoining the membership): 503 with Retry-After.
	err = fmt.Errorf("locate: %w", &routing.UnavailableError{Server: routing.ServerEntry{ID: "i", Name: "n"}, Detail: "cannot be placed now",
		RetryAfter: 1500 * time.Millisecond})
	if e = FromError(err, Subject{}); e == nil || e.Status != http.StatusServiceUnavailable || e.RetryAfterHeader() != "2" {
		t.Errorf("unplaceable server: got %+v, want 503 with Retry-After 2", e)
	}
}

// TestRateLimit: one answer to an empty bucket, with the wait rounded up to whole seconds, on every front end:
// the 429 body and Retry-After on HTTP, retry_after_seconds in a tool error.
func TestRateLimit(t *testing.T) {
	if RetryAfterSeconds(0) != 1 || RetryAfterSeconds(time.Millisecond) != 1 || RetryAfterSeconds(1500*time.Millisecond) != 2 {
		t.Error("RetryAfterSeconds rounds up to whole seconds, at least 1")
	}
	if RateLimit(nil, auth.Anonymous("1.2.3.4")) != nil {
		t.Error("a nil limiter refused a call")
	}
	lim := auth.NewLimiter(1, 1)
	id := auth.Anonymous("1.2.3.4")
	if RateLimit(lim, id) != nil {
		t.Fatal("the first call was refused")
	}
	e := RateLimit(lim, id)
	if e == nil || e.Status != http.StatusTooManyRequests || e.Code != CodeRateLimited || e.RetryAfter != 1 ||
		e.Context["retry_after_seconds"] != 1 {
		t.Fatalf("second call: %+v", e)
	}
	rec := httptest.NewRecorder()
	Write(rec, e)
	var body map[string]any
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &body) != nil ||
		body["error_code"] != CodeRateLimited || body["detail"] != "Too many tool calls; retry after 1 s" {
		t.Errorf("HTTP answer %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	res := e.CallToolResult()
	sc, _ := res.StructuredContent.(map[string]any)
	if !res.IsError || sc["error_code"] != CodeRateLimited || sc["retry_after_seconds"] != 1 || len(res.Content) != 1 {
		t.Errorf("tool answer %+v", res)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Code: CodeServiceBusy}, "1"},
		{Error{Code: CodeServiceBusy, RetryAfter: 3}, "3"},
		{Error{Code: CodeStoreUnavailable, RetryAfter: 5}, "5"},
		{Error{Code: CodeInternal}, ""},
	} {
		if got := tc.e.RetryAfterHeader(); got != tc.want {
			t.Errorf("%s/%d: %q, want %q", tc.e.Code, tc.e.RetryAfter, got, tc.want)
		}
	}
}

// TestCredentialRequiredURL: CREDENTIAL_REQUIRED names where the caller provides their credential: PUT of a secret,
// or for a server whose callers authorize with OAuth, the POST that starts the authorization (no secret body).
func TestCredentialRequiredURL(t *testing.T) {
	route := routing.Route{Name: "srv.t", ServerID: "sid", ServerName: "srv"}
	for _, tc := range []struct {
		name       string
		oauth      bool
		url        string
		method     string
		secretBody bool
	}{
		{"secret", false, "/api/v1/aggregator/servers/sid/credentials/me", http.MethodPut, true},
		{"oauth", true, "/api/v1/aggregator/servers/sid/credentials/me/oauth", http.MethodPost, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := CallError(Call{Route: route}, &pb.ErrorInfo{Code: errcode.CredentialRequired, Message: "m", CredentialOauth: tc.oauth})
			if e.Status != http.StatusForbidden || e.Code != CodeCredentialRequired {
				t.Fatalf("got %d %s", e.Status, e.Code)
			}
			_, body := e.Context["body"]
			if e.Context["credential_url"] != tc.url || e.Context["method"] != tc.method || body != tc.secretBody {
				t.Fatalf("context %v: want %s %s (secret body %v)", e.Context, tc.method, tc.url, tc.secretBody)
			}
		})
	}
}
