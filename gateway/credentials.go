package gateway

import (
	"context"
	"net/url"

	"github.com/mcpgw/aggregator/http/auth"
)

// Subjects of callers' own credentials (per_user servers): whose secret a call uses and whose a REST request
// stores. A static token and an OAuth subject of the same name are different callers, as in their rate limits.
const (
	subjectOAuth     = "oauth:"
	subjectToken     = "token:"
	subjectAnonymous = "anonymous"
)

// CredentialSubject names the caller whose own credential applies: "oauth:<sub>" for an OAuth access token,
// "token:<name>" for a static token, "anonymous" while auth is off (every caller is then the one admin).
func CredentialSubject(id auth.Identity) string {
	switch {
	case id.Anonymous || id.Name == "":
		return subjectAnonymous
	case id.OAuth:
		return subjectOAuth + id.Name
	}
	return subjectToken + id.Name
}

// CredentialPath is the REST path where a caller stores their own credential for a server.
func CredentialPath(serverID string) string {
	return "/api/v1/aggregator/servers/" + serverID + "/credentials/me"
}

// OAuthStartPath is the REST path where a caller starts the OAuth authorization of a per_user server whose
// user_credential is oauth (POST; the answer holds the authorization URL to open).
func OAuthStartPath(serverID string) string {
	return CredentialPath(serverID) + "/oauth"
}

// CredentialPageURL is the web console's page (console: its address, as MCP_AGGREGATOR_CONSOLE_URL) where the
// caller stores their credential for a server, naming the URL-mode elicitation that sent them there.
func CredentialPageURL(console, serverID, elicitation string) string {
	return console + "#credential=" + url.QueryEscape(serverID) + "&elicitation=" + url.QueryEscape(elicitation)
}

type subjectKey struct{}

// WithCallerSubject returns ctx carrying the subject whose own credential a per_user server's call runs with (Call
// sets it from CallRequest.Caller; the actors read it with CallerSubject).
func WithCallerSubject(ctx context.Context, subject string) context.Context {
	return context.WithValue(ctx, subjectKey{}, subject)
}

// CallerSubject is the subject WithCallerSubject put in ctx ("" none).
func CallerSubject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}
