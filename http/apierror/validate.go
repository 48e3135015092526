package apierror

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/internal/strictjson"
)

// FieldError is one entry of a 422 body's detail list, in FastAPI's shape ({loc, msg, type}); it is declared with
// the strict JSON reader that produces it (strictjson.FieldError), so the connection_config rules need no HTTP.
type FieldError = strictjson.FieldError

// FieldError.Type values (strictjson's).
const (
	FieldMissing        = strictjson.FieldMissing
	FieldExtraForbidden = strictjson.FieldExtraForbidden
	FieldTypeError      = strictjson.FieldTypeError
	FieldValueError     = strictjson.FieldValueError
	FieldJSONInvalid    = strictjson.FieldJSONInvalid
)

// MaxToolNameLength is the longest tool name a call may give.
const MaxToolNameLength = 2048

// CallRequest is a validated tool call: the name, the arguments (a JSON object, "{}" when absent) and the
// server_id (a canonical UUID, or "").
type CallRequest struct {
	Name      string
	Arguments json.RawMessage
	ServerID  string
}

// CallShape names the fields of a call body: REST's {"name","arguments","server_id"} under "body", or
// execute_external_tool's {"tool_name","arguments","server_id"} under "arguments".
type CallShape struct {
	Root    string
	NameKey string
}

// Shapes of the call bodies the front ends accept.
var (
	RESTCall    = CallShape{Root: "body", NameKey: "name"}
	ExecuteCall = CallShape{Root: "arguments", NameKey: "tool_name"}
)

// ValidateCall reads a call body with the rules every front end shares: the name required, 1 to 2048
// characters; arguments optional, an object; server_id optional, a UUID; nothing else.
func ValidateCall(body []byte, shape CallShape) (CallRequest, []FieldError) {
	loc := func(path ...any) []any { return append([]any{shape.Root}, path...) }
	var errs []FieldError
	add := func(typ, msg string, l []any) { errs = append(errs, FieldError{Loc: l, Msg: msg, Type: typ}) }
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "Field required", Type: FieldMissing}}
	}
	if !utf8.Valid(trimmed) {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "JSON decode error: body is not valid UTF-8", Type: FieldJSONInvalid}}
	}
	var raw json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "JSON decode error: " + err.Error(), Type: FieldJSONInvalid}}
	}
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "Input should be a JSON object", Type: FieldTypeError}}
	}
	fields := map[string]json.RawMessage{}
	for _, m := range members {
		if _, dup := fields[m.Key]; dup {
			add(FieldValueError, "Duplicate key", loc(m.Key))
			continue
		}
		fields[m.Key] = m.Value
		switch m.Key {
		case shape.NameKey, "arguments", "server_id":
		default:
			add(FieldExtraForbidden, "Extra inputs are not permitted", loc(m.Key))
		}
		if len(errs) >= 50 {
			break
		}
	}
	var r CallRequest
	if v, ok := fields[shape.NameKey]; !ok || isNull(v) {
		add(FieldMissing, "Field required", loc(shape.NameKey))
	} else if name, ok := str(v); !ok {
		add(FieldTypeError, "Input should be a valid string", loc(shape.NameKey))
	} else {
		r.Name = name
		if fe := CheckToolName(name); fe != "" {
			add(FieldValueError, fe, loc(shape.NameKey))
		}
	}
	r.Arguments = json.RawMessage("{}")
	if v, ok := fields["arguments"]; ok && !isNull(v) {
		if !strictjson.IsObject(v) {
			add(FieldTypeError, "arguments must be an object", loc("arguments"))
		} else {
			r.Arguments = bytes.TrimSpace(v)
		}
	}
	if v, ok := fields["server_id"]; ok && !isNull(v) {
		if id, ok := str(v); !ok {
			add(FieldTypeError, "Input should be a valid string", loc("server_id"))
		} else if u, err := uuid.Parse(id); err != nil || len(id) != 36 {
			add(FieldValueError, "server_id must be a UUID", loc("server_id"))
		} else {
			r.ServerID = u.String()
		}
	}
	if len(errs) > 0 {
		return CallRequest{}, errs
	}
	return r, nil
}

// CheckToolName returns why a tool name is refused, or "".
func CheckToolName(name string) string {
	if name == "" || len(name) > MaxToolNameLength {
		return "name must be 1 to 2048 characters"
	}
	if strings.ContainsRune(name, 0) {
		return "String should not contain NUL characters"
	}
	return ""
}

// ValidateArguments checks the arguments of a direct tool call (MCP tools/call by alias or name): absent or null
// is an empty object, anything else must be an object. It returns the arguments to send.
func ValidateArguments(args json.RawMessage) (json.RawMessage, []FieldError) {
	if len(bytes.TrimSpace(args)) == 0 || isNull(args) {
		return json.RawMessage("{}"), nil
	}
	if !strictjson.IsObject(args) {
		return nil, []FieldError{{Loc: []any{"params", "arguments"}, Msg: "arguments must be an object", Type: FieldTypeError}}
	}
	return args, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func str(raw json.RawMessage) (string, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return "", false
	}
	return s, true
}
