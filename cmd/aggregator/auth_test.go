package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestLoadConfigAuthAndLimits(t *testing.T) {
	c, err := loadConfig(lookupFrom(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens.Enabled() || c.MetricsOpen || c.RateLimit != 100 || c.RateBurst != 200 || c.Actors.MaxToolsPerServer != 5000 {
		t.Fatalf("defaults: tokens %v metrics %v rate %v/%d cap %d", c.Tokens.Enabled(), c.MetricsOpen, c.RateLimit, c.RateBurst, c.Actors.MaxToolsPerServer)
	}
	c, err = loadConfig(lookupFrom(map[string]string{
		"MCP_AGGREGATOR_ADMIN_TOKENS": "ops:admin-secret-token-0001", "MCP_AGGREGATOR_CLIENT_TOKENS": "client-secret-token-0001",
		"MCP_AGGREGATOR_METRICS_OPEN": "true", "MCP_AGGREGATOR_RATE_LIMIT": "0", "MCP_AGGREGATOR_RATE_BURST": "7",
		"MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER": "1200",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a, cl := c.Tokens.Count(); a != 1 || cl != 1 || !c.MetricsOpen || c.RateLimit != 0 || c.RateBurst != 7 || c.Actors.MaxToolsPerServer != 1200 {
		t.Fatalf("parsed: %d %d %+v", a, cl, c)
	}
	_, err = loadConfig(lookupFrom(map[string]string{
		"MCP_AGGREGATOR_ADMIN_TOKENS": "ops:tooshort", "MCP_AGGREGATOR_METRICS_OPEN": "maybe", "MCP_AGGREGATOR_RATE_LIMIT": "-1",
		"MCP_AGGREGATOR_RATE_BURST": "0", "MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER": "none",
	}))
	for _, want := range []string{"MCP_AGGREGATOR_ADMIN_TOKENS entry 1", "MCP_AGGREGATOR_METRICS_OPEN", "MCP_AGGREGATOR_RATE_LIMIT",
		"MCP_AGGREGATOR_RATE_BURST", "MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %s, got %v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "tooshort") {
		t.Fatalf("the error leaks the token: %v", err)
	}
}

// TestServeRefusesExposedWithoutToken: with no token, serve refuses a non-loopback listen address (exit 2).
func TestServeRefusesExposedWithoutToken(t *testing.T) {
	for _, k := range []string{"MCP_AGGREGATOR_ADMIN_TOKENS", "MCP_AGGREGATOR_CLIENT_TOKENS", "MCP_AGGREGATOR_TOKENS_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("MCP_AGGREGATOR_DATA_DIR", t.TempDir())
	for _, env := range []string{"MCP_AGGREGATOR_LISTEN", "MCP_AGGREGATOR_MCP_LISTEN"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "0.0.0.0:0")
			var out, errb bytes.Buffer
			code := run([]string{"serve"}, &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), env) || !strings.Contains(errb.String(), "loopback") {
				t.Fatalf("exit %d, stderr %q", code, errb.String())
			}
		})
	}
}
