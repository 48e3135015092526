package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/http/auth/oauth"
)

// oidcConfig makes the daemon an OAuth 2.1 protected resource of an OpenID provider (http/auth/oauth). Issuer ""
// leaves it off.
type oidcConfig struct {
	Issuer string
	// Audience is the aud access tokens must carry; PublicURL is the URL clients reach /mcp at, the resource's
	// identifier in the protected-resource metadata (and the default audience).
	Audience, PublicURL     string
	AdminScope, ClientScope string
	// ConsoleClientID is the console's public client at the issuer ("" : the console asks for a token).
	ConsoleClientID string
}

// oidcStartTimeout bounds the discovery and the first key fetch at start.
const oidcStartTimeout = 15 * time.Second

// loadOIDCConfig reads the MCP_AGGREGATOR_OIDC_* settings and MCP_AGGREGATOR_MCP_PUBLIC_URL. mcpListen is the MCP
// listen address, the default public URL's host when it names one host.
func loadOIDCConfig(get func(string) string, mcpListen string, errs []string) (oidcConfig, []string) {
	c := oidcConfig{Issuer: get("MCP_AGGREGATOR_OIDC_ISSUER"), Audience: get("MCP_AGGREGATOR_OIDC_AUDIENCE"),
		PublicURL: get("MCP_AGGREGATOR_MCP_PUBLIC_URL"), AdminScope: get("MCP_AGGREGATOR_OIDC_ADMIN_SCOPE"),
		ClientScope: get("MCP_AGGREGATOR_OIDC_CLIENT_SCOPE"), ConsoleClientID: get("MCP_AGGREGATOR_OIDC_CONSOLE_CLIENT_ID")}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_MCP_PUBLIC_URL=%q: want the http(s) URL clients reach /mcp at, e.g. https://mcp.example.com/mcp", c.PublicURL))
		}
	}
	if c.Issuer == "" {
		return c, errs
	}
	if err := oauth.CheckURL(c.Issuer); err != nil {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_OIDC_ISSUER=%q: %v", c.Issuer, err))
	}
	if c.PublicURL == "" {
		host, port, err := net.SplitHostPort(mcpListen)
		ip := net.ParseIP(host)
		if err != nil || host == "" || port == "0" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_MCP_PUBLIC_URL is required with MCP_AGGREGATOR_OIDC_ISSUER when MCP_AGGREGATOR_MCP_LISTEN=%q names no single host and port", mcpListen))
		} else {
			c.PublicURL = "http://" + net.JoinHostPort(host, port) + "/mcp"
		}
	}
	if c.Audience == "" {
		c.Audience = c.PublicURL
	} else if strings.ContainsAny(c.Audience, " \t\"\\") {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_OIDC_AUDIENCE=%q: no spaces, quotes or backslashes", c.Audience))
	}
	for _, s := range []struct{ name, value string }{{"MCP_AGGREGATOR_OIDC_ADMIN_SCOPE", c.AdminScope}, {"MCP_AGGREGATOR_OIDC_CLIENT_SCOPE", c.ClientScope}} {
		if !scopeToken(s.value) {
			errs = append(errs, fmt.Sprintf("%s=%q: want a scope name (printable ASCII without spaces, quotes or backslashes)", s.name, s.value))
		}
	}
	if c.ConsoleClientID != "" && !scopeToken(c.ConsoleClientID) {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_OIDC_CONSOLE_CLIENT_ID=%q: printable ASCII without spaces, quotes or backslashes", c.ConsoleClientID))
	}
	if c.AdminScope == c.ClientScope {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_OIDC_ADMIN_SCOPE and MCP_AGGREGATOR_OIDC_CLIENT_SCOPE must differ (both %q)", c.AdminScope))
	}
	return c, errs
}

// scopeToken reports whether s is a scope-token of RFC 6749 (%x21 / %x23-5B / %x5D-7E).
func scopeToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x21 || b > 0x7e || b == '"' || b == '\\' {
			return false
		}
	}
	return s != ""
}

// verifier discovers the issuer and fetches its keys; an issuer that cannot be reached is an error that stops the
// start (nil, nil when no issuer is configured).
func (c oidcConfig) verifier(ctx context.Context, logger *slog.Logger) (*oauth.Verifier, error) {
	if c.Issuer == "" {
		return nil, nil
	}
	sctx, cancel := context.WithTimeout(ctx, oidcStartTimeout)
	defer cancel()
	v, err := oauth.New(sctx, oauth.Config{Issuer: c.Issuer, Audience: c.Audience, Resource: c.PublicURL,
		AdminScope: c.AdminScope, ClientScope: c.ClientScope, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("MCP_AGGREGATOR_OIDC_ISSUER: %w", err)
	}
	return v, nil
}
