package validate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
)

func TestRegistrationOAuthCredential(t *testing.T) {
	const (
		http  = `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"https://h/mcp"},"credential_mode":"per_user","user_credential":`
		sse   = `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h/sse"},"credential_mode":"per_user","user_credential":`
		stdio = `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p"},"credential_mode":"per_user","user_credential":`
	)
	valid := []struct {
		name, body string
		want       persistence.OAuthSlot
	}{
		{"empty", http + `{"oauth":{}}}`, persistence.OAuthSlot{}},
		{"client and scopes", http + `{"oauth":{"client_id":"agg","scopes":["crm.read","offline_access"]}}}`,
			persistence.OAuthSlot{ClientID: "agg", Scopes: []string{"crm.read", "offline_access"}}},
		{"token exchange", http + `{"oauth":{"token_exchange":true}}}`, persistence.OAuthSlot{TokenExchange: true}},
		{"no token exchange", http + `{"oauth":{"token_exchange":false}}}`, persistence.OAuthSlot{}},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			req, errs := Registration([]byte(tc.body), Outbound(nil))
			if len(errs) > 0 {
				t.Fatalf("errors: %+v", errs)
			}
			if req.UserCredential == nil || req.UserCredential.OAuth == nil || !reflect.DeepEqual(*req.UserCredential.OAuth, tc.want) ||
				req.UserCredential.Header != "" || req.UserCredential.Env != "" {
				t.Fatalf("slot %+v, want oauth %+v", req.UserCredential, tc.want)
			}
		})
	}
	bad := []struct{ name, body, loc, typ string }{
		{"on SSE", sse + `{"oauth":{}}}`, "body.user_credential.oauth", apierror.FieldValueError},
		{"on STDIO", stdio + `{"oauth":{}}}`, "body.user_credential.oauth", apierror.FieldValueError},
		{"with header", http + `{"oauth":{},"header":"Authorization"}}`, "body.user_credential.header", apierror.FieldExtraForbidden},
		{"with prefix", http + `{"oauth":{},"prefix":"Bearer "}}`, "body.user_credential.prefix", apierror.FieldExtraForbidden},
		{"not an object", http + `{"oauth":true}}`, "body.user_credential.oauth", apierror.FieldTypeError},
		{"token_exchange not a boolean", http + `{"oauth":{"token_exchange":"yes"}}}`, "body.user_credential.oauth.token_exchange", apierror.FieldTypeError},
		{"extra member", http + `{"oauth":{"client_secret":"s"}}}`, "body.user_credential.oauth.client_secret", apierror.FieldExtraForbidden},
		{"empty client_id", http + `{"oauth":{"client_id":""}}}`, "body.user_credential.oauth.client_id", apierror.FieldValueError},
		{"client_id with CRLF", http + `{"oauth":{"client_id":"a\r\nb"}}}`, "body.user_credential.oauth.client_id", apierror.FieldValueError},
		{"long client_id", http + `{"oauth":{"client_id":"` + strings.Repeat("c", MaxOAuthClientIDLength+1) + `"}}}`, "body.user_credential.oauth.client_id", apierror.FieldValueError},
		{"scopes not a list", http + `{"oauth":{"scopes":"a b"}}}`, "body.user_credential.oauth.scopes", apierror.FieldTypeError},
		{"scope with space", http + `{"oauth":{"scopes":["a b"]}}}`, "body.user_credential.oauth.scopes.0", apierror.FieldValueError},
		{"scope with quote", http + `{"oauth":{"scopes":["ok","a\"b"]}}}`, "body.user_credential.oauth.scopes.1", apierror.FieldValueError},
		{"scope not a string", http + `{"oauth":{"scopes":[1]}}}`, "body.user_credential.oauth.scopes.0", apierror.FieldTypeError},
		{"too many scopes", http + `{"oauth":{"scopes":[` + strings.TrimSuffix(strings.Repeat(`"s",`, MaxOAuthScopes+1), ",") + `]}}}`, "body.user_credential.oauth.scopes", apierror.FieldValueError},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			req, errs := Registration([]byte(tc.body), Outbound(nil))
			if !hasError(errs, tc.loc, tc.typ) {
				t.Fatalf("want %s at %s, got %+v (req %+v)", tc.typ, tc.loc, errs, req)
			}
		})
	}
}

func TestOAuthStateBody(t *testing.T) {
	if s, errs := OAuthState([]byte(`{"state":"abc"}`)); s != "abc" || len(errs) > 0 {
		t.Fatalf("ok: %q %+v", s, errs)
	}
	for body, loc := range map[string]string{`{}`: "body.state", `{"state":""}`: "body.state", `{"state":1}`: "body.state",
		`{"state":"a\nb"}`: "body.state", `{"state":"a","subject":"token:x"}`: "body.subject"} {
		if _, errs := OAuthState([]byte(body)); len(errs) == 0 || errs[0].Path() != loc {
			t.Errorf("%s: %+v", body, errs)
		}
	}
}
