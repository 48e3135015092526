package main

import (
	"strings"
	"testing"
)

// TestLoadOIDCConfig: the issuer, audience, public URL and scope settings, their defaults and their refusals.
func TestLoadOIDCConfig(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    oidcConfig
		wantErr string
	}{
		{name: "off", env: map[string]string{}, want: oidcConfig{AdminScope: "aggregator:admin", ClientScope: "aggregator:client"}},
		{name: "defaults from the MCP listen address", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com/realms/x"},
			want: oidcConfig{Issuer: "https://idp.example.com/realms/x", Audience: "http://127.0.0.1:8082/mcp", PublicURL: "http://127.0.0.1:8082/mcp",
				AdminScope: "aggregator:admin", ClientScope: "aggregator:client"}},
		{name: "everything set", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com", "MCP_AGGREGATOR_OIDC_AUDIENCE": "api://aggregator",
			"MCP_AGGREGATOR_MCP_PUBLIC_URL": "https://mcp.example.com/mcp", "MCP_AGGREGATOR_OIDC_ADMIN_SCOPE": "mcp.admin", "MCP_AGGREGATOR_OIDC_CLIENT_SCOPE": "mcp.use",
			"MCP_AGGREGATOR_MCP_LISTEN": "0.0.0.0:8082", "MCP_AGGREGATOR_ADMIN_TOKENS": "ops:admin-token-0123456789"},
			want: oidcConfig{Issuer: "https://idp.example.com", Audience: "api://aggregator", PublicURL: "https://mcp.example.com/mcp", AdminScope: "mcp.admin", ClientScope: "mcp.use"}},
		{name: "public URL needed on 0.0.0.0", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com", "MCP_AGGREGATOR_MCP_LISTEN": "0.0.0.0:8082",
			"MCP_AGGREGATOR_ADMIN_TOKENS": "ops:admin-token-0123456789"}, wantErr: "MCP_AGGREGATOR_MCP_PUBLIC_URL is required"},
		{name: "http issuer beyond loopback", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "http://idp.example.com"}, wantErr: "MCP_AGGREGATOR_OIDC_ISSUER"},
		{name: "http issuer on loopback", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "http://127.0.0.1:9000"},
			want: oidcConfig{Issuer: "http://127.0.0.1:9000", Audience: "http://127.0.0.1:8082/mcp", PublicURL: "http://127.0.0.1:8082/mcp", AdminScope: "aggregator:admin", ClientScope: "aggregator:client"}},
		{name: "bad public URL", env: map[string]string{"MCP_AGGREGATOR_MCP_PUBLIC_URL": "mcp.example.com"}, wantErr: "MCP_AGGREGATOR_MCP_PUBLIC_URL"},
		{name: "scope with a quote", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com", "MCP_AGGREGATOR_OIDC_ADMIN_SCOPE": `a"b`}, wantErr: "MCP_AGGREGATOR_OIDC_ADMIN_SCOPE"},
		{name: "same scopes", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com", "MCP_AGGREGATOR_OIDC_ADMIN_SCOPE": "x", "MCP_AGGREGATOR_OIDC_CLIENT_SCOPE": "x"}, wantErr: "must differ"},
		{name: "audience with a space", env: map[string]string{"MCP_AGGREGATOR_OIDC_ISSUER": "https://idp.example.com", "MCP_AGGREGATOR_OIDC_AUDIENCE": "a b"}, wantErr: "MCP_AGGREGATOR_OIDC_AUDIENCE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(lookupFrom(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.OIDC != tc.want {
				t.Fatalf("OIDC %+v, want %+v", c.OIDC, tc.want)
			}
		})
	}
}
