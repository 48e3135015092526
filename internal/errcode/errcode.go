// Package errcode declares, once, the product's error codes: the strings of the contract's error_code
// (system-contract.md's table plus the front ends' own). The actors put some of them on their wire, package auth
// answers with others, and package apierror maps every failure to one of them; all spell them from here. It
// imports nothing, so any package (the actors included) can use it without pulling an HTTP framework.
package errcode

// Codes of servers and the registry.
const (
	ServerNotFound      = "SERVER_NOT_FOUND"
	ServerAlreadyExists = "SERVER_ALREADY_EXISTS"
	ServerLimitReached  = "SERVER_LIMIT_REACHED"
	// ServerMoved is what a server actor answers while it is handing its server over or finds that another
	// member owns it: the caller looks the server up again and retries (never shown to clients: the call was not
	// run).
	ServerMoved = "SERVER_MOVED"
)

// Codes a server actor puts in ErrorInfo (system-contract.md plus REQUEST_TIMEOUT for 504).
const (
	ServerUnavailable = "SERVER_UNAVAILABLE"
	ExecutionFailed   = "EXECUTION_FAILED"
	RequestTimeout    = "REQUEST_TIMEOUT"
	// ServerBusy: the server already has its maximum of calls in flight (MCP_AGGREGATOR_MAX_CALLS_PER_SERVER).
	ServerBusy = "SERVER_BUSY"
	// ResponseTooLarge: a backend message exceeded MCP_AGGREGATOR_MAX_MESSAGE_BYTES (or the budget of results in
	// flight); the call fails, the session is kept when it can be.
	ResponseTooLarge = "RESPONSE_TOO_LARGE"
	// LoopDetected: the backend is this aggregator, or aggregates it (directly or through other aggregators).
	LoopDetected = "LOOP_DETECTED"
)

// Codes of the front ends.
const (
	Validation           = "VALIDATION_ERROR"
	ServiceBusy          = "SERVICE_BUSY"
	ServiceUnavailable   = "SERVICE_UNAVAILABLE"
	StoreUnavailable     = "STORE_UNAVAILABLE"
	RequestTooLarge      = "REQUEST_TOO_LARGE"
	UnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	NotFound             = "NOT_FOUND"
	MethodNotAllowed     = "METHOD_NOT_ALLOWED"
	Internal             = "INTERNAL_ERROR"
	ToolNotFound         = "TOOL_NOT_FOUND"
	ToolAmbiguous        = "TOOL_AMBIGUOUS"
	RateLimited          = "RATE_LIMITED"
	// SessionLimit: an MCP endpoint already holds its maximum of sessions (in total or for this client).
	SessionLimit = "SESSION_LIMIT_REACHED"
)

// Codes of authentication and the host and origin guard (package auth).
const (
	Unauthorized = "UNAUTHORIZED"
	Forbidden    = "FORBIDDEN"
	// HostNotAllowed answers a request whose Host header names neither the listen address, a loopback name nor
	// an allowed host: a page whose DNS name was rebound to this address.
	HostNotAllowed = "HOST_NOT_ALLOWED"
	// OriginNotAllowed answers a browser request whose Origin is not the daemon's own, a loopback origin or an
	// allowed origin.
	OriginNotAllowed = "ORIGIN_NOT_ALLOWED"
)

// Codes of tool curation.
const (
	ProfileNotFound = "PROFILE_NOT_FOUND"
	ProfileInUse    = "PROFILE_IN_USE"
	ToolNameTaken   = "TOOL_NAME_TAKEN"
	ChangeOutdated  = "CHANGE_OUTDATED"
)

// Codes of idempotent registration (the Idempotency-Key header of POST /servers): a malformed key is 400, a key
// already used for a different request body 422.
const (
	InvalidIdempotencyKey = "INVALID_IDEMPOTENCY_KEY"
	IdempotencyKeyReused  = "IDEMPOTENCY_KEY_REUSED"
)

// Codes of per-user credentials (issue 28).
const (
	// CredentialRequired: the caller has no credential of their own for a per_user server's tool (REST 403, with
	// the path that stores one; on /mcp a tool error naming the same).
	CredentialRequired = "CREDENTIAL_REQUIRED"
	// CredentialNotAccepted: the server is shared (credential_mode "shared"), so it takes no caller's own
	// credential (409).
	CredentialNotAccepted = "CREDENTIAL_NOT_ACCEPTED"
)
