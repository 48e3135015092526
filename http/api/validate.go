package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
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

var (
	// nameRe is BR-001's name format. Go's $ matches only at the end of the text, so no trailing newline slips by.
	nameRe = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	// varRefRe matches a ${VAR} reference, resolved from the environment at connect time.
	varRefRe = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)
)

// configKeys returns, for a known transport, the connection_config keys BR-001 documents plus
// allow_insecure_http, and the one key the transport cannot do without. ok is false for an unknown transport.
func configKeys(transport string) (allowed []string, required string, ok bool) {
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
	v := validator{out: out}
	members, ok := v.topObject(body)
	if !ok {
		return actors.RegisterRequest{}, v.errs
	}
	fields := v.index(members, bodyAt())
	req := actors.RegisterRequest{AutoConnect: true}

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, bodyAt("name")); ok {
			req.Name = name
		}
	} else {
		v.add(FieldMissing, "Field required", bodyAt("name"))
	}

	if raw, ok := fields["description"]; ok {
		req.Description = v.description(raw, bodyAt("description"))
	}

	transportOK := false
	if raw, ok := fields["transport_type"]; ok {
		req.TransportType, transportOK = v.transport(raw, bodyAt("transport_type"))
	} else {
		v.add(FieldMissing, "Field required", bodyAt("transport_type"))
	}

	if raw, ok := fields["connection_config"]; ok {
		transport := ""
		if transportOK {
			transport = req.TransportType
		}
		req.ConnectionConfig = v.connectionConfig(raw, transport, bodyAt("connection_config"))
	} else {
		v.add(FieldMissing, "Field required", bodyAt("connection_config"))
	}

	if raw, ok := fields["health_check_url"]; ok && kindOf(raw) != kindNull {
		if u, ok := v.healthURL(raw); ok {
			req.HealthCheckURL = &u
			v.checkHealthURLTLS(req.HealthCheckURL, req.ConnectionConfig)
		}
	}

	if raw, ok := fields["auto_connect"]; ok {
		if b, ok := v.boolean(raw, bodyAt("auto_connect")); ok {
			req.AutoConnect = b
		}
	}

	for _, m := range members {
		switch m.Key {
		case "name", "description", "transport_type", "connection_config", "health_check_url", "auto_connect":
		default:
			v.add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}

	if len(v.errs) > 0 {
		return actors.RegisterRequest{}, v.errs
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
	v := validator{out: out}
	members, ok := v.topObject(body)
	if !ok {
		return persistence.ServerPatch{}, v.errs
	}
	fields := v.index(members, bodyAt())
	var p persistence.ServerPatch

	if raw, ok := fields["name"]; ok {
		if name, ok := v.name(raw, bodyAt("name")); ok {
			p.Name = &name
		}
	}
	if raw, ok := fields["description"]; ok {
		if d := v.description(raw, bodyAt("description")); d != nil {
			p.Description = d
		} else if kindOf(raw) == kindNull || isEmptyString(raw) {
			empty := ""
			p.Description = &empty
		}
	}
	if raw, ok := fields["connection_config"]; ok {
		if _, _, known := configKeys(transportType); known {
			p.ConnectionConfig = v.connectionConfig(raw, transportType, bodyAt("connection_config"))
		} else {
			v.add(FieldValueError, "connection_config cannot be checked: the server has an unknown transport type",
				bodyAt("connection_config"))
		}
	}
	if raw, ok := fields["health_check_url"]; ok {
		if kindOf(raw) == kindNull {
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
			v.add(FieldExtraForbidden, "transport_type cannot be changed; remove the server and register it again",
				bodyAt(m.Key))
		default:
			v.add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}
	if known == 0 && len(v.errs) == 0 {
		v.add(FieldValueError, "At least one of name, description, connection_config, health_check_url is required",
			bodyAt())
	}

	if len(v.errs) > 0 {
		return persistence.ServerPatch{}, v.errs
	}
	return p, nil
}

// validateDisconnect reads the optional {"force": bool} body of POST /servers/{id}/disconnect. An empty body or
// null means force=false.
func validateDisconnect(body []byte) (bool, []FieldError) {
	trimmed := bytes.Trim(body, jsonSpace)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return false, nil
	}
	var v validator
	members, ok := v.topObject(body)
	if !ok {
		return false, v.errs
	}
	fields := v.index(members, bodyAt())
	force := false
	if raw, ok := fields["force"]; ok && kindOf(raw) != kindNull {
		force, _ = v.boolean(raw, bodyAt("force"))
	}
	for _, m := range members {
		if m.Key != "force" {
			v.add(FieldExtraForbidden, "Extra inputs are not permitted", bodyAt(m.Key))
		}
	}
	if len(v.errs) > 0 {
		return false, v.errs
	}
	return force, nil
}

// bodyAt returns the location of a body field: "body" followed by path.
func bodyAt(path ...any) []any {
	return at([]any{"body"}, path...)
}

// jsonSpace is the whitespace JSON allows between tokens.
const jsonSpace = " \t\r\n"

// maxFieldErrors caps the errors reported, so a 1 MiB body of bad keys cannot make a 30 MiB answer.
const maxFieldErrors = 50

// validator collects field errors. n counts every error found, reported or not, so checks of "did this part add
// errors" stay right past the cap.
type validator struct {
	errs []FieldError
	n    int
	out  *actors.Outbound // outbound policy for URLs (nil: the default rules)
}

// OutboundOf is the outbound policy of a Control that has one (actors.System does), else nil (the default rules).
func OutboundOf(c any) *actors.Outbound {
	if o, ok := c.(interface{ Outbound() *actors.Outbound }); ok {
		return o.Outbound()
	}
	return nil
}

func (v *validator) add(typ, msg string, loc []any) {
	v.n++
	switch {
	case v.n <= maxFieldErrors:
		v.errs = append(v.errs, FieldError{Loc: loc, Msg: msg, Type: typ})
	case v.n == maxFieldErrors+1:
		v.errs = append(v.errs, FieldError{Loc: bodyAt(), Type: FieldValueError,
			Msg: "Too many errors: only the first 50 are reported"})
	}
}

// at returns a new location: base followed by more. It never aliases base.
func at(base []any, more ...any) []any {
	out := make([]any, 0, len(base)+len(more))
	out = append(out, base...)
	return append(out, more...)
}

// topObject checks the body is present, UTF-8, well-formed JSON and an object, and returns its members.
func (v *validator) topObject(body []byte) ([]member, bool) {
	trimmed := bytes.Trim(body, jsonSpace)
	if len(trimmed) == 0 {
		v.add(FieldMissing, "Field required", bodyAt())
		return nil, false
	}
	if !utf8.Valid(trimmed) {
		v.add(FieldJSONInvalid, "JSON decode error: body is not valid UTF-8", bodyAt())
		return nil, false
	}
	var raw json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		v.add(FieldJSONInvalid, "JSON decode error: "+err.Error(), bodyAt())
		return nil, false
	}
	members, ok := objectMembers(raw)
	if !ok {
		v.add(FieldTypeError, "Input should be a JSON object", bodyAt())
		return nil, false
	}
	return members, true
}

// index maps keys to values, reporting keys given twice (which decoders resolve differently, so refusing them
// keeps every reader of the stored value in agreement).
func (v *validator) index(members []member, loc []any) map[string]json.RawMessage {
	fields := make(map[string]json.RawMessage, len(members))
	for _, m := range members {
		if _, dup := fields[m.Key]; dup {
			v.add(FieldValueError, "Duplicate key", at(loc, m.Key))
			continue
		}
		fields[m.Key] = m.Value
	}
	return fields
}

// str decodes a JSON string. Strings carrying NUL are refused: PostgreSQL text and jsonb cannot store them.
func (v *validator) str(raw json.RawMessage, loc []any) (string, bool) {
	if kindOf(raw) != kindString {
		v.add(FieldTypeError, "Input should be a valid string", loc)
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		v.add(FieldTypeError, "Input should be a valid string", loc)
		return "", false
	}
	if strings.ContainsRune(s, 0) {
		v.add(FieldValueError, "String should not contain NUL characters", loc)
		return "", false
	}
	return s, true
}

func (v *validator) boolean(raw json.RawMessage, loc []any) (bool, bool) {
	switch strings.Trim(string(raw), jsonSpace) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	v.add(FieldTypeError, "Input should be a valid boolean", loc)
	return false, false
}

func (v *validator) name(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.str(raw, loc)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		v.add(FieldValueError, "String should have at least 1 character", loc)
	case utf8.RuneCountInString(s) > MaxNameLength:
		v.add(FieldValueError, "String should have at most 255 characters", loc)
	case !nameRe.MatchString(s):
		v.add(FieldValueError, "Name should match ^[a-z][a-z0-9_-]*$: start with a lowercase letter, then "+
			"lowercase letters, digits, '-' or '_'", loc)
	default:
		return s, true
	}
	return "", false
}

// description returns nil for null, an empty string or an error; otherwise the description.
func (v *validator) description(raw json.RawMessage, loc []any) *string {
	if kindOf(raw) == kindNull {
		return nil
	}
	s, ok := v.str(raw, loc)
	if !ok {
		return nil
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		v.add(FieldValueError, "String should have at most 1000 characters", loc)
		return nil
	}
	if s == "" {
		return nil
	}
	return &s
}

func (v *validator) transport(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.str(raw, loc)
	if !ok {
		return "", false
	}
	if _, _, known := configKeys(s); !known {
		v.add(FieldValueError, "Input should be 'STDIO', 'SSE' or 'HTTP'", loc)
		return "", false
	}
	return s, true
}

// httpURL decodes a string that must be an absolute http(s) URL with a host.
func (v *validator) httpURL(raw json.RawMessage, loc []any) (string, bool) {
	s, ok := v.str(raw, loc)
	if !ok {
		return "", false
	}
	if problem := httpURLProblem(s); problem != "" {
		v.add(FieldValueError, problem, loc)
		return "", false
	}
	return s, true
}

// healthURL decodes health_check_url: an absolute http(s) URL whose literal host the outbound policy allows.
func (v *validator) healthURL(raw json.RawMessage) (string, bool) {
	loc := bodyAt("health_check_url")
	u, ok := v.httpURL(raw, loc)
	if !ok {
		return "", false
	}
	if problem := v.out.URLProblem(u); problem != "" {
		v.add(FieldValueError, problem, loc)
		return "", false
	}
	return u, true
}

// httpURLProblem says what is wrong with s as an absolute http(s) URL, or "" when nothing is. ${VAR} references
// are allowed: they are checked with a placeholder in their place, and a URL that starts with one (its scheme comes
// from the environment) can only be checked when it is resolved, at connect time.
func httpURLProblem(s string) string {
	if s == "" {
		return "URL should not be empty"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "URL should not contain whitespace or control characters"
		}
	}
	if loc := varRefRe.FindStringIndex(s); loc != nil && loc[0] == 0 {
		return ""
	}
	u, err := url.Parse(varRefRe.ReplaceAllString(s, "0"))
	if err != nil {
		return "Input should be a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "URL scheme should be 'http' or 'https'"
	}
	if u.Hostname() == "" {
		return "URL should be absolute and include a host"
	}
	return ""
}

// connectionConfig checks connection_config against the transport (when the transport is known and valid) and
// returns it re-encoded from the checked values, or nil on any error.
func (v *validator) connectionConfig(raw json.RawMessage, transport string, loc []any) json.RawMessage {
	members, ok := objectMembers(raw)
	if !ok {
		v.add(FieldTypeError, "Input should be a valid object", loc)
		return nil
	}
	allowed, required, known := configKeys(transport)
	if !known {
		// The transport error is reported on its own field; the config cannot be checked further.
		return nil
	}
	before := v.n
	fields := v.index(members, loc)
	out := make(map[string]any, len(members))

	if r, ok := fields[required]; !ok || kindOf(r) == kindNull {
		v.add(FieldValueError, transport+" transport requires '"+required+"' in connection_config", at(loc, required))
	}

	for _, m := range members {
		if !slices.Contains(allowed, m.Key) {
			v.add(FieldExtraForbidden, "Extra inputs are not permitted for "+transport+" transport", at(loc, m.Key))
			continue
		}
		if fields[m.Key] == nil || !bytes.Equal(fields[m.Key], m.Value) {
			continue // a duplicate, already reported
		}
		if kindOf(m.Value) == kindNull {
			continue // an optional key given as null means absent; a null required key is reported above
		}
		fieldLoc := at(loc, m.Key)
		switch m.Key {
		case "command":
			if s, ok := v.str(m.Value, fieldLoc); ok {
				if strings.TrimSpace(s) == "" {
					v.add(FieldValueError, "command should not be empty", fieldLoc)
				} else if v.noDaemonRef(s, fieldLoc) {
					out[m.Key] = s
				}
			}
		case "cwd":
			if s, ok := v.str(m.Value, fieldLoc); ok && v.noDaemonRef(s, fieldLoc) {
				out[m.Key] = s
			}
		case "args":
			if args, ok := v.stringList(m.Value, fieldLoc); ok {
				good := true
				for i, a := range args {
					good = v.noDaemonRef(a, at(fieldLoc, i)) && good
				}
				if good {
					out[m.Key] = args
				}
			}
		case "env":
			if env, ok := v.stringMap(m.Value, fieldLoc, envKeyProblem, both(nulProblem, daemonRefProblem)); ok {
				out[m.Key] = env
			}
		case "headers":
			if h, ok := v.stringMap(m.Value, fieldLoc, headerNameProblem, both(headerValueProblem, daemonRefProblem)); ok {
				if v.noCaseDuplicates(h, fieldLoc) {
					out[m.Key] = h
				}
			}
		case "url", "base_url":
			if u, ok := v.httpURL(m.Value, fieldLoc); ok && v.noDaemonRef(u, fieldLoc) {
				if problem := v.out.URLProblem(u); problem != "" {
					v.add(FieldValueError, problem, fieldLoc)
				} else {
					out[m.Key] = u
				}
			}
		case "allow_insecure_http":
			if b, ok := v.boolean(m.Value, fieldLoc); ok {
				out[m.Key] = b
			}
		}
	}
	// TLS 1.2+ for SSE and HTTP: plain http only to loopback, or with allow_insecure_http.
	allowInsecure, _ := out["allow_insecure_http"].(bool)
	for _, k := range []string{"url", "base_url"} {
		if u, ok := out[k].(string); ok {
			if problem := actors.PlainHTTPProblem(u, allowInsecure); problem != "" {
				v.add(FieldValueError, problem, at(loc, k))
			}
		}
	}
	if v.n > before {
		return nil
	}
	return encodeJSON(out)
}

// checkHealthURLTLS applies the TLS rule of connection_config's URLs to health_check_url, with the config's
// allow_insecure_http.
func (v *validator) checkHealthURLTLS(u *string, config json.RawMessage) {
	if u == nil {
		return
	}
	var c struct {
		AllowInsecureHTTP bool `json:"allow_insecure_http"`
	}
	_ = json.Unmarshal(config, &c)
	if problem := actors.PlainHTTPProblem(*u, c.AllowInsecureHTTP); problem != "" {
		v.add(FieldValueError, problem, bodyAt("health_check_url"))
	}
}

func (v *validator) stringList(raw json.RawMessage, loc []any) ([]string, bool) {
	if kindOf(raw) != kindArray {
		v.add(FieldTypeError, "Input should be a valid array", loc)
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		v.add(FieldTypeError, "Input should be a valid array", loc)
		return nil, false
	}
	out := make([]string, 0, len(items))
	ok := true
	for i, item := range items {
		s, good := v.str(item, at(loc, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// stringMap decodes an object of strings, checking each key and value with the given rules (each returns a
// problem, or "" when the string is fine).
func (v *validator) stringMap(raw json.RawMessage, loc []any, keyRule, valueRule func(string) string) (map[string]string, bool) {
	members, ok := objectMembers(raw)
	if !ok {
		v.add(FieldTypeError, "Input should be a valid object", loc)
		return nil, false
	}
	before := v.n
	fields := v.index(members, loc)
	out := make(map[string]string, len(members))
	for _, m := range members {
		if !bytes.Equal(fields[m.Key], m.Value) {
			continue
		}
		entryLoc := at(loc, m.Key)
		if problem := keyRule(m.Key); problem != "" {
			v.add(FieldValueError, problem, entryLoc)
			continue
		}
		s, ok := v.str(m.Value, entryLoc)
		if !ok {
			continue
		}
		if problem := valueRule(s); problem != "" {
			v.add(FieldValueError, problem, entryLoc)
			continue
		}
		out[m.Key] = s
	}
	return out, v.n == before
}

// noCaseDuplicates refuses two headers whose names differ only in case: HTTP treats them as one.
func (v *validator) noCaseDuplicates(h map[string]string, loc []any) bool {
	seen := make(map[string]bool, len(h))
	ok := true
	for _, k := range slices.Sorted(maps.Keys(h)) {
		lower := strings.ToLower(k)
		if seen[lower] {
			v.add(FieldValueError, "Header given twice (names are case-insensitive)", at(loc, k))
			ok = false
		}
		seen[lower] = true
	}
	return ok
}

// daemonRefProblem refuses a ${VAR} reference to one of the daemon's own settings (actors.IsDaemonSetting): they
// hold its bearer tokens, the at-rest credential key and the database URL, and a backend can show its
// configuration to any caller. The message names the variable, never its value.
func daemonRefProblem(s string) string {
	if name := actors.DaemonSettingReference(s); name != "" {
		return "${" + name + "} is a setting of the aggregator itself; its settings (MCP_AGGREGATOR_*, " +
			"MCP_CREDENTIAL_KEY*, DATABASE_URL, QDRANT_*) cannot be referenced in connection_config"
	}
	return ""
}

// noDaemonRef applies daemonRefProblem to one string, reporting at loc; it says whether s is fine.
func (v *validator) noDaemonRef(s string, loc []any) bool {
	if problem := daemonRefProblem(s); problem != "" {
		v.add(FieldValueError, problem, loc)
		return false
	}
	return true
}

// both applies two value rules in turn.
func both(a, b func(string) string) func(string) string {
	return func(s string) string {
		if p := a(s); p != "" {
			return p
		}
		return b(s)
	}
}

func nulProblem(s string) string {
	if strings.ContainsRune(s, 0) {
		return "String should not contain NUL characters"
	}
	return ""
}

func envKeyProblem(k string) string {
	switch {
	case k == "":
		return "Environment variable name should not be empty"
	case strings.ContainsAny(k, "=\x00"):
		return "Environment variable name should not contain '=' or NUL"
	}
	return ""
}

// headerNameProblem enforces RFC 9110's token syntax, so a name cannot smuggle a second header or a body.
func headerNameProblem(k string) string {
	if k == "" {
		return "Header name should not be empty"
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return "Header name should be an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
		}
	}
	return ""
}

// headerValueProblem refuses control characters other than tab, CR and LF included (header injection).
func headerValueProblem(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return "Header value should not contain control characters"
		}
	}
	return ""
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// member is one key and value of a JSON object, in document order (apierror.Member).
type member = apierror.Member

// objectMembers splits raw into its members in document order, or reports false when raw is not a JSON object.
func objectMembers(raw json.RawMessage) ([]member, bool) { return apierror.ObjectMembers(raw) }

// jsonKind is the type of a JSON value, told by its first byte.
type jsonKind int

const (
	kindInvalid jsonKind = iota
	kindObject
	kindArray
	kindString
	kindBool
	kindNull
	kindNumber
)

func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimLeft(raw, jsonSpace)
	if len(raw) == 0 {
		return kindInvalid
	}
	switch raw[0] {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return kindNumber
	}
	return kindInvalid
}

func isEmptyString(raw json.RawMessage) bool {
	return string(bytes.Trim(raw, jsonSpace)) == `""`
}

// encodeJSON encodes a value built from strings, bools, string slices and string maps, which cannot fail; it does
// not escape <, > and & so the stored config reads as the admin wrote it. Map keys come out sorted.
func encodeJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
