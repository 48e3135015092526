package api

import (
	"bytes"
	"encoding/json"
	"regexp"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/strictjson"
	"github.com/mcpgw/aggregator/persistence"
)

// FieldError is one entry of a 422 body's detail list in FastAPI's shape ({loc, msg, type}), so clients written
// against the original service keep parsing validation failures (apierror.FieldError: one definition for REST and
// the MCP endpoints).
type FieldError = apierror.FieldError

// FieldError.Type values, so callers (tests, the MCP endpoint) can tell failures apart without parsing messages.
const (
	FieldMissing        = apierror.FieldMissing        // a required field is absent (or the whole body is empty)
	FieldExtraForbidden = apierror.FieldExtraForbidden // a field the request does not know
	FieldTypeError      = apierror.FieldTypeError      // the field has the wrong JSON type
	FieldValueError     = apierror.FieldValueError     // the right type but a value the rules refuse
	FieldJSONInvalid    = apierror.FieldJSONInvalid    // the body is not JSON at all
)

// Limits from BR-001.
const (
	// MaxNameLength is the longest server name (VARCHAR(255) in the schema).
	MaxNameLength = 255
	// MaxDescriptionLength is the longest description, in characters.
	MaxDescriptionLength = 1000
)

// nameRe is BR-001's name format. Go's $ matches only at the end of the text, so no trailing newline slips by.
var nameRe = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// ValidateRegistration applies BR-001 to a POST /servers body. It decodes strictly (unknown fields, wrong JSON
// types, duplicate keys and malformed JSON are all field errors) and collects every problem rather than stopping at
// the first. On success the errors are nil and the request is complete except for Actor and IP, which the caller
// fills; ConnectionConfig is re-encoded from the validated values (so it holds only documented keys) with ${VAR}
// references exactly as written. It is pure and safe on any input, so the MCP meta-tool can reuse it.
func ValidateRegistration(body []byte) (actors.RegisterRequest, []FieldError) {
	return ValidateRegistrationFor(body, nil)
}

// ValidateRegistrationFor is ValidateRegistration that also refuses URLs whose literal host the daemon's outbound
// policy refuses (metadata and link-local addresses in any IPv4 spelling, operator deny lists, the daemon's own
// listeners); out nil applies the default rules only. The API passes OutboundOf(its Control).
func ValidateRegistrationFor(body []byte, out *actors.Outbound) (actors.RegisterRequest, []FieldError) {
	v := newValidator(out)
	members, ok := v.Object(body)
	if !ok {
		return actors.RegisterRequest{}, v.Errors()
	}
	fields := v.Index(members, bodyAt())
	req := actors.RegisterRequest{AutoConnect: true}

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, bodyAt("name")); ok {
			req.Name = name
		}
	} else {
		v.Add(FieldMissing, "Field required", bodyAt("name"))
	}

	if raw, ok := fields["description"]; ok {
		req.Description = v.description(raw, bodyAt("description"))
	}

	transportOK := false
	if raw, ok := fields["transport_type"]; ok {
		req.TransportType, transportOK = v.transport(raw, bodyAt("transport_type"))
	} else {
		v.Add(FieldMissing, "Field required", bodyAt("transport_type"))
	}

	if raw, ok := fields["connection_config"]; ok {
		transport := ""
		if transportOK {
			transport = req.TransportType
		}
		req.ConnectionConfig = v.connectionConfig(raw, transport, bodyAt("connection_config"))
	} else {
		v.Add(FieldMissing, "Field required", bodyAt("connection_config"))
	}

	if raw, ok := fields["health_check_url"]; ok && strictjson.KindOf(raw) != strictjson.KindNull {
		if u, ok := v.healthURL(raw); ok {
			req.HealthCheckURL = &u
			v.checkHealthURLTLS(req.HealthCheckURL, req.ConnectionConfig)
		}
	}

	if raw, ok := fields["auto_connect"]; ok {
		if b, ok := v.Bool(raw, bodyAt("auto_connect")); ok {
			req.AutoConnect = b
		}
	}

	for _, m := range members {
		switch m.Key {
		case "name", "description", "transport_type", "connection_config", "health_check_url", "auto_connect":
		default:
			v.Add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}

	if v.Count() > 0 {
		return actors.RegisterRequest{}, v.Errors()
	}
	return req, nil
}

// ValidatePatch applies BR-001 to a PATCH /servers/{id} body for a server of the given transport (which a PATCH
// cannot change). Absent fields stay as they are; "description": null clears the description and
// "health_check_url": null removes the health URL. A body with no field at all is refused. Like
// ValidateRegistration it is strict, collects every error and is pure.
func ValidatePatch(body []byte, transportType string) (persistence.ServerPatch, []FieldError) {
	return ValidatePatchFor(body, transportType, nil)
}

// ValidatePatchFor is ValidatePatch with the outbound policy of ValidateRegistrationFor.
func ValidatePatchFor(body []byte, transportType string, out *actors.Outbound) (persistence.ServerPatch, []FieldError) {
	v := newValidator(out)
	members, ok := v.Object(body)
	if !ok {
		return persistence.ServerPatch{}, v.Errors()
	}
	fields := v.Index(members, bodyAt())
	var p persistence.ServerPatch

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, bodyAt("name")); ok {
			p.Name = &name
		}
	}
	if raw, ok := fields["description"]; ok {
		if d := v.description(raw, bodyAt("description")); d != nil {
			p.Description = d
		} else if strictjson.KindOf(raw) == strictjson.KindNull || isEmptyString(raw) {
			empty := ""
			p.Description = &empty
		}
	}
	if raw, ok := fields["connection_config"]; ok {
		if _, _, known := connconfig.Keys(transportType); known {
			p.ConnectionConfig = v.connectionConfig(raw, transportType, bodyAt("connection_config"))
		} else {
			v.Add(FieldValueError, "connection_config cannot be checked: the server has an unknown transport type",
				bodyAt("connection_config"))
		}
	}
	if raw, ok := fields["health_check_url"]; ok {
		if strictjson.KindOf(raw) == strictjson.KindNull {
			p.ClearHealthCheckURL = true
		} else if u, ok := v.healthURL(raw); ok {
			p.HealthCheckURL = &u
			// Without a new connection_config the stored allow_insecure_http decides, at health-check time.
			if p.ConnectionConfig != nil {
				v.checkHealthURLTLS(p.HealthCheckURL, p.ConnectionConfig)
			}
		}
	}

	known := 0
	for _, m := range members {
		switch m.Key {
		case "name", "description", "connection_config", "health_check_url":
			known++
		case "transport_type":
			v.Add(FieldExtraForbidden, "transport_type cannot be changed; remove the server and register it again",
				bodyAt(m.Key))
		default:
			v.Add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}
	if known == 0 && v.Count() == 0 {
		v.Add(FieldValueError, "At least one of name, description, connection_config, health_check_url is required",
			bodyAt())
	}

	if v.Count() > 0 {
		return persistence.ServerPatch{}, v.Errors()
	}
	return p, nil
}

// validateDisconnect reads the optional {"force": bool} body of POST /servers/{id}/disconnect. An empty body or
// null means force=false.
func validateDisconnect(body []byte) (bool, []FieldError) {
	trimmed := bytes.Trim(body, strictjson.Space)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return false, nil
	}
	v := newValidator(nil)
	members, ok := v.Object(body)
	if !ok {
		return false, v.Errors()
	}
	fields := v.Index(members, bodyAt())
	force := false
	if raw, ok := fields["force"]; ok && strictjson.KindOf(raw) != strictjson.KindNull {
		force, _ = v.Bool(raw, bodyAt("force"))
	}
	for _, m := range members {
		if m.Key != "force" {
			v.Add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}
	if v.Count() > 0 {
		return false, v.Errors()
	}
	return force, nil
}

// bodyAt returns the location of a body field: "body" followed by path.
func bodyAt(path ...any) []any {
	return strictjson.At([]any{"body"}, path...)
}

// maxFieldErrors caps the errors reported, so a 1 MiB body of bad keys cannot make a 30 MiB answer.
const maxFieldErrors = strictjson.MaxErrors

// validator collects the field errors of one body (a strictjson.Checker rooted at "body") and carries the
// outbound policy its URLs are judged by.
type validator struct {
	*strictjson.Checker
	out *actors.Outbound // outbound policy for URLs (nil: the default rules)
}

// newValidator returns a validator of a body whose URLs follow out (nil: the default rules).
func newValidator(out *actors.Outbound) validator {
	return validator{Checker: strictjson.New("body"), out: out}
}

// OutboundOf is the outbound policy of a Control that has one (actors.System does), else nil (the default rules).
func OutboundOf(c any) *actors.Outbound {
	if o, ok := c.(interface{ Outbound() *actors.Outbound }); ok {
		return o.Outbound()
	}
	return nil
}

// checks are the connection_config rules that come from the daemon: its outbound policy (a nil policy still
// applies the default rules).
func (v validator) checks() connconfig.Checks {
	return connconfig.Checks{URLProblem: v.out.URLProblem}
}

func (v validator) name(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		v.Add(FieldValueError, "String should have at least 1 character", loc)
	case utf8.RuneCountInString(s) > MaxNameLength:
		v.Add(FieldValueError, "String should have at most 255 characters", loc)
	case !nameRe.MatchString(s):
		v.Add(FieldValueError, "Name should match ^[a-z][a-z0-9_-]*$: start with a lowercase letter, then "+
			"lowercase letters, digits, '-' or '_'", loc)
	default:
		return s, true
	}
	return "", false
}

// description returns nil for null, an empty string or an error; otherwise the description.
func (v validator) description(raw json.RawMessage, loc []any) *string {
	if strictjson.KindOf(raw) == strictjson.KindNull {
		return nil
	}
	s, ok := v.String(raw, loc)
	if !ok {
		return nil
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		v.Add(FieldValueError, "String should have at most 1000 characters", loc)
		return nil
	}
	if s == "" {
		return nil
	}
	return &s
}

func (v validator) transport(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	if _, _, known := connconfig.Keys(s); !known {
		v.Add(FieldValueError, "Input should be 'STDIO', 'SSE' or 'HTTP'", loc)
		return "", false
	}
	return s, true
}

// healthURL decodes health_check_url: an absolute http(s) URL whose literal host the outbound policy allows.
func (v validator) healthURL(raw json.RawMessage) (string, bool) {
	loc := bodyAt("health_check_url")
	u, ok := v.String(raw, loc)
	if !ok {
		return "", false
	}
	if problem := connconfig.HTTPURLProblem(u); problem != "" {
		v.Add(FieldValueError, problem, loc)
		return "", false
	}
	if problem := v.out.URLProblem(u); problem != "" {
		v.Add(FieldValueError, problem, loc)
		return "", false
	}
	return u, true
}

// connectionConfig checks connection_config against the transport (when the transport is known and valid) and
// returns it re-encoded from the checked values, or nil on any error (connconfig.CheckInto).
func (v validator) connectionConfig(raw json.RawMessage, transport string, loc []any) json.RawMessage {
	return connconfig.CheckInto(v.Checker, raw, transport, loc, v.checks())
}

// checkHealthURLTLS applies the TLS rule of connection_config's URLs to health_check_url, with the config's
// allow_insecure_http.
func (v validator) checkHealthURLTLS(u *string, config json.RawMessage) {
	if u == nil {
		return
	}
	if problem := connconfig.PlainHTTPProblem(*u, connconfig.AllowsInsecureHTTP(config)); problem != "" {
		v.Add(FieldValueError, problem, bodyAt("health_check_url"))
	}
}

func isEmptyString(raw json.RawMessage) bool {
	return string(bytes.Trim(raw, strictjson.Space)) == `""`
}
