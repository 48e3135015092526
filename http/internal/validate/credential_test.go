package validate

import (
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/persistence"
)

func TestRegistrationCredential(t *testing.T) {
	const (
		stdio = `{"name":"a","transport_type":"STDIO","connection_config":{"command":"p"}`
		http  = `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"https://h/mcp"}`
		sse   = `{"name":"a","transport_type":"SSE","connection_config":{"url":"https://h/sse"}`
	)
	valid := []struct {
		name string
		body string
		mode string
		slot *persistence.UserCredentialSlot
	}{
		{"default shared", http + `}`, persistence.CredentialShared, nil},
		{"shared explicit, null slot", http + `,"credential_mode":"shared","user_credential":null}`, persistence.CredentialShared, nil},
		{"stdio env", stdio + `,"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`, persistence.CredentialPerUser,
			&persistence.UserCredentialSlot{Env: "API_KEY"}},
		{"http header with prefix", http + `,"credential_mode":"per_user","user_credential":{"header":"Authorization","prefix":"Bearer "}}`,
			persistence.CredentialPerUser, &persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}},
		{"sse header", sse + `,"credential_mode":"per_user","user_credential":{"header":"X-Api-Key"}}`, persistence.CredentialPerUser,
			&persistence.UserCredentialSlot{Header: "X-Api-Key"}},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			req, errs := Registration([]byte(tc.body), Outbound(nil))
			if len(errs) > 0 {
				t.Fatalf("errors: %+v", errs)
			}
			if req.CredentialMode != tc.mode {
				t.Errorf("mode %q, want %q", req.CredentialMode, tc.mode)
			}
			if (req.UserCredential == nil) != (tc.slot == nil) || tc.slot != nil && *req.UserCredential != *tc.slot {
				t.Errorf("slot %+v, want %+v", req.UserCredential, tc.slot)
			}
		})
	}
	bad := []struct {
		name string
		body string
		loc  string
		typ  string
	}{
		{"unknown mode", http + `,"credential_mode":"team"}`, "body.credential_mode", apierror.FieldValueError},
		{"mode number", http + `,"credential_mode":1}`, "body.credential_mode", apierror.FieldTypeError},
		{"per_user without slot", http + `,"credential_mode":"per_user"}`, "body.user_credential", apierror.FieldMissing},
		{"slot on shared", http + `,"user_credential":{"header":"Authorization"}}`, "body.user_credential", apierror.FieldValueError},
		{"env on HTTP", http + `,"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`, "body.user_credential.env", apierror.FieldValueError},
		{"env on SSE", sse + `,"credential_mode":"per_user","user_credential":{"env":"API_KEY"}}`, "body.user_credential.env", apierror.FieldValueError},
		{"header on STDIO", stdio + `,"credential_mode":"per_user","user_credential":{"header":"Authorization"}}`, "body.user_credential.header", apierror.FieldValueError},
		{"both", http + `,"credential_mode":"per_user","user_credential":{"header":"A","env":"B"}}`, "body.user_credential", apierror.FieldValueError},
		{"neither", http + `,"credential_mode":"per_user","user_credential":{}}`, "body.user_credential", apierror.FieldMissing},
		{"slot not object", http + `,"credential_mode":"per_user","user_credential":"Authorization"}`, "body.user_credential", apierror.FieldTypeError},
		{"slot extra key", http + `,"credential_mode":"per_user","user_credential":{"header":"A","value":"x"}}`, "body.user_credential.value", apierror.FieldExtraForbidden},
		{"header with space", http + `,"credential_mode":"per_user","user_credential":{"header":"Bad Name"}}`, "body.user_credential.header", apierror.FieldValueError},
		{"header with colon", http + `,"credential_mode":"per_user","user_credential":{"header":"X-A:"}}`, "body.user_credential.header", apierror.FieldValueError},
		{"header empty", http + `,"credential_mode":"per_user","user_credential":{"header":""}}`, "body.user_credential.header", apierror.FieldValueError},
		{"header reserved", http + `,"credential_mode":"per_user","user_credential":{"header":"Mcp-Session-Id"}}`, "body.user_credential.header", apierror.FieldValueError},
		{"header too long", http + `,"credential_mode":"per_user","user_credential":{"header":"` + strings.Repeat("h", MaxCredentialNameLength+1) + `"}}`, "body.user_credential.header", apierror.FieldValueError},
		{"prefix with CRLF", http + `,"credential_mode":"per_user","user_credential":{"header":"A","prefix":"x\r\nEvil: 1"}}`, "body.user_credential.prefix", apierror.FieldValueError},
		{"prefix on env", stdio + `,"credential_mode":"per_user","user_credential":{"env":"K","prefix":"Bearer "}}`, "body.user_credential.prefix", apierror.FieldExtraForbidden},
		{"env starts with digit", stdio + `,"credential_mode":"per_user","user_credential":{"env":"1KEY"}}`, "body.user_credential.env", apierror.FieldValueError},
		{"env with =", stdio + `,"credential_mode":"per_user","user_credential":{"env":"A=B"}}`, "body.user_credential.env", apierror.FieldValueError},
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

func TestSecretBody(t *testing.T) {
	tests := []struct {
		name, body, want, loc, typ string
	}{
		{name: "ok", body: `{"secret":"ghp_abc 123"}`, want: "ghp_abc 123"},
		{name: "missing", body: `{}`, loc: "body.secret", typ: apierror.FieldMissing},
		{name: "null", body: `{"secret":null}`, loc: "body.secret", typ: apierror.FieldMissing},
		{name: "empty", body: `{"secret":""}`, loc: "body.secret", typ: apierror.FieldValueError},
		{name: "number", body: `{"secret":1}`, loc: "body.secret", typ: apierror.FieldTypeError},
		{name: "newline", body: `{"secret":"a\nb"}`, loc: "body.secret", typ: apierror.FieldValueError},
		{name: "too long", body: `{"secret":"` + strings.Repeat("s", MaxSecretLength+1) + `"}`, loc: "body.secret", typ: apierror.FieldValueError},
		{name: "extra", body: `{"secret":"a","subject":"someone-else"}`, loc: "body.subject", typ: apierror.FieldExtraForbidden},
		{name: "not json", body: `secret`, loc: "body", typ: apierror.FieldJSONInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := Secret([]byte(tc.body))
			if tc.loc == "" {
				if len(errs) > 0 || got != tc.want {
					t.Fatalf("got %q, %+v", got, errs)
				}
				return
			}
			if !hasError(errs, tc.loc, tc.typ) || got != "" {
				t.Fatalf("want %s at %s, got %q, %+v", tc.typ, tc.loc, got, errs)
			}
		})
	}
}
