package main

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence/crypt"
)

// config is everything the daemon reads from its environment. README's configuration table lists the same
// variables with the same defaults; TestConfigTableMatchesReadme keeps the two in step.
type config struct {
	Listen    string
	MCPListen string
	// ConsoleURL is where users' browsers reach the web console ("" unknown): see consoleURL.
	ConsoleURL      string
	DatabaseURL     string
	DataDir         string
	Enabled         bool
	MaxBodyBytes    int
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	LogFormat       string
	Actors          actors.Config
	// CredentialKey and CredentialKeyPrevious are MCP_CREDENTIAL_KEY and MCP_CREDENTIAL_KEY_PREVIOUS decoded
	// (nil when unset); see credentials.go.
	CredentialKey, CredentialKeyPrevious []byte
	// Tokens are the bearer tokens (empty: auth off, loopback only); MetricsOpen serves /metrics without one.
	Tokens      *auth.Tokens
	MetricsOpen bool
	// ActorMetrics exports protoactor's own instruments (protoactor_*) on /metrics: see main.go, actorMeters.
	ActorMetrics bool
	// OIDC accepts the access tokens of an OpenID provider beside the tokens (oidc.go; Issuer "": off).
	OIDC oidcConfig
	// RateLimit (tool calls per second per client, 0 off) and RateBurst size each client's token bucket.
	RateLimit float64
	RateBurst int
	// Search holds the tool-search settings; see search.go.
	Search searchConfig
	// MCPSessionIdle (0: never), MCPMaxSessions and MCPMaxSessionsPerClient bound the sessions of /mcp and /sse.
	MCPSessionIdle time.Duration
	// MCPInputWait bounds how long a 2026-07-28 client's call is held for its input (mcpserver.Options.InputWait).
	MCPInputWait                            time.Duration
	MCPMaxSessions, MCPMaxSessionsPerClient int
	// ProxyMaxSessions and ProxyIdle (0: never) bound the sessions of /mcp/servers/{name}, per server.
	ProxyMaxSessions int
	ProxyIdle        time.Duration
	// AllowedHosts and AllowedOrigins extend the host and origin guard of both listeners (auth.HostGuard) beyond
	// the listen addresses and loopback names.
	AllowedHosts, AllowedOrigins []string
	// Cluster makes the daemon a node of a cluster (cluster.go; Mode "" is a single node).
	Cluster clusterConfig
	// Tasks bounds the durable tasks (tasks.go).
	Tasks taskConfig
}

// hostGuard is the DNS-rebinding and cross-origin guard of both listeners.
func (c config) hostGuard() *auth.HostGuard {
	return auth.NewHostGuard([]string{c.Listen, c.MCPListen}, c.AllowedHosts, c.AllowedOrigins)
}

// envVar documents one variable: its name, default and meaning. The table drives parsing and the README check.
type envVar struct {
	Name, Default, Help string
}

// envVars is the configuration table, in README order.
func envVars() []envVar {
	return []envVar{
		{"MCP_AGGREGATOR_LISTEN", "127.0.0.1:8081", "address of the REST API"},
		{"MCP_AGGREGATOR_MCP_LISTEN", "127.0.0.1:8082", "address of the MCP endpoint (/mcp streamable HTTP, /sse, /mcp/servers/{name})"},
		{"MCP_AGGREGATOR_ALIAS_SEPARATOR", "__", "joins server and tool in the MCP endpoint's client-safe tool names"},
		{"DATABASE_URL", "", "PostgreSQL URL; unset: the embedded SQLite store in the data directory"},
		{"MCP_AGGREGATOR_DATA_DIR", "./data", "where the embedded store keeps its file"},
		{"MCP_CREDENTIAL_KEY", "", "32 bytes as base64 or 64 hex characters: the AES-256-GCM key connection_config is encrypted under at rest; required when a listen address is not loopback, else generated once into the data directory"},
		{"MCP_CREDENTIAL_KEY_PREVIOUS", "", "the key before the current one, still accepted for reading while `aggregator rotate-key` re-encrypts under MCP_CREDENTIAL_KEY"},
		{"MCP_AGGREGATOR_ENABLED", "true", "false makes `serve` exit at once saying the aggregator is disabled"},
		{"MCP_AGGREGATOR_MAX_SERVERS", "50", "registrations beyond this answer 409 SERVER_LIMIT_REACHED"},
		{"MCP_AGGREGATOR_HEALTH_INTERVAL", "30", "seconds between health checks of a server"},
		{"MCP_AGGREGATOR_HEALTH_TIMEOUT", "5", "seconds one health check may take"},
		{"MCP_AGGREGATOR_CONNECTION_TIMEOUT", "30", "seconds one connect + initialize may take"},
		{"MCP_AGGREGATOR_REQUEST_TIMEOUT", "60", "seconds one tool call may take"},
		{"MCP_AGGREGATOR_RETRY_INTERVAL", "60", "seconds between reconnects of a server in ERROR after the 1-2-4-8-16 s backoff; 0 stops retrying"},
		{"MCP_AGGREGATOR_KEEPALIVE_INTERVAL", "1", "seconds between MCP pings on SSE and HTTP sessions, to notice a dead server; 0 disables"},
		{"MCP_AGGREGATOR_DRAIN_TIMEOUT", "30", "seconds a disconnect without force waits for calls in flight"},
		{"MCP_AGGREGATOR_ASK_TIMEOUT", "5", "seconds an API request waits for an actor before answering 503"},
		{"MCP_AGGREGATOR_SHUTDOWN_TIMEOUT", "20", "seconds SIGTERM may take to close sessions and stop children"},
		{"MCP_AGGREGATOR_MAX_BODY_BYTES", "1048576", "largest request body; larger ones answer 413"},
		{"MCP_AGGREGATOR_ADMIN_TOKENS", "", "comma-separated admin bearer tokens, each `name:token` or `token` (16+ characters): everything, including managing servers and the audit log"},
		{"MCP_AGGREGATOR_CLIENT_TOKENS", "", "comma-separated client bearer tokens: list and read servers and tools, search, call tools, the MCP endpoint (not its admin meta-tools)"},
		{"MCP_AGGREGATOR_TOKENS_FILE", "", "file of `scope name token` lines (scope admin or client, `#` comments), added to the tokens above; with no token at all auth is off and only loopback listen addresses are accepted"},
		{"MCP_AGGREGATOR_OIDC_ISSUER", "", "issuer URL of an OpenID provider / OAuth authorization server (https, or http on loopback) whose JWT access tokens are accepted beside the tokens above; its metadata and keys are discovered at start (unreachable: the daemon does not start)"},
		{"MCP_AGGREGATOR_OIDC_AUDIENCE", "", "the `aud` an access token must carry (RFC 8707); unset: MCP_AGGREGATOR_MCP_PUBLIC_URL"},
		{"MCP_AGGREGATOR_OIDC_ADMIN_SCOPE", "aggregator:admin", "the access-token scope that gives the admin role"},
		{"MCP_AGGREGATOR_OIDC_CLIENT_SCOPE", "aggregator:client", "the access-token scope that gives the client role"},
		{"MCP_AGGREGATOR_OIDC_CONSOLE_CLIENT_ID", "", "the console's public client id at the issuer (redirect URI: the REST origin + /ui/): the console then signs in through the provider (authorization code with PKCE); unset: it asks for a token"},
		{"MCP_AGGREGATOR_CONSOLE_URL", "", "the web console's URL as users' browsers reach it (e.g. https://agg.example.com/ui/): a call that needs the caller's own credential (per_user servers) asks a client that supports URL elicitation to open the console's page for it; unset: http://MCP_AGGREGATOR_LISTEN/ui/ unless that address is 0.0.0.0 or ::, where such calls answer CREDENTIAL_REQUIRED at once; its origin is also where backends' authorization servers send users back (/api/v1/aggregator/oauth/callback, OAuth to protected backends)"},
		{"MCP_AGGREGATOR_MCP_PUBLIC_URL", "", "the URL clients reach /mcp at (e.g. https://mcp.example.com/mcp behind a proxy): the protected resource named in the OAuth metadata; unset: http://MCP_AGGREGATOR_MCP_LISTEN/mcp (required with an issuer when that address is 0.0.0.0 or ::)"},
		{"MCP_AGGREGATOR_METRICS_OPEN", "false", "true serves /metrics without a token"},
		{"MCP_AGGREGATOR_ACTOR_METRICS", "false", "true adds protoactor's own instruments to /metrics (protoactor_*: message processing time by actor and message type, mailbox length, futures, dead letters); they cost every actor message a histogram record with labels formatted for it, 7-17 % of the daemon's CPU per tool call (BENCHMARKS.md)"},
		{"MCP_AGGREGATOR_RATE_LIMIT", "100", "tool calls per second per client (token name, or IP while auth is off), REST and MCP together; beyond the burst 429 RATE_LIMITED with Retry-After; 0 disables"},
		{"MCP_AGGREGATOR_RATE_BURST", "200", "tool calls a client may make at once before the rate limit applies"},
		{"MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER", "5000", "discovery keeps the first this many tools of a server (listing order) and logs a warning"},
		{"MCP_AGGREGATOR_SEARCH_FIRST", "false", "true: the MCP endpoint lists only the meta-tools; clients search, then call (aliases and namespaced names still work)"},
		{"MCP_AGGREGATOR_MCP_TOKEN_BUDGET", "20000", "tokens a tools/list answer of /mcp may cost when the whole toolset does not fit: then it lists the meta-tools, the caller's recently called tools and the most used ones that fit, and search finds the rest (estimated o200k_base tokens); a client may ask for its own with ?token_budget=N on the endpoint URL or _meta io.mcpgw.aggregator/tokenBudget; 0 disables"},
		{"MCP_AGGREGATOR_SKILLS_FILE", "", "a skills taxonomy file (the format of search/classify/skills.json); unset: the one that ships"},
		{"MCP_AGGREGATOR_EMBEDDING_URL", "", "OpenAI-compatible embeddings API (OpenAI, Ollama, TEI, vLLM); unset: the built-in hashed embedder"},
		{"MCP_AGGREGATOR_EMBEDDING_MODEL", "", "embedding model name (required with the URL)"},
		{"MCP_AGGREGATOR_EMBEDDING_DIMENSIONS", "", "embedding size to ask for (unset: the model's own)"},
		{"MCP_AGGREGATOR_EMBEDDING_API_KEY", "", "API key of the embeddings API"},
		{"MCP_AGGREGATOR_CLASSIFIER_URL", "", "OpenAI-compatible chat completions API for the LLM skill classifier; unset: the built-in classifier"},
		{"MCP_AGGREGATOR_CLASSIFIER_MODEL", "", "chat model of the LLM classifier (required with the URL)"},
		{"MCP_AGGREGATOR_CLASSIFIER_API_KEY", "", "API key of the chat completions API"},
		{"QDRANT_URL", "", "Qdrant gRPC address (host:6334); unset: the in-process vector index"},
		{"QDRANT_API_KEY", "", "Qdrant API key"},
		{"QDRANT_COLLECTION", "mcp_unified_search", "Qdrant collection of the tool vectors"},
		{"MCP_AGGREGATOR_MAX_OPEN_TASKS", "100", "open (working) tasks one caller may have at once; beyond it a task-augmented call answers 429 TASK_LIMIT_REACHED (REST) or a JSON-RPC error with that body (/mcp); 0 no cap"},
		{"MCP_AGGREGATOR_TASK_TTL", "3600", "seconds a task and its result are kept, from its creation, when the caller asks no TTL"},
		{"MCP_AGGREGATOR_TASK_MAX_TTL", "86400", "the longest TTL a caller may ask for a task (a longer one is lowered to it); expired tasks are deleted every minute"},
		{"MCP_AGGREGATOR_MCP_SESSION_IDLE_TIMEOUT", "600", "seconds an /mcp session may send nothing before it is closed; 0 never"},
		{"MCP_AGGREGATOR_MCP_INPUT_WAIT", "300", "seconds a tool call of a 2026-07-28 client whose backend asked the client something (elicitation, sampling, roots) is held for the client's retry with its answer before it is cancelled"},
		{"MCP_AGGREGATOR_MCP_MAX_SESSIONS", "1000", "sessions /mcp and /sse hold at once; beyond it a new session answers 503 SESSION_LIMIT_REACHED with Retry-After"},
		{"MCP_AGGREGATOR_MCP_MAX_SESSIONS_PER_CLIENT", "100", "sessions one client (token name, or IP while auth is off) may hold on /mcp and /sse; beyond it 429 SESSION_LIMIT_REACHED with Retry-After"},
		{"MCP_AGGREGATOR_PROXY_MAX_SESSIONS", "32", "sessions of one server on /mcp/servers/{name} (each over stdio runs its own child); beyond it 503 SERVICE_BUSY with Retry-After"},
		{"MCP_AGGREGATOR_PROXY_IDLE_TIMEOUT", "600", "seconds a /mcp/servers/{name} session may send nothing before it and its upstream session are closed; 0 never"},
		{"MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH", "", "comma-separated names of variables of the daemon's environment that stdio servers inherit besides the minimal set (PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG, LANGUAGE, LC_*, TZ, TMPDIR); the daemon's own settings cannot be listed"},
		{"MCP_AGGREGATOR_ALLOWED_HOSTS", "", "comma-separated extra host names both listeners answer to (`*.example.com` for subdomains, `*` for any); always allowed: the listen address, loopback names, and IP literals when listening on 0.0.0.0/::; any other Host header answers 403 HOST_NOT_ALLOWED (DNS rebinding)"},
		{"MCP_AGGREGATOR_ALLOWED_ORIGINS", "", "comma-separated browser origins (`https://app.example.com`, `*` for any) allowed besides the daemon's own and loopback origins; any other Origin header answers 403 ORIGIN_NOT_ALLOWED"},
		{"MCP_AGGREGATOR_MAX_MESSAGE_BYTES", "16777216", "largest message read from a backend on any transport; a larger result fails its call with 502 RESPONSE_TOO_LARGE and the session is kept"},
		{"MCP_AGGREGATOR_MESSAGE_BUDGET_BYTES", "134217728", "bytes of large backend messages (64 KiB and over) being read at once, all servers together; beyond it a message is refused like an oversized one; 0 no bound"},
		{"MCP_AGGREGATOR_MESSAGE_BUDGET_PER_SERVER_BYTES", "33554432", "the share of that budget one server may hold; 0 no bound"},
		{"MCP_AGGREGATOR_OUTBOUND_DENY", "", "comma-separated CIDRs or IPs the daemon never connects to (SSE/HTTP sessions, redirects, health checks), in addition to the default metadata and link-local rules"},
		{"MCP_AGGREGATOR_OUTBOUND_ALLOW", "", "comma-separated CIDRs or IPs the daemon may connect to even when a default rule or MCP_AGGREGATOR_OUTBOUND_DENY refuses them (e.g. 169.254.0.0/16 for a link-local MCP server)"},
		{"MCP_AGGREGATOR_NOTIFY_RATE", "100", "log messages, and progress notifications, of one server relayed to its callers per second (a burst of as many passes at once); beyond it they are dropped and counted in mcp_aggregator_notifications_dropped_total; 0 no bound"},
		{"MCP_AGGREGATOR_MAX_CALLS_PER_SERVER", "64", "calls in flight on one server at once (REST and MCP together); one more answers 503 SERVER_BUSY with Retry-After"},
		{"MCP_AGGREGATOR_USER_SESSION_IDLE", "600", "seconds a caller's own session of a per_user server (and its stdio child) stays open without a call"},
		{"MCP_AGGREGATOR_MAX_USER_SESSIONS", "64", "callers' own sessions one per_user server runs at once (each over stdio runs its own child); a call of one more caller answers 503 SERVER_BUSY"},
		{"MCP_AGGREGATOR_CLUSTER", "", "`etcd` or `automanaged` makes the daemon a node of a cluster (needs DATABASE_URL and MCP_CREDENTIAL_KEY); empty: a single node, no cluster port"},
		{"MCP_AGGREGATOR_CLUSTER_NAME", "mcp-aggregator", "nodes join the cluster of this name"},
		{"MCP_AGGREGATOR_CLUSTER_LISTEN", "127.0.0.1:0", "host:port of the node's cluster port (protoactor remoting over gRPC; port 0: a free one); the cluster network must be private: this port has no authentication"},
		{"MCP_AGGREGATOR_CLUSTER_ADVERTISE", "", "the host other nodes reach this one at (required when the cluster port listens on all interfaces); also used for the node's MCP address"},
		{"MCP_AGGREGATOR_CLUSTER_ETCD", "127.0.0.1:2379", "etcd endpoints (comma-separated) for membership, with MCP_AGGREGATOR_CLUSTER=etcd"},
		{"MCP_AGGREGATOR_CLUSTER_PEERS", "", "with MCP_AGGREGATOR_CLUSTER=automanaged: every node's health address (host:port, comma-separated); empty: zero-config, up to three nodes on this host at 127.0.0.1:6330-6332"},
		{"MCP_AGGREGATOR_CLUSTER_HEALTH_PORT", "", "with automanaged: this node's health port (it listens on all interfaces); empty: the first free port of the peers on this host"},
		{"MCP_AGGREGATOR_LEASE_TTL", "10", "seconds a server's ownership lease lasts without renewal (renewed every third of it): when several processes share a store, the longest a server stays unserved after the process that served it died"},
		{"MCP_AGGREGATOR_LOG_LEVEL", "info", "debug, info, warn or error"},
		{"MCP_AGGREGATOR_LOG_FORMAT", "json", "json or text"},
	}
}

// loadConfig reads the environment through lookup (os.LookupEnv in main) and reports every bad value at once.
func loadConfig(lookup func(string) (string, bool)) (config, error) {
	get := func(name string) string {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		for _, e := range envVars() {
			if e.Name == name {
				return e.Default
			}
		}
		return ""
	}
	var errs []string
	seconds := func(name string, allowZero bool) time.Duration {
		raw := get(name)
		d, err := parseSeconds(raw)
		if err != nil || d < 0 || (!allowZero && d == 0) {
			errs = append(errs, fmt.Sprintf("%s=%q: want a positive number of seconds (e.g. 30 or 0.5) or a duration (e.g. 500ms)", name, raw))
		}
		return d
	}
	integer := func(name string) int {
		raw := get(name)
		n, err := strconv.Atoi(raw)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Sprintf("%s=%q: want a positive integer", name, raw))
		}
		return n
	}

	c := config{
		Listen:      get("MCP_AGGREGATOR_LISTEN"),
		MCPListen:   get("MCP_AGGREGATOR_MCP_LISTEN"),
		DatabaseURL: get("DATABASE_URL"),
		DataDir:     get("MCP_AGGREGATOR_DATA_DIR"),
		LogFormat:   strings.ToLower(get("MCP_AGGREGATOR_LOG_FORMAT")),
	}
	c.Enabled, errs = boolSetting(get, "MCP_AGGREGATOR_ENABLED", errs)
	a := actors.DefaultConfig()
	a.MaxServers = integer("MCP_AGGREGATOR_MAX_SERVERS")
	a.HealthInterval = seconds("MCP_AGGREGATOR_HEALTH_INTERVAL", false)
	a.HealthTimeout = seconds("MCP_AGGREGATOR_HEALTH_TIMEOUT", false)
	a.ConnectionTimeout = seconds("MCP_AGGREGATOR_CONNECTION_TIMEOUT", false)
	a.RequestTimeout = seconds("MCP_AGGREGATOR_REQUEST_TIMEOUT", false)
	a.Retry.Steady = seconds("MCP_AGGREGATOR_RETRY_INTERVAL", true)
	a.KeepAlive = seconds("MCP_AGGREGATOR_KEEPALIVE_INTERVAL", true)
	a.DrainTimeout = seconds("MCP_AGGREGATOR_DRAIN_TIMEOUT", false)
	a.AskTimeout = seconds("MCP_AGGREGATOR_ASK_TIMEOUT", false)
	a.MaxToolsPerServer = integer("MCP_AGGREGATOR_MAX_TOOLS_PER_SERVER")
	a.MaxMessageBytes = integer("MCP_AGGREGATOR_MAX_MESSAGE_BYTES")
	if a.MaxMessageBytes > 0 && a.MaxMessageBytes < 1024 {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_MAX_MESSAGE_BYTES=%q: want at least 1024 bytes", get("MCP_AGGREGATOR_MAX_MESSAGE_BYTES")))
	}
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"MCP_AGGREGATOR_MESSAGE_BUDGET_BYTES", &a.MessageBudgetBytes}, {"MCP_AGGREGATOR_MESSAGE_BUDGET_PER_SERVER_BYTES", &a.MessageBudgetPerServerBytes}} {
		n, err := strconv.ParseInt(get(b.name), 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("%s=%q: want bytes (0: no bound)", b.name, get(b.name)))
		}
		*b.dst = n
	}
	a.MaxCallsPerServer = integer("MCP_AGGREGATOR_MAX_CALLS_PER_SERVER")
	a.UserSessionIdle = seconds("MCP_AGGREGATOR_USER_SESSION_IDLE", false)
	a.MaxUserSessions = integer("MCP_AGGREGATOR_MAX_USER_SESSIONS")
	if r, err := strconv.ParseFloat(get("MCP_AGGREGATOR_NOTIFY_RATE"), 64); err != nil || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_NOTIFY_RATE=%q: want notifications per second (0: no bound)", get("MCP_AGGREGATOR_NOTIFY_RATE")))
	} else {
		a.NotifyRate = r
	}
	a.LeaseTTL = seconds("MCP_AGGREGATOR_LEASE_TTL", false)
	if a.LeaseTTL > 0 && a.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_LEASE_TTL=%q: want at least 0.3 seconds", get("MCP_AGGREGATOR_LEASE_TTL")))
	}
	c.Search, errs = loadSearchConfig(get, errs)
	c.Cluster, errs = loadClusterConfig(get, errs)
	c.Tasks, errs = loadTaskConfig(get, errs)
	a.StdioEnvPassthrough, errs = stdioPassthrough(get("MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH"), errs)
	a.AliasSeparator = get("MCP_AGGREGATOR_ALIAS_SEPARATOR")
	if !clientSafe(a.AliasSeparator) {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_ALIAS_SEPARATOR=%q: want characters from [a-zA-Z0-9_-]", a.AliasSeparator))
	}
	a.OutboundDeny, errs = prefixList("MCP_AGGREGATOR_OUTBOUND_DENY", get("MCP_AGGREGATOR_OUTBOUND_DENY"), errs)
	a.OutboundAllow, errs = prefixList("MCP_AGGREGATOR_OUTBOUND_ALLOW", get("MCP_AGGREGATOR_OUTBOUND_ALLOW"), errs)
	c.Actors = a
	c.ShutdownTimeout = seconds("MCP_AGGREGATOR_SHUTDOWN_TIMEOUT", false)
	c.MaxBodyBytes = integer("MCP_AGGREGATOR_MAX_BODY_BYTES")
	tokens, err := auth.Parse(get("MCP_AGGREGATOR_ADMIN_TOKENS"), get("MCP_AGGREGATOR_CLIENT_TOKENS"), get("MCP_AGGREGATOR_TOKENS_FILE"))
	if err != nil {
		errs = append(errs, err.Error())
	}
	c.Tokens = tokens
	c.OIDC, errs = loadOIDCConfig(get, c.MCPListen, errs)
	c.MetricsOpen, errs = boolSetting(get, "MCP_AGGREGATOR_METRICS_OPEN", errs)
	c.ActorMetrics, errs = boolSetting(get, "MCP_AGGREGATOR_ACTOR_METRICS", errs)
	if r, err := strconv.ParseFloat(get("MCP_AGGREGATOR_RATE_LIMIT"), 64); err != nil || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_RATE_LIMIT=%q: want calls per second (0 disables)", get("MCP_AGGREGATOR_RATE_LIMIT")))
	} else {
		c.RateLimit = r
	}
	c.RateBurst = integer("MCP_AGGREGATOR_RATE_BURST")
	c.MCPSessionIdle = seconds("MCP_AGGREGATOR_MCP_SESSION_IDLE_TIMEOUT", true)
	c.MCPInputWait = seconds("MCP_AGGREGATOR_MCP_INPUT_WAIT", false)
	c.MCPMaxSessions = integer("MCP_AGGREGATOR_MCP_MAX_SESSIONS")
	c.MCPMaxSessionsPerClient = integer("MCP_AGGREGATOR_MCP_MAX_SESSIONS_PER_CLIENT")
	var cerr error
	if c.ConsoleURL, cerr = consoleURL(get("MCP_AGGREGATOR_CONSOLE_URL"), c.Listen); cerr != nil {
		errs = append(errs, cerr.Error())
	}
	c.ProxyMaxSessions = integer("MCP_AGGREGATOR_PROXY_MAX_SESSIONS")
	c.ProxyIdle = seconds("MCP_AGGREGATOR_PROXY_IDLE_TIMEOUT", true)
	if c.AllowedHosts, err = auth.ParseAllowedHosts(get("MCP_AGGREGATOR_ALLOWED_HOSTS")); err != nil {
		errs = append(errs, err.Error())
	}
	if c.AllowedOrigins, err = auth.ParseAllowedOrigins(get("MCP_AGGREGATOR_ALLOWED_ORIGINS")); err != nil {
		errs = append(errs, err.Error())
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("MCP_AGGREGATOR_LOG_LEVEL"))); err != nil {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_LOG_LEVEL=%q: want debug, info, warn or error", get("MCP_AGGREGATOR_LOG_LEVEL")))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_LOG_FORMAT=%q: want json or text", c.LogFormat))
	}
	for _, k := range []struct {
		name string
		dst  *[]byte
	}{{"MCP_CREDENTIAL_KEY", &c.CredentialKey}, {"MCP_CREDENTIAL_KEY_PREVIOUS", &c.CredentialKeyPrevious}} {
		if raw := get(k.name); raw != "" {
			key, err := crypt.ParseKey(raw)
			if err != nil {
				errs = append(errs, k.name+": "+err.Error()) // never the value: it is a secret
			}
			*k.dst = key
		}
	}
	if c.DataDir != "" {
		if abs, err := filepath.Abs(c.DataDir); err == nil {
			c.DataDir = abs
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("invalid configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return c, nil
}

// stdioPassthrough parses MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH: variable names, comma-separated. A name of the
// daemon's own settings is refused (they hold its tokens and keys), as is a malformed name.
func stdioPassthrough(raw string, errs []string) ([]string, []string) {
	var names []string
	for _, n := range strings.Split(raw, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case !connconfig.ValidEnvName(n):
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH: %q is not a variable name", n))
		case connconfig.IsDaemonSetting(n):
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_STDIO_ENV_PASSTHROUGH: %s is a setting of the aggregator itself and is never passed to stdio servers", n))
		default:
			names = append(names, n)
		}
	}
	return names, errs
}

// prefixList parses a comma-separated list of CIDRs or single IPs (a single IP is its /32 or /128), appending a
// problem to errs for every entry that does not parse.
func prefixList(name, raw string, errs []string) ([]netip.Prefix, []string) {
	var out []netip.Prefix
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(item); err == nil {
			ip = ip.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		errs = append(errs, fmt.Sprintf("%s: %q is not a CIDR (e.g. 10.0.0.0/8) or an IP address", name, item))
	}
	return out, errs
}

// parseSeconds accepts a number of seconds ("30", "0.5") or a Go duration ("500ms").
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// newLogger builds the structured logger the whole daemon uses.
func newLogger(c config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

func clientSafe(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// never turns a configured 0 ("never") into the negative duration the MCP handlers read as no timeout.
func never(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// consoleURL is MCP_AGGREGATOR_CONSOLE_URL checked (an http(s) URL ending in /), or, unset, the console on the REST
// listen address when a browser can reach that address as it is ("" for 0.0.0.0 and ::).
func consoleURL(set, listen string) (string, error) {
	if set != "" {
		u, err := url.Parse(set)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return "", fmt.Errorf("MCP_AGGREGATOR_CONSOLE_URL=%q: want the http(s) URL browsers reach the console at, e.g. https://agg.example.com/ui/", set)
		}
		if !strings.HasSuffix(set, "/") {
			set += "/"
		}
		return set, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return "", nil
	}
	return "http://" + listen + "/ui/", nil
}

// boolSetting reads the boolean variable name (true, 1, yes, on; false, 0, no, off; any case), adding an error to
// errs for any other value.
func boolSetting(get func(string) string, name string, errs []string) (bool, []string) {
	switch strings.ToLower(get(name)) {
	case "true", "1", "yes", "on":
		return true, errs
	case "false", "0", "no", "off":
		return false, errs
	}
	return false, append(errs, fmt.Sprintf("%s=%q: want true or false", name, get(name)))
}
