package validate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Limits of a per_user server's user_credential (issue 28).
const (
	// MaxCredentialNameLength bounds a header or environment variable name.
	MaxCredentialNameLength = 128
	// MaxCredentialPrefixLength bounds a header prefix ("Bearer ").
	MaxCredentialPrefixLength = 64
	// MaxSecretLength bounds a caller's secret (PUT .../credentials/me).
	MaxSecretLength = 8192
)

var (
	// headerNameRe is an HTTP header name: an RFC 9110 token.
	headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// envNameRe is a portable environment variable name.
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// scopeRe is an OAuth scope token (RFC 6749 section 3.3).
	scopeRe = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`)
)

// reservedHeaders are headers the transport itself sets; a caller's secret must not replace them.
var reservedHeaders = []string{"host", "content-length", "content-type", "transfer-encoding", "connection",
	"upgrade", "te", "trailer", "keep-alive", "proxy-connection", "accept", "mcp-session-id", "mcp-protocol-version",
	"last-event-id", "x-request-id"}

// userCredentialSchema is the schema of user_credential.
func userCredentialSchema() *jsonschema.Schema {
	s := object([]property{
		prop("env", &jsonschema.Schema{Type: "string", MaxLength: ptr(MaxCredentialNameLength),
			Description: "STDIO: the environment variable of the caller's own child that receives the caller's secret"}),
		prop("header", &jsonschema.Schema{Type: "string", MaxLength: ptr(MaxCredentialNameLength),
			Description: "SSE, HTTP: the request header of the caller's own backend session that carries the secret"}),
		prop("prefix", &jsonschema.Schema{Type: "string", MaxLength: ptr(MaxCredentialPrefixLength),
			Description: "SSE, HTTP: put before the secret in the header (e.g. \"Bearer \")"}),
		prop("oauth", oauthSlotSchema()),
	})
	s.Type, s.Types = "", []string{"object", "null"}
	s.Description = "per_user only: where each caller's secret goes: {\"env\": ...} (STDIO), {\"header\": ..., \"prefix\": ...} (SSE, HTTP), or {\"oauth\": {...}} (HTTP: each caller authorizes the OAuth-protected backend)"
	return s
}

// Limits of user_credential.oauth.
const (
	MaxOAuthClientIDLength = 256
	MaxOAuthScopes         = 32
	MaxOAuthScopeLength    = 128
)

func oauthSlotSchema() *jsonschema.Schema {
	return object([]property{
		prop("client_id", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxOAuthClientIDLength),
			Description: "A public client registered beforehand at the backend's authorization server (PKCE, no secret); absent: registered dynamically (RFC 7591)"}),
		prop("scopes", &jsonschema.Schema{Type: "array", MaxItems: ptr(MaxOAuthScopes),
			Items:       &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxOAuthScopeLength)},
			Description: "The scopes to ask for; absent: those the backend's metadata advertises"}),
		prop("token_exchange", &jsonschema.Schema{Type: "boolean",
			Description: "Exchange (RFC 8693) a caller's own access token of the organisation's issuer for a backend token, when the backend's authorization server offers it, instead of asking the caller to authorize (the caller's token is sent to that authorization server)"}),
	})
}

// oauthSlot reads user_credential.oauth at loc.
func (v checker) oauthSlot(raw json.RawMessage, loc []any) *persistence.OAuthSlot {
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		v.Add(strictjson.FieldTypeError, "Input should be a JSON object", loc)
		return nil
	}
	slot := &persistence.OAuthSlot{}
	for _, m := range members {
		at := strictjson.At(loc, m.Key)
		switch m.Key {
		case "client_id":
			s, ok := v.String(m.Value, at)
			if ok && (s == "" || len(s) > MaxOAuthClientIDLength || !printableASCII(s)) {
				v.Add(strictjson.FieldValueError, fmt.Sprintf("client_id should have 1 to %d printable ASCII characters", MaxOAuthClientIDLength), at)
			}
			slot.ClientID = s
		case "scopes":
			var scopes []json.RawMessage
			if err := json.Unmarshal(m.Value, &scopes); err != nil || strictjson.KindOf(m.Value) != strictjson.KindArray {
				v.Add(strictjson.FieldTypeError, "Input should be a list of scopes", at)
				continue
			}
			if len(scopes) > MaxOAuthScopes {
				v.Add(strictjson.FieldValueError, fmt.Sprintf("at most %d scopes", MaxOAuthScopes), at)
				continue
			}
			for i, r := range scopes {
				si := strictjson.At(at, i)
				s, ok := v.String(r, si)
				if ok && (s == "" || len(s) > MaxOAuthScopeLength || !scopeRe.MatchString(s)) {
					v.Add(strictjson.FieldValueError, fmt.Sprintf("a scope is 1 to %d characters, printable ASCII without spaces, quotes or backslashes", MaxOAuthScopeLength), si)
				}
				slot.Scopes = append(slot.Scopes, s)
			}
		case "token_exchange":
			slot.TokenExchange, _ = v.Bool(m.Value, at)
		default:
			v.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", at)
		}
	}
	return slot
}

// credential reads credential_mode and user_credential of a registration for a server of transport ("" when the
// transport is itself invalid: the combination checks are skipped).
func (v checker) credential(fields map[string]json.RawMessage, transport string) (string, *persistence.UserCredentialSlot) {
	mode := persistence.CredentialShared
	if raw, ok := fields["credential_mode"]; ok && strictjson.KindOf(raw) != strictjson.KindNull {
		s, ok := v.String(raw, v.At("credential_mode"))
		switch {
		case !ok:
			return "", nil
		case s != persistence.CredentialShared && s != persistence.CredentialPerUser:
			v.Add(strictjson.FieldValueError, "Input should be 'shared' or 'per_user'", v.At("credential_mode"))
			return "", nil
		}
		mode = s
	}
	raw, has := fields["user_credential"]
	if has && strictjson.KindOf(raw) == strictjson.KindNull {
		has = false
	}
	if !has {
		if mode == persistence.CredentialPerUser {
			v.Add(strictjson.FieldMissing, "Field required when credential_mode is 'per_user': where each caller's "+
				`secret goes, {"env": "API_KEY"} for STDIO or {"header": "Authorization", "prefix": "Bearer "} for SSE and HTTP`,
				v.At("user_credential"))
		}
		return mode, nil
	}
	loc := v.At("user_credential")
	if mode != persistence.CredentialPerUser {
		v.Add(strictjson.FieldValueError, "user_credential needs credential_mode 'per_user'", loc)
		return "", nil
	}
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		v.Add(strictjson.FieldTypeError, "Input should be a JSON object", loc)
		return "", nil
	}
	f := v.Index(members, loc)
	for _, m := range members {
		if m.Key != "env" && m.Key != "header" && m.Key != "prefix" && m.Key != "oauth" {
			v.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", strictjson.At(loc, m.Key))
		}
	}
	var slot persistence.UserCredentialSlot
	str := func(key string) (string, bool) {
		r, ok := f[key]
		if !ok {
			return "", false
		}
		return v.String(r, strictjson.At(loc, key))
	}
	n := v.Count()
	if rawOAuth, ok := f["oauth"]; ok {
		// OAuth: the caller's secret is the grant the daemon obtains; nothing else goes with it.
		for _, k := range []string{"env", "header", "prefix"} {
			if _, has := f[k]; has {
				v.Add(strictjson.FieldExtraForbidden, k+" does not go with oauth (the token goes in Authorization: Bearer)", strictjson.At(loc, k))
			}
		}
		if transport != "" && transport != persistence.TransportHTTP {
			v.Add(strictjson.FieldValueError, "oauth is for HTTP (streamable HTTP) servers", strictjson.At(loc, "oauth"))
		}
		slot.OAuth = v.oauthSlot(rawOAuth, strictjson.At(loc, "oauth"))
		if v.Count() > n {
			return "", nil
		}
		return mode, &slot
	}
	env, hasEnv := str("env")
	header, hasHeader := str("header")
	prefix, hasPrefix := str("prefix")
	switch {
	case hasEnv && hasHeader:
		v.Add(strictjson.FieldValueError, "Give env (STDIO) or header (SSE, HTTP), not both", loc)
	case !hasEnv && !hasHeader:
		v.Add(strictjson.FieldMissing, "Field required: env (STDIO), header (SSE, HTTP) or oauth (HTTP)", loc)
	case hasEnv:
		if transport != "" && transport != persistence.TransportSTDIO {
			v.Add(strictjson.FieldValueError, "env is for STDIO servers; a "+transport+" server takes header", strictjson.At(loc, "env"))
		}
		if hasPrefix {
			v.Add(strictjson.FieldExtraForbidden, "prefix goes with header only", strictjson.At(loc, "prefix"))
		}
		if len(env) > MaxCredentialNameLength || !envNameRe.MatchString(env) {
			v.Add(strictjson.FieldValueError, fmt.Sprintf("env should be a variable name (a letter or '_', then letters, "+
				"digits or '_'; at most %d)", MaxCredentialNameLength), strictjson.At(loc, "env"))
		}
		slot.Env = env
	case hasHeader:
		if transport == persistence.TransportSTDIO {
			v.Add(strictjson.FieldValueError, "header is for SSE and HTTP servers; a STDIO server takes env", strictjson.At(loc, "header"))
		}
		switch {
		case len(header) > MaxCredentialNameLength || !headerNameRe.MatchString(header):
			v.Add(strictjson.FieldValueError, fmt.Sprintf("header should be an HTTP header name (token characters, at most %d)",
				MaxCredentialNameLength), strictjson.At(loc, "header"))
		case isReservedHeader(header):
			v.Add(strictjson.FieldValueError, "header "+header+" is set by the transport itself", strictjson.At(loc, "header"))
		}
		if hasPrefix && (len(prefix) > MaxCredentialPrefixLength || !printableASCII(prefix)) {
			v.Add(strictjson.FieldValueError, fmt.Sprintf("prefix should be printable ASCII, at most %d characters",
				MaxCredentialPrefixLength), strictjson.At(loc, "prefix"))
		}
		slot.Header, slot.Prefix = header, prefix
	}
	if v.Count() > n {
		return "", nil
	}
	return mode, &slot
}

func isReservedHeader(h string) bool {
	h = strings.ToLower(h)
	for _, r := range reservedHeaders {
		if h == r {
			return true
		}
	}
	return false
}

// printableASCII reports whether s is only printable ASCII (space included): nothing that could end a header line.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Secret reads PUT /servers/{id}/credentials/me: {"secret": "..."}, 1 to MaxSecretLength printable characters
// without line breaks (it may end up in an HTTP header).
func Secret(body []byte) (string, []FieldError) {
	c, f, ok := objectChecker(body, "secret")
	if !ok {
		return "", c.Errors()
	}
	raw, has := f["secret"]
	if !has {
		c.Add(strictjson.FieldMissing, "Field required", c.At("secret"))
		return "", c.Errors()
	}
	s, ok := c.String(raw, c.At("secret"))
	switch {
	case !ok:
	case s == "" || len(s) > MaxSecretLength:
		c.Add(strictjson.FieldValueError, fmt.Sprintf("secret should have 1 to %d bytes", MaxSecretLength), c.At("secret"))
	case !printableSecret(s):
		c.Add(strictjson.FieldValueError, "secret should have no control characters (no line breaks)", c.At("secret"))
	}
	if c.Count() > 0 {
		return "", c.Errors()
	}
	return s, nil
}

// SecretSchema is PUT /servers/{id}/credentials/me's body.
func SecretSchema() *jsonschema.Schema {
	return object([]property{
		prop("secret", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxSecretLength),
			Description: "The caller's own secret for this server (an API key, a token); stored encrypted, never returned"}),
	}, "secret")
}

func printableSecret(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// MaxOAuthStateLength bounds the state of POST /oauth/complete.
const MaxOAuthStateLength = 512

// OAuthState reads POST /oauth/complete: {"state": "..."}, the state of the caller's flow (1 to
// MaxOAuthStateLength printable characters).
func OAuthState(body []byte) (string, []FieldError) {
	c, f, ok := objectChecker(body, "state")
	if !ok {
		return "", c.Errors()
	}
	raw, has := f["state"]
	if !has {
		c.Add(strictjson.FieldMissing, "Field required", c.At("state"))
		return "", c.Errors()
	}
	s, ok := c.String(raw, c.At("state"))
	if ok && (s == "" || len(s) > MaxOAuthStateLength || !printableASCII(s)) {
		c.Add(strictjson.FieldValueError, fmt.Sprintf("state should have 1 to %d printable characters", MaxOAuthStateLength), c.At("state"))
	}
	if c.Count() > 0 {
		return "", c.Errors()
	}
	return s, nil
}

// OAuthStateSchema is POST /oauth/complete's body.
func OAuthStateSchema() *jsonschema.Schema {
	return object([]property{
		prop("state", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxOAuthStateLength),
			Description: "The state of the caller's flow (the console reads it from #oauth=<state>)"}),
	}, "state")
}
