package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// Limits from BR-001.
const (
	// MaxNameLength is the longest server name (VARCHAR(255) in the schema).
	MaxNameLength = 255
	// MaxDescriptionLength is the longest description, in characters.
	MaxDescriptionLength = 1000
	// namePattern is BR-001's name format. Go's $ matches only at the end of the text, so no trailing newline
	// slips by.
	namePattern = `^[a-z][a-z0-9_-]*$`
)

// Transports are the transport types a server may be registered with (connconfig.Keys knows each one's keys).
var Transports = []string{persistence.TransportSTDIO, persistence.TransportSSE, persistence.TransportHTTP}

// Statuses are the states a server can be in, the values of a status filter.
var Statuses = []string{persistence.StatusDisconnected, persistence.StatusConnecting, persistence.StatusConnected,
	persistence.StatusDegraded, persistence.StatusError, persistence.StatusDisconnecting}

// registrationSchema is the one declaration of a registration's fields; Registration reads it,
// RegistrationSchema hands out copies.
var registrationSchema = newRegistrationSchema()

// nameRe is the compiled name pattern of registrationSchema.
var nameRe = regexp.MustCompile(registrationSchema.Properties["name"].Pattern)

// RegistrationSchema is the schema of a registration (POST /servers), add_mcp_server's input schema.
// connection_config's own rules, which depend on the transport, are connconfig's.
func RegistrationSchema() *jsonschema.Schema { return registrationSchema.CloneSchemas() }

func newRegistrationSchema() *jsonschema.Schema {
	return object([]property{
		prop("name", &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxNameLength), Pattern: namePattern,
			Description: "Unique name: a lowercase letter, then lowercase letters, digits, '-' or '_'"}),
		prop("description", &jsonschema.Schema{Types: []string{"string", "null"}, MaxLength: ptr(MaxDescriptionLength)}),
		prop("transport_type", &jsonschema.Schema{Type: "string", Enum: values(Transports...)}),
		prop("connection_config", &jsonschema.Schema{Type: "object",
			Description: "STDIO: command, args, env, cwd; SSE: url, headers; HTTP: base_url, headers; any: allow_insecure_http. " +
				"Strings may reference the environment as ${VAR}"}),
		prop("health_check_url", &jsonschema.Schema{Types: []string{"string", "null"},
			Description: "An http(s) URL polled for health, under the same TLS rule as the server's own URL"}),
		prop("auto_connect", &jsonschema.Schema{Type: "boolean", Default: jsonValue(true)}),
		prop("credential_mode", &jsonschema.Schema{Types: []string{"string", "null"}, Enum: append(values(persistence.CredentialShared, persistence.CredentialPerUser), nil),
			Default: jsonValue(persistence.CredentialShared),
			Description: "shared: every caller uses connection_config; per_user: each caller's calls run on a session of " +
				"their own with their own secret (PUT /servers/{id}/credentials/me), injected where user_credential says"}),
		prop("user_credential", userCredentialSchema()),
	}, "name", "transport_type", "connection_config")
}

// Outbound is the connection_config checks of a front end's Control: its outbound policy when it has one
// (actors.System does), else the default rules (a nil *backend.Outbound refuses metadata and link-local hosts).
func Outbound(control any) connconfig.Checks {
	var out *backend.Outbound
	if o, ok := control.(interface{ Outbound() *backend.Outbound }); ok {
		out = o.Outbound()
	}
	return connconfig.Checks{URLProblem: out.URLProblem}
}

// Registration applies BR-001 to a registration (RegistrationSchema). It decodes strictly (unknown fields, wrong
// JSON types, duplicate keys and malformed JSON are all field errors) and collects every problem rather than
// stopping at the first. URLs must also pass checks (Outbound: the daemon's outbound policy). On success the errors
// are nil and the request is complete except for Actor and IP, which the caller fills; ConnectionConfig is
// re-encoded from the validated values (connconfig.Validate). It is pure and safe on any input.
func Registration(body []byte, checks connconfig.Checks) (gateway.RegisterRequest, []FieldError) {
	v := newChecker(checks)
	members, ok := v.Object(body)
	if !ok {
		return gateway.RegisterRequest{}, v.Errors()
	}
	fields := v.Index(members, v.At())
	req := gateway.RegisterRequest{AutoConnect: true}

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, v.At("name")); ok {
			req.Name = name
		}
	} else {
		v.Add(strictjson.FieldMissing, "Field required", v.At("name"))
	}

	if raw, ok := fields["description"]; ok {
		req.Description = v.description(raw, v.At("description"))
	}

	transportOK := false
	if raw, ok := fields["transport_type"]; ok {
		req.TransportType, transportOK = v.transport(raw, v.At("transport_type"))
	} else {
		v.Add(strictjson.FieldMissing, "Field required", v.At("transport_type"))
	}

	if raw, ok := fields["connection_config"]; ok {
		transport := ""
		if transportOK {
			transport = req.TransportType
		}
		req.ConnectionConfig = connconfig.CheckInto(v.Checker, raw, transport, v.At("connection_config"), v.checks)
	} else {
		v.Add(strictjson.FieldMissing, "Field required", v.At("connection_config"))
	}

	if raw, ok := fields["health_check_url"]; ok && strictjson.KindOf(raw) != strictjson.KindNull {
		if u, ok := v.healthURL(raw); ok {
			req.HealthCheckURL = &u
			v.healthURLTLS(u, req.ConnectionConfig)
		}
	}

	if raw, ok := fields["auto_connect"]; ok {
		if b, ok := v.Bool(raw, v.At("auto_connect")); ok {
			req.AutoConnect = b
		}
	}

	transport := ""
	if transportOK {
		transport = req.TransportType
	}
	req.CredentialMode, req.UserCredential = v.credential(fields, transport)

	for _, m := range members {
		if !known(registrationSchema, m.Key) {
			v.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", v.At(m.Key))
		}
	}

	if v.Count() > 0 {
		return gateway.RegisterRequest{}, v.Errors()
	}
	return req, nil
}

// Patch applies BR-001 to a PATCH /servers/{id} body for a server of the given transport (which a PATCH cannot
// change). Absent fields stay as they are; "description": null clears the description and "health_check_url":
// null removes the health URL. A body with no field at all is refused. Like Registration it is strict, collects
// every error and is pure.
func Patch(body []byte, transportType string, checks connconfig.Checks) (persistence.ServerPatch, []FieldError) {
	return PatchServer(body, persistence.Server{TransportType: transportType, CredentialMode: persistence.CredentialShared}, checks)
}

// PatchServer is Patch for the server current, whose credential settings a credential_mode or user_credential in
// the body changes (issue 28): credential_mode "per_user" needs user_credential (in the body, or the server's own
// when it is per_user already), "shared" takes none; user_credential alone replaces the slot of a per_user server.
// The two are checked as at registration, against the server's transport.
func PatchServer(body []byte, current persistence.Server, checks connconfig.Checks) (persistence.ServerPatch, []FieldError) {
	transportType := current.TransportType
	v := newChecker(checks)
	members, ok := v.Object(body)
	if !ok {
		return persistence.ServerPatch{}, v.Errors()
	}
	fields := v.Index(members, v.At())
	var p persistence.ServerPatch

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, v.At("name")); ok {
			p.Name = &name
		}
	}
	if raw, ok := fields["description"]; ok {
		if d := v.description(raw, v.At("description")); d != nil {
			p.Description = d
		} else if strictjson.KindOf(raw) == strictjson.KindNull || isEmptyString(raw) {
			empty := ""
			p.Description = &empty
		}
	}
	if raw, ok := fields["connection_config"]; ok {
		if _, _, known := connconfig.Keys(transportType); known {
			p.ConnectionConfig = connconfig.CheckInto(v.Checker, raw, transportType, v.At("connection_config"), v.checks)
		} else {
			v.Add(strictjson.FieldValueError, "connection_config cannot be checked: the server has an unknown transport type",
				v.At("connection_config"))
		}
	}
	if raw, ok := fields["health_check_url"]; ok {
		if strictjson.KindOf(raw) == strictjson.KindNull {
			p.ClearHealthCheckURL = true
		} else if u, ok := v.healthURL(raw); ok {
			p.HealthCheckURL = &u
			// Without a new connection_config the stored allow_insecure_http decides, at health-check time.
			if p.ConnectionConfig != nil {
				v.healthURLTLS(u, p.ConnectionConfig)
			}
		}
	}

	_, hasMode := fields["credential_mode"]
	_, hasSlot := fields["user_credential"]
	if hasMode && strictjson.KindOf(fields["credential_mode"]) == strictjson.KindNull {
		v.Add(strictjson.FieldTypeError, "Input should be 'shared' or 'per_user'", v.At("credential_mode"))
	} else if hasMode || hasSlot {
		cred := map[string]json.RawMessage{}
		for k, raw := range fields {
			if k == "credential_mode" || k == "user_credential" {
				cred[k] = raw
			}
		}
		if !hasMode {
			mode, _ := json.Marshal(current.CredentialMode)
			cred["credential_mode"] = mode
		}
		if !hasSlot && hasMode && isPerUser(fields["credential_mode"]) && current.CredentialMode == persistence.CredentialPerUser &&
			current.UserCredential != nil {
			slot, _ := json.Marshal(current.UserCredential) // per_user again: the slot it has
			cred["user_credential"] = slot
		}
		n := v.Count()
		mode, slot := v.credential(cred, transportType)
		if v.Count() == n && mode != "" {
			p.Credential = &persistence.CredentialChange{Mode: mode, Slot: slot}
		}
	}

	known := 0
	for _, m := range members {
		switch m.Key {
		case "name", "description", "connection_config", "health_check_url", "credential_mode", "user_credential":
			known++
		case "transport_type":
			v.Add(strictjson.FieldExtraForbidden, "transport_type cannot be changed; remove the server and register it again",
				v.At(m.Key))
		default:
			v.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", v.At(m.Key))
		}
	}
	if known == 0 && v.Count() == 0 {
		v.Add(strictjson.FieldValueError, "At least one of name, description, connection_config, health_check_url, "+
			"credential_mode, user_credential is required",
			v.At())
	}

	if v.Count() > 0 {
		return persistence.ServerPatch{}, v.Errors()
	}
	return p, nil
}

// Disconnect reads the optional {"force": bool} body of POST /servers/{id}/disconnect. An empty body or null
// means force=false.
func Disconnect(body []byte) (bool, []FieldError) {
	trimmed := bytes.Trim(body, strictjson.Space)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return false, nil
	}
	v := newChecker(connconfig.Checks{})
	members, ok := v.Object(body)
	if !ok {
		return false, v.Errors()
	}
	fields := v.Index(members, v.At())
	force := false
	if raw, ok := fields["force"]; ok && strictjson.KindOf(raw) != strictjson.KindNull {
		force, _ = v.Bool(raw, v.At("force"))
	}
	for _, m := range members {
		if m.Key != "force" {
			v.Add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", v.At(m.Key))
		}
	}
	if v.Count() > 0 {
		return false, v.Errors()
	}
	return force, nil
}

// checker collects the field errors of one body (rooted at "body") and carries the checks its URLs pass.
type checker struct {
	*strictjson.Checker
	checks connconfig.Checks
}

func newChecker(checks connconfig.Checks) checker {
	return checker{Checker: strictjson.New("body"), checks: checks}
}

func (v checker) name(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		v.Add(strictjson.FieldValueError, "String should have at least 1 character", loc)
	case utf8.RuneCountInString(s) > MaxNameLength:
		v.Add(strictjson.FieldValueError, fmt.Sprintf("String should have at most %d characters", MaxNameLength), loc)
	case !nameRe.MatchString(s):
		v.Add(strictjson.FieldValueError, "Name should match "+namePattern+": start with a lowercase letter, then "+
			"lowercase letters, digits, '-' or '_'", loc)
	default:
		return s, true
	}
	return "", false
}

// description returns nil for null, an empty string or an error; otherwise the description.
func (v checker) description(raw json.RawMessage, loc []any) *string {
	if strictjson.KindOf(raw) == strictjson.KindNull {
		return nil
	}
	s, ok := v.String(raw, loc)
	if !ok {
		return nil
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		v.Add(strictjson.FieldValueError, fmt.Sprintf("String should have at most %d characters", MaxDescriptionLength), loc)
		return nil
	}
	if s == "" {
		return nil
	}
	return &s
}

func (v checker) transport(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	if !inEnum(registrationSchema, "transport_type", s) {
		v.Add(strictjson.FieldValueError, "Input should be 'STDIO', 'SSE' or 'HTTP'", loc)
		return "", false
	}
	return s, true
}

// healthURL decodes health_check_url: an absolute http(s) URL whose literal host the checks allow.
func (v checker) healthURL(raw json.RawMessage) (string, bool) {
	loc := v.At("health_check_url")
	u, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	if problem := connconfig.HTTPURLProblem(u); problem != "" {
		v.Add(strictjson.FieldValueError, problem, loc)
		return "", false
	}
	if problem := v.checks.CheckURL(u); problem != "" {
		v.Add(strictjson.FieldValueError, problem, loc)
		return "", false
	}
	return u, true
}

// healthURLTLS applies the TLS rule of connection_config's URLs to health_check_url, with the config's
// allow_insecure_http.
func (v checker) healthURLTLS(u string, config json.RawMessage) {
	if problem := connconfig.PlainHTTPProblem(u, connconfig.AllowsInsecureHTTP(config)); problem != "" {
		v.Add(strictjson.FieldValueError, problem, v.At("health_check_url"))
	}
}

func isEmptyString(raw json.RawMessage) bool {
	return string(bytes.Trim(raw, strictjson.Space)) == `""`
}

// isPerUser reports whether raw is the JSON string "per_user".
func isPerUser(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s == persistence.CredentialPerUser
}
