// Package strictjson reads JSON request bodies member by member and reports every problem as a field error in
// FastAPI's {loc, msg, type} shape, the 422 detail of system-contract.md. It exists because encoding/json is too
// lenient for a request contract: it takes the last of two duplicate keys (other decoders take the first), drops
// unknown fields, and stops at the first wrong type; a client of the original service expects every problem at
// once, each at its own location. The request validators (http/internal/validate) and the connection_config
// rules (internal/connconfig) read through it, so a wrong type or a duplicate key reads the same everywhere.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// FieldError is one entry of a 422 body's detail list, in FastAPI's shape ({loc, msg, type}). Loc holds strings
// (field names, with "body", "query" or "arguments" first) and ints (array indexes).
type FieldError struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// Path is the error's location as one dotted string ("body.connection_config.args.1"), for messages and logs
// and for comparing locations in tests.
func (e FieldError) Path() string {
	parts := make([]string, len(e.Loc))
	for i, p := range e.Loc {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ".")
}

// FieldError.Type values, so callers (tests, the MCP endpoint) can tell failures apart without parsing messages.
const (
	FieldMissing        = "missing"         // a required field is absent (or the whole body is empty)
	FieldExtraForbidden = "extra_forbidden" // a field the request does not know
	FieldTypeError      = "type_error"      // the field has the wrong JSON type
	FieldValueError     = "value_error"     // the right type but a value the rules refuse
	FieldJSONInvalid    = "json_invalid"    // the body is not JSON at all
)

// MaxErrors caps the errors a Checker reports, so a 1 MiB body of bad keys cannot make a 30 MiB answer.
const MaxErrors = 50

// Space is the whitespace JSON allows between tokens.
const Space = " \t\r\n"

// Checker collects the field errors of one input. It counts every error found, reported or not, so that "did
// this part add errors" (Count before and after) stays right past the cap. Create it with New; it is not safe
// for concurrent use.
type Checker struct {
	root []any
	errs []FieldError
	n    int
}

// New returns a Checker for an input located at root (["body"] for a REST body, ["arguments"] for a tool's
// arguments); the cap's notice is reported there.
func New(root ...any) *Checker { return &Checker{root: root} }

// At returns a location under the input's root: root followed by path.
func (c *Checker) At(path ...any) []any { return At(c.root, path...) }

// At returns a new location: base followed by more. It never aliases base.
func At(base []any, more ...any) []any {
	out := make([]any, 0, len(base)+len(more))
	out = append(out, base...)
	return append(out, more...)
}

// Add reports an error of type typ at loc. Past MaxErrors errors it reports one notice at the root, then nothing.
func (c *Checker) Add(typ, msg string, loc []any) {
	c.n++
	switch {
	case c.n <= MaxErrors:
		c.errs = append(c.errs, FieldError{Loc: loc, Msg: msg, Type: typ})
	case c.n == MaxErrors+1:
		c.errs = append(c.errs, FieldError{Loc: c.At(), Type: FieldValueError,
			Msg: "Too many errors: only the first 50 are reported"})
	}
}

// Errors is what was reported, nil when nothing was.
func (c *Checker) Errors() []FieldError { return c.errs }

// Count is how many errors were found, reported or not.
func (c *Checker) Count() int { return c.n }

// Object checks that body is present, UTF-8, well-formed JSON and an object, and returns its members.
func (c *Checker) Object(body []byte) ([]Member, bool) {
	trimmed := bytes.Trim(body, Space)
	if len(trimmed) == 0 {
		c.Add(FieldMissing, "Field required", c.At())
		return nil, false
	}
	if !utf8.Valid(trimmed) {
		c.Add(FieldJSONInvalid, "JSON decode error: body is not valid UTF-8", c.At())
		return nil, false
	}
	var raw json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		c.Add(FieldJSONInvalid, "JSON decode error: "+err.Error(), c.At())
		return nil, false
	}
	members, ok := ObjectMembers(raw)
	if !ok {
		c.Add(FieldTypeError, "Input should be a JSON object", c.At())
		return nil, false
	}
	return members, true
}

// Index maps keys to values, reporting keys given twice (which decoders resolve differently, so refusing them
// keeps every reader of the stored value in agreement). A duplicate keeps its first value.
func (c *Checker) Index(members []Member, loc []any) map[string]json.RawMessage {
	fields := make(map[string]json.RawMessage, len(members))
	for _, m := range members {
		if _, dup := fields[m.Key]; dup {
			c.Add(FieldValueError, "Duplicate key", At(loc, m.Key))
			continue
		}
		fields[m.Key] = m.Value
	}
	return fields
}

// IsFirst reports whether m is the member fields (from Index) kept for its key, not a later duplicate.
func IsFirst(fields map[string]json.RawMessage, m Member) bool {
	v, ok := fields[m.Key]
	return ok && bytes.Equal(v, m.Value)
}

// String decodes a JSON string. Strings carrying NUL are refused: PostgreSQL text and jsonb cannot store them.
func (c *Checker) String(raw json.RawMessage, loc []any) (string, bool) {
	if KindOf(raw) != KindString {
		c.Add(FieldTypeError, "Input should be a valid string", loc)
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		c.Add(FieldTypeError, "Input should be a valid string", loc)
		return "", false
	}
	if strings.ContainsRune(s, 0) {
		c.Add(FieldValueError, "String should not contain NUL characters", loc)
		return "", false
	}
	return s, true
}

// Bool decodes a JSON boolean.
func (c *Checker) Bool(raw json.RawMessage, loc []any) (bool, bool) {
	switch strings.Trim(string(raw), Space) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	c.Add(FieldTypeError, "Input should be a valid boolean", loc)
	return false, false
}

// StringList decodes an array of strings, reporting each bad item at its index.
func (c *Checker) StringList(raw json.RawMessage, loc []any) ([]string, bool) {
	if KindOf(raw) != KindArray {
		c.Add(FieldTypeError, "Input should be a valid array", loc)
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		c.Add(FieldTypeError, "Input should be a valid array", loc)
		return nil, false
	}
	out := make([]string, 0, len(items))
	ok := true
	for i, item := range items {
		s, good := c.String(item, At(loc, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// Rule says what is wrong with a string, or "" when nothing is.
type Rule func(string) string

// Both applies two rules in turn.
func Both(a, b Rule) Rule {
	return func(s string) string {
		if p := a(s); p != "" {
			return p
		}
		return b(s)
	}
}

// StringMap decodes an object of strings, checking each key and value with the given rules.
func (c *Checker) StringMap(raw json.RawMessage, loc []any, keyRule, valueRule Rule) (map[string]string, bool) {
	members, ok := ObjectMembers(raw)
	if !ok {
		c.Add(FieldTypeError, "Input should be a valid object", loc)
		return nil, false
	}
	before := c.n
	fields := c.Index(members, loc)
	out := make(map[string]string, len(members))
	for _, m := range members {
		if !IsFirst(fields, m) {
			continue
		}
		entryLoc := At(loc, m.Key)
		if problem := keyRule(m.Key); problem != "" {
			c.Add(FieldValueError, problem, entryLoc)
			continue
		}
		s, ok := c.String(m.Value, entryLoc)
		if !ok {
			continue
		}
		if problem := valueRule(s); problem != "" {
			c.Add(FieldValueError, problem, entryLoc)
			continue
		}
		out[m.Key] = s
	}
	return out, c.n == before
}

// Member is one key and value of a JSON object, in document order: validators read objects member by member so
// that duplicates, unknown keys and wrong types are each reported at their own location.
type Member struct {
	Key   string
	Value json.RawMessage
}

// ObjectMembers splits a JSON object into its members in document order (duplicates kept), or reports false when
// raw is not a JSON object.
func ObjectMembers(raw json.RawMessage) ([]Member, bool) {
	if !IsObject(raw) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []Member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, ok := tok.(string)
		if !ok {
			return nil, false
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		out = append(out, Member{Key: key, Value: value})
	}
	return out, true
}

// IsObject reports whether raw is a JSON object (by its first byte).
func IsObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// Kind is the type of a JSON value, told by its first byte.
type Kind int

// Kinds of JSON values.
const (
	KindInvalid Kind = iota
	KindObject
	KindArray
	KindString
	KindBool
	KindNull
	KindNumber
)

// KindOf tells the kind of raw by its first byte; it does not check the rest.
func KindOf(raw json.RawMessage) Kind {
	raw = bytes.TrimLeft(raw, Space)
	if len(raw) == 0 {
		return KindInvalid
	}
	switch raw[0] {
	case '{':
		return KindObject
	case '[':
		return KindArray
	case '"':
		return KindString
	case 't', 'f':
		return KindBool
	case 'n':
		return KindNull
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return KindNumber
	}
	return KindInvalid
}

// Encode encodes a value built from strings, bools, numbers, string slices and maps, which cannot fail; it does
// not escape <, > and & so a stored value reads as the admin wrote it. Map keys come out sorted.
func Encode(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
