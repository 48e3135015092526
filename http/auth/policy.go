package auth

import "strings"

// Policy decides which scope a request needs, from its method and path. One policy serves the REST app and the MCP
// listener, so both agree.
//
// It matches paths the way the REST app routes them (case-insensitively, trailing slashes ignored, no unescaping),
// and it fails safe: a write route it does not know needs admin, a read route it does not know needs client, and
// only the exact open paths need nothing.
type Policy struct {
	// MetricsOpen serves /metrics without a token (MCP_AGGREGATOR_METRICS_OPEN).
	MetricsOpen bool
}

// Paths the policy knows, normalized (lower case, no trailing slash).
const (
	healthPath    = "/api/v1/aggregator/health"
	livePath      = "/livez"
	readyPath     = "/readyz"
	metricsPath   = "/metrics"
	auditPath     = "/api/v1/aggregator/audit"
	actorsPath    = "/api/v1/aggregator/actors"
	toolCallPath  = "/api/v1/tools/call"
	searchPath    = "/api/v1/search"
	tasksPath     = "/api/v1/tasks"
	mcpPath       = "/mcp"
	ssePath       = "/sse"
	aggregatorAPI = "/api/v1/aggregator/"
	consolePath   = "/ui"
	// The OAuth flows of per_user servers' backends (issue 28).
	oauthCallbackPath = "/api/v1/aggregator/oauth/callback"
	oauthCompletePath = "/api/v1/aggregator/oauth/complete"
)

// Normalize is the form paths are compared in: lower case, without trailing slashes ("/" stays "/").
func Normalize(path string) string {
	p := strings.ToLower(path)
	for len(p) > 1 && strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
	}
	return p
}

// IsProbe reports whether a path is a health probe or the metrics scrape: their request logs are at debug level,
// so an orchestrator polling every few seconds does not flood the log.
func IsProbe(path string) bool {
	switch Normalize(path) {
	case healthPath, livePath, readyPath, metricsPath:
		return true
	}
	return false
}

// IsToolCall reports whether a request is a REST tool call (rate limited per client).
func IsToolCall(method, path string) bool {
	return strings.EqualFold(method, "POST") && Normalize(path) == toolCallPath
}

// Required returns the scope a request needs:
//
//   - none: GET /api/v1/aggregator/health, the probes /livez and /readyz (both listeners), /metrics when
//     MetricsOpen, and reads of the console's static files (/ui, /ui/...: they hold no data; what they show comes
//     from the API under the operator's token);
//   - client: every other read (GET, HEAD, OPTIONS), POST /api/v1/tools/call, DELETE /api/v1/tasks/{id} (a task
//     is its creator's), searches (POST .../search), /metrics,
//     and every method on the MCP endpoints /mcp, /mcp/..., /sse (their admin meta-tools are checked per call);
//   - client: PUT and DELETE /api/v1/aggregator/servers/{id}/credentials/me (the caller's own credential), POST
//     .../credentials/me/oauth and POST /api/v1/aggregator/oauth/complete (the caller's own OAuth flow);
//   - none: GET /api/v1/aggregator/oauth/callback (the authorization server's redirect, completed by its caller);
//   - admin: the audit log, the actor view (/api/v1/aggregator/actors), tool curation (reads too: they show
//     backends' original text and token bindings), the list of who has a credential for a server (GET
//     .../credentials) and revoking one, and
//     every other write (register, patch, delete, connect, disconnect, refresh, and any
//     write route added later until it is listed here).
func (p Policy) Required(method, path string) Scope {
	n := Normalize(path)
	switch {
	case n == healthPath || n == livePath || n == readyPath:
		return ScopeNone
	case n == metricsPath:
		if p.MetricsOpen {
			return ScopeNone
		}
		return ScopeClient
	case n == mcpPath || strings.HasPrefix(n, mcpPath+"/") || n == ssePath || strings.HasPrefix(n, ssePath+"/"):
		return ScopeClient
	case n == auditPath || strings.HasPrefix(n, auditPath+"/"), n == actorsPath, isCurationPath(n):
		return ScopeAdmin
	case isCredentialPath(n):
		// A caller stores and removes their own credential, and starts their own OAuth authorization; listing and
		// revoking others' is the admin's.
		if strings.HasSuffix(n, "/credentials/me") && (strings.EqualFold(method, "PUT") || strings.EqualFold(method, "DELETE")) {
			return ScopeClient
		}
		if strings.HasSuffix(n, "/credentials/me/oauth") && strings.EqualFold(method, "POST") {
			return ScopeClient
		}
		return ScopeAdmin
	case n == oauthCallbackPath && isRead(method):
		// The authorization server's redirect: a browser without the caller's token; it only records the code for
		// the flow of its state, which only the caller who started it can complete.
		return ScopeNone
	case n == oauthCompletePath && strings.EqualFold(method, "POST"):
		return ScopeClient
	case (n == consolePath || strings.HasPrefix(n, consolePath+"/")) && isRead(method):
		return ScopeNone
	}
	switch strings.ToUpper(method) {
	case "GET", "HEAD", "OPTIONS":
		return ScopeClient
	case "DELETE":
		if strings.HasPrefix(n, tasksPath+"/") { // cancelling one's own task (the task decides whose it is)
			return ScopeClient
		}
	case "POST":
		if n == toolCallPath || n == searchPath || (strings.HasPrefix(n, "/api/") && strings.HasSuffix(n, "/search") &&
			!strings.HasPrefix(n, aggregatorAPI+"servers")) {
			return ScopeClient
		}
	}
	return ScopeAdmin
}

// isCredentialPath reports whether n (normalized) is /api/v1/aggregator/servers/{id}/credentials[/...].
func isCredentialPath(n string) bool {
	rest, ok := strings.CutPrefix(n, aggregatorAPI+"servers/")
	if !ok {
		return false
	}
	_, tail, ok := strings.Cut(rest, "/")
	return ok && (tail == "credentials" || strings.HasPrefix(tail, "credentials/"))
}

// isRead reports whether a method only reads.
func isRead(method string) bool {
	switch strings.ToUpper(method) {
	case "GET", "HEAD":
		return true
	}
	return false
}

// isCurationPath reports whether n (normalized) is a tool curation route: /api/v1/aggregator/profiles[/...], the
// access policy /api/v1/aggregator/policy, and
// /api/v1/aggregator/servers/{id}/tool-filter, /pinning, /tools/overrides, /tools/changes[/...] and
// /tools/{tool}/override.
func isCurationPath(n string) bool {
	if n == aggregatorAPI+"profiles" || strings.HasPrefix(n, aggregatorAPI+"profiles/") || n == aggregatorAPI+"policy" {
		return true
	}
	rest, ok := strings.CutPrefix(n, aggregatorAPI+"servers/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return false
	}
	switch {
	case len(parts) == 2 && (parts[1] == "tool-filter" || parts[1] == "pinning"):
		return true
	case parts[1] == "tools" && len(parts) >= 3 && (parts[2] == "overrides" || parts[2] == "changes"):
		return true
	case parts[1] == "tools" && len(parts) == 4 && parts[3] == "override":
		return true
	}
	return false
}
