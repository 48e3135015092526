package connconfig

import (
	"encoding/json"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
)

// Config is connection_config as JSON: the union of the transports' fields (BR-001). STDIO uses Command, Args,
// Env and Cwd; SSE uses URL and HTTP uses BaseURL, both with Headers. AllowInsecureHTTP lets an SSE or HTTP
// server use plain http to a host that is not loopback (PlainHTTPProblem). Every string may hold ${VAR}
// references, resolved at connect time (Resolve).
type Config struct {
	Command           string            `json:"command,omitempty"`
	Args              []string          `json:"args,omitempty"`
	Env               map[string]string `json:"env,omitempty"`
	Cwd               string            `json:"cwd,omitempty"`
	URL               string            `json:"url,omitempty"`
	BaseURL           string            `json:"base_url,omitempty"`
	Headers           map[string]string `json:"headers,omitempty"`
	AllowInsecureHTTP bool              `json:"allow_insecure_http,omitempty"`
}

// Keys returns, for a known transport, the connection_config keys BR-001 documents plus allow_insecure_http,
// and the one key the transport cannot do without. ok is false for an unknown transport.
func Keys(transport string) (allowed []string, required string, ok bool) {
	switch transport {
	case persistence.TransportSTDIO:
		return []string{"command", "args", "env", "cwd", "allow_insecure_http"}, "command", true
	case persistence.TransportSSE:
		return []string{"url", "headers", "allow_insecure_http"}, "url", true
	case persistence.TransportHTTP:
		return []string{"base_url", "headers", "allow_insecure_http"}, "base_url", true
	}
	return nil, "", false
}

// Parse reads a stored connection_config. References stay as written (see Resolve). On error the result holds
// what could be read.
func Parse(raw json.RawMessage) (Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("parse connection_config: %w", err)
	}
	return c, nil
}

// Endpoint is the URL an SSE (URL) or HTTP (BaseURL) server is reached at; "" for STDIO.
func (c Config) Endpoint(transport string) string {
	switch transport {
	case persistence.TransportSSE:
		return c.URL
	case persistence.TransportHTTP:
		return c.BaseURL
	}
	return ""
}

// AllowsInsecureHTTP reads allow_insecure_http from a stored connection_config without parsing the rest: health
// checks need it for a health_check_url, whatever the transport.
func AllowsInsecureHTTP(raw json.RawMessage) bool {
	var c struct {
		AllowInsecureHTTP bool `json:"allow_insecure_http"`
	}
	return json.Unmarshal(raw, &c) == nil && c.AllowInsecureHTTP
}
