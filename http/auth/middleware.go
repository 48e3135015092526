package auth

import (
	"context"
	"net"
	"net/http"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcpgw/aggregator/http/apierror/errbody"
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
// With no token configured, every request passes as Anonymous (its IP), and no TokenInfo is set.
func Middleware(tokens *Tokens, policy Policy, next http.Handler) http.Handler {
	withInfo := sdkauth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
		id, ok := FromContext(r.Context())
		if !ok {
			return nil, sdkauth.ErrInvalidToken
		}
		return &sdkauth.TokenInfo{UserID: id.Name, Scopes: []string{id.Scope.String()},
			Extra: map[string]any{identityExtraKey: id}}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := remoteIP(r)
		if !tokens.Enabled() {
			next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), Anonymous(ip))))
			return
		}
		required := policy.Required(r.Method, r.URL.Path)
		if required == ScopeNone {
			next.ServeHTTP(w, r)
			return
		}
		id, status := Check(tokens, r.Header.Get("Authorization"), required)
		if status != 0 {
			WriteHTTPError(w, status, required)
			return
		}
		id.IP = ip
		withInfo.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// Check authenticates an Authorization header against tokens and the required scope: it returns the identity and
// 0, or 401 (missing or unknown token) or 403 (scope too low). Auth must be enabled.
func Check(tokens *Tokens, header string, required Scope) (Identity, int) {
	tok, ok := BearerToken(header)
	if !ok {
		return Identity{}, http.StatusUnauthorized
	}
	id, ok := tokens.Authenticate(tok)
	if !ok {
		return Identity{}, http.StatusUnauthorized
	}
	if !id.Allows(required) {
		return id, http.StatusForbidden
	}
	return id, 0
}

// Challenge is the WWW-Authenticate value of a 401 or 403.
func Challenge(status int, required Scope) string {
	if status == http.StatusForbidden {
		return `Bearer realm="mcp-aggregator", error="insufficient_scope", scope="` + required.String() + `"`
	}
	return `Bearer realm="mcp-aggregator"`
}

// Detail is the message of a 401 or 403.
func Detail(status int, required Scope) (code, detail string) {
	if status == http.StatusForbidden {
		return errcode.Forbidden, "This operation needs a token with the " + required.String() + " scope"
	}
	return errcode.Unauthorized, "A valid bearer token is required (Authorization: Bearer <token>)"
}

// WriteHTTPError answers 401 or 403 in the error shape {"detail","error_code"} with WWW-Authenticate.
func WriteHTTPError(w http.ResponseWriter, status int, required Scope) {
	code, detail := Detail(status, required)
	w.Header().Set("WWW-Authenticate", Challenge(status, required))
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
