package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgw/aggregator/http/apierror/errbody"
	"github.com/mcpgw/aggregator/internal/errcode"
)

// WellKnownPath is where RFC 9728 puts protected-resource metadata: at the root for a resource without a path, and
// with the resource's path appended (/.well-known/oauth-protected-resource/mcp for .../mcp).
const WellKnownPath = "/.well-known/oauth-protected-resource"

// MetadataURL is the RFC 9728 metadata URL of a resource URL: the well-known path inserted between its origin and
// its path. "" when resource is not an absolute http(s) URL.
func MetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	return u.Scheme + "://" + u.Host + WellKnownPath + strings.TrimSuffix(u.EscapedPath(), "/")
}

// Metadata is the protected-resource metadata document of the aggregator: the resource (the public URL of /mcp),
// its authorization server (the issuer), the scopes of its two roles, and bearer tokens in the header only.
func (v *Verifier) Metadata() *oauthex.ProtectedResourceMetadata {
	return &oauthex.ProtectedResourceMetadata{
		Resource:               v.cfg.Resource,
		AuthorizationServers:   []string{v.issuer},
		ScopesSupported:        []string{v.cfg.ClientScope, v.cfg.AdminScope},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "MCP aggregator",
	}
}

// MetadataURL is the URL of this resource's metadata document (the path form of Resource), for the
// resource_metadata parameter of a challenge.
func (v *Verifier) MetadataURL() string { return MetadataURL(v.cfg.Resource) }

// MetadataHandler serves Metadata on GET (and HEAD) at the root well-known path and at every path form below it
// (/.well-known/oauth-protected-resource/mcp, .../sse, .../mcp/servers/x): the aggregator is one resource whatever
// endpoint a client started from. Any origin may read it (RFC 9728 metadata is public); other methods answer 405
// in the error shape.
func (v *Verifier) MetadataHandler() http.Handler {
	doc, _ := json.Marshal(v.Metadata())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			w.Header().Set("Allow", "GET, HEAD, OPTIONS")
			errbody.Write(w, http.StatusMethodNotAllowed, errbody.Body{Detail: "Method not allowed", ErrorCode: errcode.MethodNotAllowed}, "")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(doc)
		}
	})
}

// IsMetadataPath reports whether path is the well-known metadata path or one of its path forms.
func IsMetadataPath(path string) bool {
	return path == WellKnownPath || strings.HasPrefix(path, WellKnownPath+"/")
}

// AuthorizationEndpoint and TokenEndpoint are the issuer's, as its discovery document names them ("" when it names
// none): the console signs in through them (authorization code with PKCE).
func (v *Verifier) AuthorizationEndpoint() string { return v.meta.AuthorizationEndpoint }

// TokenEndpoint: see AuthorizationEndpoint.
func (v *Verifier) TokenEndpoint() string { return v.meta.TokenEndpoint }

// Audience is the aud a token must carry, the resource a client asks a token for (RFC 8707).
func (v *Verifier) Audience() string { return v.cfg.Audience }
