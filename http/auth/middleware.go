package auth

import (
	"context"
	"net"
	"net/http"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcpgw/aggregator/http/apierror/errbody"
	"github.com/mcpgw/aggregator/http/auth/oauth"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// identityExtraKey is where the Identity travels in the go-sdk's TokenInfo.Extra.
const identityExtraKey = "io.mcpgw.aggregator/identity"

// Middleware guards a net/http handler (the MCP listener: /mcp, /sse, /mcp/servers/{name}, perhaps /metrics):
// every request is answered 401 (no or unknown token) or 403 (scope too low) in the error shape before the handler
// sees it. An accepted request carries its Identity in its context (FromContext), and, for the go-sdk's streamable
// HTTP handler, as an auth.TokenInfo too: the go-sdk copies that into every MCP request's Extra.TokenInfo (read it
// with FromTokenInfo) and binds the MCP session to the token's name, so another token cannot use the session.
//
// With an OAuth issuer configured, GET /.well-known/oauth-protected-resource (and its path forms, such as
// .../mcp) answers the RFC 9728 metadata without a token, and a 401 or 403 names that document in its
// WWW-Authenticate challenge.
//
// With no token configured, every request passes as Anonymous (its IP), and no TokenInfo is set.
func Middleware(tokens *Tokens, policy Policy, next http.Handler) http.Handler {
	withInfo := sdkauth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
		id, ok := FromContext(r.Context())
		if !ok {
			return nil, sdkauth.ErrInvalidToken
		}
		user := id.Name
		if id.OAuth {
			user = id.RateKey() // a static token and a subject of the same name never share a session
		}
		return &sdkauth.TokenInfo{UserID: user, Scopes: []string{id.Scope.String()},
			Extra: map[string]any{identityExtraKey: id}}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)

	var metadata http.Handler
	if v := tokens.OAuth(); v != nil {
		metadata = v.MetadataHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := remoteIP(r)
		if metadata != nil && oauth.IsMetadataPath(r.URL.Path) {
			metadata.ServeHTTP(w, r)
			return
		}
		if !tokens.Enabled() {
			next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), Anonymous(ip))))
			return
		}
		required := policy.Required(r.Method, r.URL.Path)
		if required == ScopeNone {
			next.ServeHTTP(w, r)
			return
		}
		id, status := CheckContext(r.Context(), tokens, r.Header.Get("Authorization"), required)
		if status != 0 {
			tokens.WriteHTTPError(w, status, required)
			return
		}
		id.IP = ip
		withInfo.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// Check authenticates an Authorization header against tokens and the required scope: it returns the identity and
// 0, or 401 (missing or unknown token) or 403 (scope too low). Auth must be enabled.
func Check(tokens *Tokens, header string, required Scope) (Identity, int) {
	return CheckContext(context.Background(), tokens, header, required)
}

// CheckContext is Check for a request's context (an access token may make the issuer's keys be fetched again).
func CheckContext(ctx context.Context, tokens *Tokens, header string, required Scope) (Identity, int) {
	tok, ok := BearerToken(header)
	if !ok {
		return Identity{}, http.StatusUnauthorized
	}
	id, ok := tokens.Verify(ctx, tok)
	if !ok {
		return Identity{}, http.StatusUnauthorized
	}
	if !id.Allows(required) {
		return id, http.StatusForbidden
	}
	return id, 0
}

// Challenge is the WWW-Authenticate value of a 401 or 403 without an OAuth issuer.
func Challenge(status int, required Scope) string { return (*Tokens)(nil).Challenge(status, required) }

// Detail is the message of a 401 or 403 without an OAuth issuer.
func Detail(status int, required Scope) (code, detail string) {
	return (*Tokens)(nil).Detail(status, required)
}

// WriteHTTPError answers 401 or 403 in the error shape {"detail","error_code"} with WWW-Authenticate, without an
// OAuth issuer.
func WriteHTTPError(w http.ResponseWriter, status int, required Scope) {
	(*Tokens)(nil).WriteHTTPError(w, status, required)
}

// ScopeName is the name a challenge gives a scope: the OAuth scope name (aggregator:admin, aggregator:client by
// default) with an issuer, else admin or client.
func (t *Tokens) ScopeName(s Scope) string {
	if v := t.OAuth(); v != nil {
		switch s {
		case ScopeAdmin:
			return v.AdminScope()
		case ScopeClient:
			return v.ClientScope()
		}
	}
	return s.String()
}

// Challenge is the WWW-Authenticate value of a 401 or 403 (RFC 6750). With an OAuth issuer it carries
// resource_metadata, the URL of the RFC 9728 document that tells an MCP client where to get a token (the MCP
// authorization specification); a 403 names the scope needed with error="insufficient_scope".
func (t *Tokens) Challenge(status int, required Scope) string {
	var b strings.Builder
	b.WriteString(`Bearer realm="mcp-aggregator"`)
	if status == http.StatusForbidden {
		b.WriteString(`, error="insufficient_scope", scope="` + t.ScopeName(required) + `"`)
	}
	if v := t.OAuth(); v != nil {
		if u := v.MetadataURL(); u != "" {
			b.WriteString(`, resource_metadata="` + u + `"`)
		}
	}
	return b.String()
}

// Detail is the message of a 401 or 403. It never says why a token was refused.
func (t *Tokens) Detail(status int, required Scope) (code, detail string) {
	if status == http.StatusForbidden {
		if t.OAuth() != nil {
			return errcode.Forbidden, "This operation needs a token with the " + required.String() + " scope (" + t.ScopeName(required) + ")"
		}
		return errcode.Forbidden, "This operation needs a token with the " + required.String() + " scope"
	}
	return errcode.Unauthorized, "A valid bearer token is required (Authorization: Bearer <token>)"
}

// WriteHTTPError answers 401 or 403 in the error shape {"detail","error_code"} with WWW-Authenticate.
func (t *Tokens) WriteHTTPError(w http.ResponseWriter, status int, required Scope) {
	code, detail := t.Detail(status, required)
	w.Header().Set("WWW-Authenticate", t.Challenge(status, required))
	errbody.Write(w, status, errbody.Body{Detail: detail, ErrorCode: code}, "")
}

// FromTokenInfo returns the Identity Middleware put in a go-sdk TokenInfo (an MCP request's Extra.TokenInfo).
func FromTokenInfo(ti *sdkauth.TokenInfo) (Identity, bool) {
	if ti == nil {
		return Identity{}, false
	}
	id, ok := ti.Extra[identityExtraKey].(Identity)
	return id, ok
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
