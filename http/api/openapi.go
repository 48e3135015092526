package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
)

// OpenAPIPath serves the OpenAPI 3.1 document of every REST route.
const OpenAPIPath = "/api/v1/openapi.json"

// operation documents one REST route. The document is built from the operations table below: adding a route to
// New is adding one entry there (TestOpenAPIMatchesRouter in http/api/integration walks the router and fails on a
// route without an entry, an entry without a route, and an answer that does not validate against its schema).
type operation struct {
	// Method and Path as registered on Fiber (":id" parameters).
	Method, Path string
	Summary      string
	Tag          string
	Query        []param
	// Header are the request headers the route reads besides Authorization and Content-Type; OKHeader the headers
	// of its success answers besides Location.
	Header, OKHeader []param
	// Body names the request body's component schema ("" for none); BodyOptional when it may be empty.
	Body         string
	BodyOptional bool
	// OK maps each success status to its component schema ("" for no body; "text" for a text/plain answer).
	OK map[int]string
	// Errors are the error statuses besides those every route may answer (401/403 with auth on, 500, 503).
	Errors []int
}

// param is a query parameter.
type param struct {
	Name, Type, Description string
}

var (
	qLimit  = param{"limit", "integer", "page size (1-1000)"}
	qOffset = param{"offset", "integer", "items to skip"}
)

// operations is every REST route of New, in the order of the document.
var operations = []operation{
	{Method: "POST", Path: apiPrefix + "/servers", Tag: "servers", Summary: "Register an external MCP server",
		Header: []param{{headerIdempotencyKey, "string", "makes the registration retryable: a retry with the same key and body within 24 h " +
			"answers 201 with the server the key registered (response header Idempotent-Replayed: true); the same key " +
			"with another body is 422 IDEMPOTENCY_KEY_REUSED; a malformed key (not 1-255 printable ASCII characters) is " +
			"400 INVALID_IDEMPOTENCY_KEY. Keys are per token (one scope while auth is off) and go with their server when it is deleted"}},
		OKHeader: []param{{headerIdempotentReplayed, "string", `"true" when the answer is a keyed registration's replay (nothing was registered)`}},
		Body:     "Registration", OK: map[int]string{201: "ServerDetail"}, Errors: []int{400, 409, 413, 415, 422}},
	{Method: "GET", Path: apiPrefix + "/servers", Tag: "servers", Summary: "List servers",
		Query: []param{{"status", "string", "filter by status"}, {"include_tools", "boolean", "include each server's tools"}, qLimit, qOffset},
		OK:    map[int]string{200: "ServerList"}, Errors: []int{422}},
	{Method: "GET", Path: apiPrefix + "/servers/:id", Tag: "servers", Summary: "Get a server",
		OK: map[int]string{200: "ServerDetail"}, Errors: []int{404}},
	{Method: "PATCH", Path: apiPrefix + "/servers/:id", Tag: "servers", Summary: "Change a server's name, description, connection_config, health URL or credential_mode (shared <-> per_user, with user_credential)",
		Body: "Patch", OK: map[int]string{200: "ServerDetail"}, Errors: []int{404, 409, 413, 415, 422}},
	{Method: "DELETE", Path: apiPrefix + "/servers/:id", Tag: "servers", Summary: "Disconnect and remove a server",
		OK: map[int]string{204: ""}, Errors: []int{404}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/connect", Tag: "servers", Summary: "Connect a server (idempotent)",
		OK: map[int]string{200: "ConnectResult"}, Errors: []int{404}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/disconnect", Tag: "servers", Summary: "Disconnect a server",
		Body: "Disconnect", BodyOptional: true, OK: map[int]string{200: "DisconnectResult"}, Errors: []int{404, 413, 415, 422}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/tools", Tag: "tools", Summary: "List a server's tools",
		Query: []param{qLimit, qOffset}, OK: map[int]string{200: "ToolList"}, Errors: []int{404, 422}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/tools/:tool", Tag: "tools", Summary: "Get one tool of a server with its input schema",
		OK: map[int]string{200: "ToolDetail"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/history", Tag: "servers", Summary: "A server's state changes, newest first",
		Query: []param{qLimit}, OK: map[int]string{200: "History"}, Errors: []int{404, 422}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/tools/refresh", Tag: "tools", Summary: "Start a tool discovery",
		OK: map[int]string{202: "RefreshResult"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/state", Tag: "status", Summary: "Counts of servers by status and of tools",
		OK: map[int]string{200: "State"}},
	{Method: "GET", Path: apiPrefix + "/health", Tag: "status", Summary: "Health (no token needed)",
		OK: map[int]string{200: "Health", 503: "Health"}},
	{Method: "GET", Path: apiPrefix + "/audit", Tag: "status", Summary: "The audit log, newest first (admin)",
		Query: []param{qLimit, qOffset}, OK: map[int]string{200: "AuditList"}, Errors: []int{422}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/timeseries", Tag: "status", Summary: "A server's calls/s, errors and p50/p95 latency over the last minutes in steps, from this node's counters, with its state changes over the same window (a client token bound to profiles: its profiles' servers only)",
		OK: map[int]string{200: "Timeseries"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/timeseries", Tag: "status", Summary: "Calls/s, errors and p50/p95 latency over the last minutes of every server the caller may see, from this node's counters",
		OK: map[int]string{200: "Timeseries"}},
	{Method: "GET", Path: apiPrefix + "/actors", Tag: "status", Summary: "This node's actor tree (kind, state, mailbox depth, restarts) and the node that owns each server (admin)",
		OK: map[int]string{200: "ActorView"}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/prompts", Tag: "servers", Summary: "A server's stored prompts, with the names /mcp exposes them under (a client token bound to profiles: its profiles' servers only, else an empty list)",
		OK: map[int]string{200: "FeatureList"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/resources", Tag: "servers", Summary: "A server's stored resources and resource templates, with the URIs /mcp exposes (a client token bound to profiles: its profiles' servers only, else an empty list)",
		OK: map[int]string{200: "FeatureList"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/tool-filter", Tag: "curation", Summary: "A server's tool filter",
		OK: map[int]string{200: "ToolFilter"}, Errors: []int{404}},
	{Method: "PUT", Path: apiPrefix + "/servers/:id/tool-filter", Tag: "curation", Summary: "Set a server's tool filter (allow or deny globs; none removes it)",
		Body: "ToolFilterRequest", OK: map[int]string{200: "ToolFilter"}, Errors: []int{404, 413, 415, 422}},
	{Method: "PUT", Path: apiPrefix + "/servers/:id/credentials/me", Tag: "credentials",
		Summary: "Store (or replace) the caller's own secret for a per_user server; it is encrypted at rest and never returned; the caller's live session ends",
		Body:    "Secret", OK: map[int]string{200: "Credential", 201: "Credential"}, Errors: []int{404, 409, 413, 415, 422}},
	{Method: "DELETE", Path: apiPrefix + "/servers/:id/credentials/me", Tag: "credentials",
		Summary: "Remove the caller's own secret for a per_user server and end their session",
		OK:      map[int]string{204: ""}, Errors: []int{404, 409}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/credentials/me/oauth", Tag: "credentials",
		Summary: "Start the caller's OAuth authorization of a per_user server whose backend is OAuth-protected (user_credential.oauth): the authorization URL to open in a browser",
		OK:      map[int]string{200: "OAuthStarted"}, Errors: []int{404, 409, 429, 502, 503, 504}},
	{Method: "GET", Path: apiPrefix + "/oauth/callback", Tag: "credentials",
		Summary: "The backend's authorization server sends the browser back here (no token): the code is kept for the flow of state and the browser sent on to the console (303) to complete it",
		OK:      map[int]string{303: ""}, Errors: []int{404}},
	{Method: "POST", Path: apiPrefix + "/oauth/complete", Tag: "credentials",
		Summary: "Complete the caller's own OAuth flow: the code is exchanged (PKCE) and the grant stored as the caller's credential; another caller's state is 404",
		Body:    "OAuthComplete", OK: map[int]string{201: "OAuthCompleted"}, Errors: []int{404, 409, 413, 415, 422, 502, 504}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/credentials", Tag: "credentials",
		Summary: "Who has a credential for a per_user server, and since when (admin; no secret)",
		OK:      map[int]string{200: "CredentialList"}, Errors: []int{404, 409}},
	{Method: "DELETE", Path: apiPrefix + "/servers/:id/credentials/:subject", Tag: "credentials",
		Summary: "Revoke a caller's credential (admin; subject as listed, e.g. token:ci or oauth:<sub>) and end their session",
		OK:      map[int]string{204: ""}, Errors: []int{404, 409}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/pinning", Tag: "curation", Summary: "A server's definition pinning settings",
		OK: map[int]string{200: "Pinning"}, Errors: []int{404}},
	{Method: "PUT", Path: apiPrefix + "/servers/:id/pinning", Tag: "curation", Summary: "Turn definition pinning on or off; what new tools do",
		Body: "PinningRequest", OK: map[int]string{200: "Pinning"}, Errors: []int{404, 413, 415, 422}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/tools/overrides", Tag: "curation", Summary: "A server's tool overrides",
		OK: map[int]string{200: "OverrideList"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/servers/:id/tools/changes", Tag: "curation", Summary: "Tool definition changes held for approval, with diffs",
		OK: map[int]string{200: "ChangeList"}, Errors: []int{404}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/tools/changes/:tool/approve", Tag: "curation", Summary: "Approve a held change",
		Body: "DecisionRequest", BodyOptional: true, OK: map[int]string{200: "Decision"}, Errors: []int{404, 409, 413, 415, 422}},
	{Method: "POST", Path: apiPrefix + "/servers/:id/tools/changes/:tool/reject", Tag: "curation", Summary: "Reject a held change",
		Body: "DecisionRequest", BodyOptional: true, OK: map[int]string{200: "Decision"}, Errors: []int{404, 409, 413, 415, 422}},
	{Method: "PUT", Path: apiPrefix + "/servers/:id/tools/:tool/override", Tag: "curation", Summary: "Set a tool's override (exposed name, description, annotations)",
		Body: "OverrideRequest", OK: map[int]string{200: "Override"}, Errors: []int{404, 409, 413, 415, 422}},
	{Method: "DELETE", Path: apiPrefix + "/servers/:id/tools/:tool/override", Tag: "curation", Summary: "Remove a tool's override",
		OK: map[int]string{204: ""}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/profiles", Tag: "curation", Summary: "List profiles", OK: map[int]string{200: "ProfileList"}},
	{Method: "GET", Path: apiPrefix + "/profiles/:name", Tag: "curation", Summary: "Get a profile",
		OK: map[int]string{200: "Profile"}, Errors: []int{404}},
	{Method: "PUT", Path: apiPrefix + "/profiles/:name", Tag: "curation", Summary: "Create or replace a profile",
		Body: "ProfileRequest", OK: map[int]string{200: "Profile", 201: "Profile"}, Errors: []int{413, 415, 422}},
	{Method: "DELETE", Path: apiPrefix + "/profiles/:name", Tag: "curation", Summary: "Delete a profile (409 while it binds client tokens)",
		OK: map[int]string{204: ""}, Errors: []int{404, 409}},
	{Method: "GET", Path: apiPrefix + "/profiles/:name/tools", Tag: "curation", Summary: "The tools a profile holds now",
		OK: map[int]string{200: "ProfileTools"}, Errors: []int{404}},
	{Method: "GET", Path: apiPrefix + "/policy", Tag: "curation", Summary: "The access policy: ordered CEL rules on who may list and call which tool",
		OK: map[int]string{200: "Policy"}},
	{Method: "PUT", Path: apiPrefix + "/policy", Tag: "curation", Summary: "Replace the access policy (422 names a rule's expression that does not compile, with its position)",
		Body: "PolicyRequest", OK: map[int]string{200: "Policy"}, Errors: []int{413, 415, 422}},
	{Method: "POST", Path: apiPrefix + "/import", Tag: "servers", Summary: "Register the servers of an mcpServers (or VS Code servers) file",
		Query: []param{{"dry_run", "boolean", "validate and report without registering"}},
		Body:  "ImportFile", OK: map[int]string{200: "ImportReport"}, Errors: []int{413, 415, 422}},
	{Method: "GET", Path: apiPrefix + "/export", Tag: "servers", Summary: "Every server as an mcpServers file, secrets masked",
		Query: []param{{"format", "string", "mcpServers (default) or vscode"}}, OK: map[int]string{200: "ExportFile"}, Errors: []int{422}},
	{Method: "GET", Path: LivePath, Tag: "status", Summary: "Liveness probe", OK: map[int]string{200: "Probe"}},
	{Method: "GET", Path: ReadyPath, Tag: "status", Summary: "Readiness probe (503 until ready)", OK: map[int]string{200: "Probe", 503: "Probe"}},
	{Method: "POST", Path: "/api/v1/tools/call", Tag: "tools", Summary: "Call a tool through the aggregator (with \"task\": answer 202 with a task at once, the call running in the background)",
		Body: "CallRequest", OK: map[int]string{200: "CallResult", 202: "Task"}, Errors: []int{400, 404, 413, 415, 422, 429, 502, 504}},
	{Method: "GET", Path: TasksPath, Tag: "tools", Summary: "The caller's tasks, newest first (admins with all=true: every caller's)",
		Query: []param{qLimit, qOffset, {"all", "boolean", "every caller's tasks (admin scope)"}}, OK: map[int]string{200: "TaskList"}, Errors: []int{403, 422}},
	{Method: "GET", Path: TasksPath + "/:id", Tag: "tools", Summary: "A task of the caller (admins: any task); with wait, once it has finished or after wait seconds",
		Query: []param{{"wait", "integer", "seconds to wait for the task to finish (0-60)"}}, OK: map[int]string{200: "Task"}, Errors: []int{404, 422}},
	{Method: "DELETE", Path: TasksPath + "/:id", Tag: "tools", Summary: "Cancel an open task (409 when it has already finished)",
		OK: map[int]string{200: "Task"}, Errors: []int{404, 409}},
	{Method: "POST", Path: "/api/v1/search", Tag: "tools", Summary: "Search the tool catalogue",
		Body: "SearchRequest", OK: map[int]string{200: "Search"}, Errors: []int{413, 415, 422}},
	{Method: "GET", Path: "/api/v1/skills", Tag: "tools", Summary: "The skills taxonomy",
		Query: []param{{"include_embedding", "boolean", "add each skill's vector"}}, OK: map[int]string{200: "SkillList"}, Errors: []int{422}},
	{Method: "GET", Path: WhoamiPath, Tag: "status", Summary: "The caller's token name and scope", OK: map[int]string{200: "Whoami"}},
	{Method: "GET", Path: OpenAPIPath, Tag: "status", Summary: "This document", OK: map[int]string{200: "OpenAPI"}},
	{Method: "GET", Path: "/metrics", Tag: "status", Summary: "Prometheus metrics (when enabled)", OK: map[int]string{200: "text"}},
}

// components returns the document's schemas by name: Go answer types are inferred (jsonschema.For), request bodies
// are the validators' own schemas (package validate), so neither can drift from the code.
func components() map[string]*jsonschema.Schema {
	anyJSON := map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {}}
	infer := func(t reflect.Type) *jsonschema.Schema {
		s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: anyJSON})
		if err != nil {
			panic(fmt.Sprintf("openapi: schema of %s: %v", t, err)) // a type the document cannot describe: caught by the tests
		}
		return s
	}
	ref := func(name string) *jsonschema.Schema { return &jsonschema.Schema{Ref: "#/components/schemas/" + name} }
	str := &jsonschema.Schema{Type: "string"}

	fieldError := infer(reflect.TypeFor[apierror.FieldError]())
	fieldError.Properties["loc"] = &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Types: []string{"string", "integer"}}}
	errorSchema := &jsonschema.Schema{Type: "object", Required: []string{"detail", "error_code"},
		Description: "The one error shape (system-contract.md): detail is a sentence, or for 422 the list of field errors",
		Properties: map[string]*jsonschema.Schema{
			"detail":     {AnyOf: []*jsonschema.Schema{str, {Type: "array", Items: ref("FieldError")}}},
			"error_code": str,
			"context":    {Type: "object"},
			"server":     {Type: "object"},
		}, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}

	serverList := infer(reflect.TypeFor[serverListView]())
	serverList.Properties["servers"] = &jsonschema.Schema{Type: "array",
		Items: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{ref("Server"), ref("ServerWithTools")}}}

	disconnect := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"force": {Type: "boolean", Default: json.RawMessage("false")}},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	patch := validate.RegistrationSchema()
	delete(patch.Properties, "transport_type")
	delete(patch.Properties, "auto_connect")
	patch.Required = nil
	patch.MinProperties = ptrInt(1)

	importFile := &jsonschema.Schema{Type: "object", Description: "A Claude Desktop / Cursor file ({\"mcpServers\": {...}}) or VS Code's ({\"servers\": {...}})",
		Properties: map[string]*jsonschema.Schema{
			"mcpServers": {Type: "object", AdditionalProperties: ref("ImportEntry")},
			"servers":    {Type: "object", AdditionalProperties: ref("ImportEntry")},
			"dry_run":    {Type: "boolean"},
		}}
	importEntry := infer(reflect.TypeFor[ExportEntry]())
	importEntry.AdditionalProperties = nil // clients' own keys are reported as ignored_fields
	importEntry.Properties["disabled"] = &jsonschema.Schema{Type: "boolean"}
	importEntry.Properties["description"] = str
	importEntry.Properties["type"] = &jsonschema.Schema{Type: "string", Examples: []any{"stdio", "sse", "http"}}

	callResult := &jsonschema.Schema{Type: "object", Required: []string{"isError", "metadata"},
		Description: "The backend's CallToolResult as it sent it, with isError always present and the aggregator's routing metadata",
		Properties:  map[string]*jsonschema.Schema{"content": {Type: "array"}, "isError": {Type: "boolean"}, "metadata": {Type: "object"}}}
	skillList := &jsonschema.Schema{Type: "object", Required: []string{"skills", "total"},
		Properties:           map[string]*jsonschema.Schema{"skills": {Type: "array", Items: infer(reflect.TypeFor[skillView]())}, "total": {Type: "integer"}},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	refresh := &jsonschema.Schema{Type: "object", Required: []string{"server_id", "status", "message"},
		Properties: map[string]*jsonschema.Schema{"server_id": str, "status": str, "message": str}}

	// A REST call may carry "task" (tasks.go); execute_external_tool's arguments, of the same schema otherwise, may not.
	callRequest := validate.CallSchema(validate.RESTCall)
	callRequest.Properties["task"] = &jsonschema.Schema{Type: "object",
		Description: "Run the call as a task: 202 with the task at once; read it at /api/v1/tasks/{task_id}",
		Properties: map[string]*jsonschema.Schema{"ttl_ms": {Type: "integer", Minimum: ptrFloat(1000),
			Description: "how long the task and its result are kept, from its creation (default and maximum: the daemon's)"}},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}

	// An actor holds its children: the tree's schema refers to itself (Actor), which inference cannot do.
	actorTree := map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[[]actors.ActorInfo](): {Type: "array", Items: ref("Actor")}}
	inferTree := func(t reflect.Type) *jsonschema.Schema {
		s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: actorTree})
		if err != nil {
			panic(fmt.Sprintf("openapi: schema of %s: %v", t, err))
		}
		return s
	}
	actorView, actor := inferTree(reflect.TypeFor[actors.ActorView]()), inferTree(reflect.TypeFor[actors.ActorInfo]())

	return map[string]*jsonschema.Schema{
		"Error":             errorSchema,
		"FieldError":        fieldError,
		"Registration":      validate.RegistrationSchema(),
		"Secret":            validate.SecretSchema(),
		"OAuthComplete":     validate.OAuthStateSchema(),
		"OAuthStarted":      infer(reflect.TypeFor[oauthStartedView]()),
		"OAuthCompleted":    infer(reflect.TypeFor[oauthCompletedView]()),
		"Patch":             patch,
		"Disconnect":        disconnect,
		"CallRequest":       callRequest,
		"Task":              infer(reflect.TypeFor[taskView]()),
		"TaskList":          infer(reflect.TypeFor[taskList]()),
		"SearchRequest":     validate.SearchSchema(),
		"ImportFile":        importFile,
		"ImportEntry":       importEntry,
		"Server":            infer(reflect.TypeFor[view.Server]()),
		"ServerWithTools":   infer(reflect.TypeFor[serverWithToolsView]()),
		"ServerDetail":      infer(reflect.TypeFor[view.ServerDetail]()),
		"Credential":        infer(reflect.TypeFor[credentialView]()),
		"CredentialList":    infer(reflect.TypeFor[credentialListView]()),
		"ServerList":        serverList,
		"ConnectResult":     infer(reflect.TypeFor[actors.ConnectResult]()),
		"DisconnectResult":  infer(reflect.TypeFor[actors.DisconnectResult]()),
		"ToolList":          infer(reflect.TypeFor[toolListView]()),
		"ToolDetail":        infer(reflect.TypeFor[toolDetailView]()),
		"History":           infer(reflect.TypeFor[historyView]()),
		"RefreshResult":     refresh,
		"State":             infer(reflect.TypeFor[stateView]()),
		"Health":            infer(reflect.TypeFor[healthView]()),
		"AuditList":         infer(reflect.TypeFor[auditListView]()),
		"Timeseries":        infer(reflect.TypeFor[timeseriesView]()),
		"ActorView":         actorView,
		"Actor":             actor,
		"ImportReport":      infer(reflect.TypeFor[ImportReport]()),
		"ExportFile":        infer(reflect.TypeFor[ExportFile]()),
		"Probe":             infer(reflect.TypeFor[ProbeView]()),
		"CallResult":        callResult,
		"Search":            infer(reflect.TypeFor[view.Search]()),
		"SkillList":         skillList,
		"Whoami":            infer(reflect.TypeFor[WhoamiView]()),
		"FeatureList":       infer(reflect.TypeFor[featureListView]()),
		"ToolFilterRequest": validate.ToolFilterSchema(),
		"ToolFilter":        infer(reflect.TypeFor[filterView]()),
		"PinningRequest":    validate.PinningSchema(),
		"Pinning":           infer(reflect.TypeFor[pinningView]()),
		"OverrideRequest":   validate.OverrideSchema(),
		"Override":          infer(reflect.TypeFor[overrideView]()),
		"OverrideList":      infer(reflect.TypeFor[overrideListView]()),
		"ChangeList":        infer(reflect.TypeFor[changeListView]()),
		"DecisionRequest":   validate.DecisionSchema(),
		"Decision":          infer(reflect.TypeFor[decisionView]()),
		"ProfileRequest":    validate.ProfileSchema(),
		"Profile":           infer(reflect.TypeFor[profileView]()),
		"ProfileList":       infer(reflect.TypeFor[profileListView]()),
		"ProfileTools":      infer(reflect.TypeFor[profileToolsView]()),
		"PolicyRequest":     infer(reflect.TypeFor[policy.Document]()),
		"Policy":            infer(reflect.TypeFor[accessPolicyView]()),
		"OpenAPI":           {Type: "object", Required: []string{"openapi", "paths"}},
	}
}

func ptrInt(n int) *int { return &n }

func ptrFloat(f float64) *float64 { return &f }

// OpenAPIPathOf turns a Fiber route path ("/servers/:id") into an OpenAPI path ("/servers/{id}").
func OpenAPIPathOf(fiberPath string) string {
	parts := strings.Split(fiberPath, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = "{" + strings.TrimSuffix(p[1:], "?") + "}"
		}
	}
	return strings.Join(parts, "/")
}

// OpenAPIDocument builds the OpenAPI 3.1 document from the operations table. policy says which scope each route
// needs (the document's security requirement).
func OpenAPIDocument(policy auth.Policy, version string) map[string]any {
	errorResponse := func(status int) map[string]any {
		return map[string]any{"description": httpStatusText(status),
			"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}}
	}
	paths := map[string]map[string]any{}
	for _, op := range operations {
		path := OpenAPIPathOf(op.Path)
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		var params []any
		for _, seg := range strings.Split(op.Path, "/") {
			if strings.HasPrefix(seg, ":") {
				params = append(params, map[string]any{"name": seg[1:], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
		}
		for _, q := range op.Query {
			params = append(params, map[string]any{"name": q.Name, "in": "query", "required": false, "description": q.Description,
				"schema": map[string]any{"type": q.Type}})
		}
		for _, h := range op.Header {
			params = append(params, map[string]any{"name": h.Name, "in": "header", "required": false, "description": h.Description,
				"schema": map[string]any{"type": h.Type}})
		}
		responses := map[string]any{}
		for status, schema := range op.OK {
			r := map[string]any{"description": httpStatusText(status)}
			switch schema {
			case "":
			case "text":
				r["content"] = map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}
			default:
				r["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + schema}}}
			}
			if len(op.OKHeader) > 0 {
				hs := map[string]any{}
				for _, h := range op.OKHeader {
					hs[h.Name] = map[string]any{"description": h.Description, "schema": map[string]any{"type": h.Type}}
				}
				r["headers"] = hs
			}
			responses[fmt.Sprint(status)] = r
		}
		scope := policy.Required(op.Method, op.Path)
		errs := append([]int{500, 503}, op.Errors...)
		if scope != auth.ScopeNone {
			errs = append(errs, 401, 403)
		}
		for _, status := range errs {
			if _, ok := op.OK[status]; ok {
				continue
			}
			responses[fmt.Sprint(status)] = errorResponse(status)
		}
		o := map[string]any{"summary": op.Summary, "operationId": operationID(op), "tags": []string{op.Tag},
			"responses": responses, "x-scope": scope.String()}
		if len(params) > 0 {
			o["parameters"] = params
		}
		if scope == auth.ScopeNone {
			o["security"] = []any{}
		}
		if op.Body != "" {
			o["requestBody"] = map[string]any{"required": !op.BodyOptional,
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + op.Body}}}}
		}
		paths[path][strings.ToLower(op.Method)] = o
	}
	return map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info": map[string]any{"title": "MCP aggregator REST API", "version": version,
			"description": "The admin and tool API of the MCP aggregator daemon. Every error has the shape of the Error schema."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         components(),
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
		"security": []any{map[string]any{"bearer": []string{}}},
		"tags": []any{map[string]any{"name": "servers"}, map[string]any{"name": "tools"},
			map[string]any{"name": "status"}},
	}
}

// operationID is a stable name for generated clients: the method and the path's words.
func operationID(op operation) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(op.Method))
	for _, seg := range strings.FieldsFunc(strings.TrimPrefix(op.Path, apiPrefix), func(r rune) bool { return r == '/' || r == '.' || r == '-' }) {
		seg = strings.TrimPrefix(seg, ":")
		if seg == "" || seg == "api" || seg == "v1" {
			continue
		}
		b.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
	}
	return b.String()
}

func httpStatusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return t
	}
	return fmt.Sprint(status)
}

// OperationKeys lists "METHOD path" of every documented route (Fiber paths), sorted: the router test compares it
// with the app's routes.
func OperationKeys() []string {
	out := make([]string, 0, len(operations))
	for _, op := range operations {
		out = append(out, op.Method+" "+op.Path)
	}
	sort.Strings(out)
	return out
}

// openAPI serves the document, built on the first request (once per app: apps built in tests and fuzzers that
// never ask for it do not pay for it).
func (s *server) openAPI() fiber.Handler {
	doc := sync.OnceValue(func() []byte { return mustJSON(OpenAPIDocument(s.policy, actors.Version)) })
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
		return c.Send(doc())
	}
}

// mustJSON encodes a value built from this package's own tables; failing is a programming error caught at start.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("openapi: %v", err))
	}
	return b
}

// ComponentSchema resolves one component schema of an OpenAPI document (doc, as served at OpenAPIPath) for
// validating values against it: the document's components become the $defs of a draft 2020-12 schema, so the
// references between them resolve. The tests validate real answers with it; a client may too.
func ComponentSchema(doc []byte, name string) (*jsonschema.Resolved, error) {
	var d struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("read document: %w", err)
	}
	if _, ok := d.Components.Schemas[name]; !ok {
		return nil, fmt.Errorf("no component schema %q", name)
	}
	defs, err := json.Marshal(d.Components.Schemas)
	if err != nil {
		return nil, fmt.Errorf("encode components: %w", err)
	}
	defs = []byte(strings.ReplaceAll(string(defs), `"#/components/schemas/`, `"#/$defs/`))
	root := fmt.Sprintf(`{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":%s,"$ref":"#/$defs/%s"}`, defs, name)
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(root), &s); err != nil {
		return nil, fmt.Errorf("decode schema %s: %w", name, err)
	}
	return s.Resolve(nil)
}
