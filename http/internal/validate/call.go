package validate

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/internal/strictjson"
)

// FieldError is one entry of a 422 body's detail list (strictjson.FieldError, apierror.FieldError).
type FieldError = strictjson.FieldError

// MaxToolNameLength is the longest tool name a call may give.
const MaxToolNameLength = 2048

// CallRequest is a validated tool call: the name, the arguments (a JSON object, "{}" when absent) and the
// server_id (a canonical UUID, or "").
type CallRequest struct {
	Name      string
	Arguments json.RawMessage
	ServerID  string
	// Profile restricts the call to a profile's tools ("" none).
	Profile string `json:",omitempty"`
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

// CallSchema is the schema of a call body of the given shape: the name (1 to 2048 characters, required), the
// arguments (an object) and the server_id (a UUID), nothing else. execute_external_tool publishes it as its input.
func CallSchema(shape CallShape) *jsonschema.Schema {
	return object([]property{
		prop(shape.NameKey, &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(MaxToolNameLength),
			Description: "The tool's namespaced name {server}.{tool}, its alias, or its original name when only one server has it"}),
		prop("arguments", &jsonschema.Schema{Type: "object", Description: "The tool's arguments"}),
		prop("server_id", &jsonschema.Schema{Type: "string", Format: "uuid",
			Description: "The server to call the tool on (its id), when the name is ambiguous"}),
		prop("profile", profileNameSchema("Call the tool within this profile (a tool outside it is not found)")),
	}, shape.NameKey)
}

// callSchemas are the schemas Call reads, built once (a tool call is the hot path); never modified.
var callSchemas = map[string]*jsonschema.Schema{
	RESTCall.NameKey:    CallSchema(RESTCall),
	ExecuteCall.NameKey: CallSchema(ExecuteCall),
}

// Call reads a call body with the rules every front end shares (CallSchema): the name required, 1 to 2048
// characters; arguments optional, an object; server_id optional, a UUID; nothing else. Errors are located under
// the shape's root.
func Call(body []byte, shape CallShape) (CallRequest, []FieldError) {
	schema, ok := callSchemas[shape.NameKey]
	if !ok {
		schema = CallSchema(shape)
	}
	loc := func(path ...any) []any { return append([]any{shape.Root}, path...) }
	var errs []FieldError
	add := func(typ, msg string, l []any) { errs = append(errs, FieldError{Loc: l, Msg: msg, Type: typ}) }
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "Field required", Type: strictjson.FieldMissing}}
	}
	if !utf8.Valid(trimmed) {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "JSON decode error: body is not valid UTF-8", Type: strictjson.FieldJSONInvalid}}
	}
	var raw json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "JSON decode error: " + err.Error(), Type: strictjson.FieldJSONInvalid}}
	}
	members, ok := strictjson.ObjectMembers(raw)
	if !ok {
		return CallRequest{}, []FieldError{{Loc: loc(), Msg: "Input should be a JSON object", Type: strictjson.FieldTypeError}}
	}
	fields := map[string]json.RawMessage{}
	for _, m := range members {
		if _, dup := fields[m.Key]; dup {
			add(strictjson.FieldValueError, "Duplicate key", loc(m.Key))
			continue
		}
		fields[m.Key] = m.Value
		if !known(schema, m.Key) {
			add(strictjson.FieldExtraForbidden, "Extra inputs are not permitted", loc(m.Key))
		}
		if len(errs) >= strictjson.MaxErrors {
			break
		}
	}
	var r CallRequest
	if v, ok := fields[shape.NameKey]; !ok || isNull(v) {
		add(strictjson.FieldMissing, "Field required", loc(shape.NameKey))
	} else if name, ok := str(v); !ok {
		add(strictjson.FieldTypeError, "Input should be a valid string", loc(shape.NameKey))
	} else {
		r.Name = name
		if fe := ToolName(name); fe != "" {
			add(strictjson.FieldValueError, fe, loc(shape.NameKey))
		}
	}
	r.Arguments = json.RawMessage("{}")
	if v, ok := fields["arguments"]; ok && !isNull(v) {
		if !strictjson.IsObject(v) {
			add(strictjson.FieldTypeError, "arguments must be an object", loc("arguments"))
		} else {
			r.Arguments = bytes.TrimSpace(v)
		}
	}
	if v, ok := fields["server_id"]; ok && !isNull(v) {
		if id, ok := str(v); !ok {
			add(strictjson.FieldTypeError, "Input should be a valid string", loc("server_id"))
		} else if u, err := uuid.Parse(id); err != nil || len(id) != 36 {
			add(strictjson.FieldValueError, "server_id must be a UUID", loc("server_id"))
		} else {
			r.ServerID = u.String()
		}
	}
	if v, ok := fields["profile"]; ok && !isNull(v) {
		if p, ok := str(v); !ok {
			add(strictjson.FieldTypeError, "Input should be a valid string", loc("profile"))
		} else if msg := ProfileName(p); msg != "" {
			add(strictjson.FieldValueError, msg, loc("profile"))
		} else {
			r.Profile = p
		}
	}
	if len(errs) > 0 {
		return CallRequest{}, errs
	}
	return r, nil
}

// ToolName returns why a tool name is refused, or "".
func ToolName(name string) string {
	if name == "" || len(name) > MaxToolNameLength {
		return "name must be 1 to 2048 characters"
	}
	if strings.ContainsRune(name, 0) {
		return "String should not contain NUL characters"
	}
	return ""
}

// Arguments checks the arguments of a direct tool call (MCP tools/call by alias or name, on /mcp or
// /mcp/servers/{name}): absent or null is an empty object, anything else must be an object. It returns the
// arguments to send.
func Arguments(args json.RawMessage) (json.RawMessage, []FieldError) {
	if len(bytes.TrimSpace(args)) == 0 || isNull(args) {
		return json.RawMessage("{}"), nil
	}
	if !strictjson.IsObject(args) {
		return nil, []FieldError{{Loc: []any{"params", "arguments"}, Msg: "arguments must be an object", Type: strictjson.FieldTypeError}}
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
