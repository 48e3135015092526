// Package toolresult encodes the commonest tools/call result, text content only, byte for byte as json.Marshal
// encodes the go-sdk's *mcp.CallToolResult, without its reflection and its two nested json.Marshal calls (the
// result's own MarshalJSON and each TextContent's). A tool call's answer is encoded once per call on /mcp (the fast
// path's SSE answer) and once on REST (the actor's ResultJson); anything else (structured content,
// annotations, a content's _meta, other content types, input requests) is left to json.Marshal.
package toolresult

import (
	"encoding/json"
	"reflect"
	"slices"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resultTypeField is the index of CallToolResult's unexported resultType (set by the go-sdk's server for a
// 2026-07-28 client, encoded as "resultType"); nil when the go-sdk has no such field (Append then declines).
var resultTypeField = func() []int {
	f, ok := reflect.TypeFor[mcp.CallToolResult]().FieldByName("resultType")
	if !ok || f.Type.Kind() != reflect.String {
		return nil
	}
	return f.Index
}()

// Append appends the JSON encoding of res to dst, as json.Marshal(res) writes it (HTML characters escaped), and
// reports true; false and dst unchanged when res is not text content only, or has structured content or input
// requests (the caller then uses json.Marshal). The result's _meta is written as it is when its values are raw JSON
// (appendMeta), by json.Marshal of the map otherwise.
func Append(dst []byte, res *mcp.CallToolResult) ([]byte, bool) {
	if res == nil || res.StructuredContent != nil || res.InputRequests != nil ||
		res.RequestState != "" || resultTypeField == nil {
		return dst, false
	}
	for _, c := range res.Content {
		t, ok := c.(*mcp.TextContent)
		if !ok || t == nil || len(t.Meta) > 0 || t.Annotations != nil {
			return dst, false
		}
	}
	rt := reflect.ValueOf(res).Elem().FieldByIndex(resultTypeField).String()
	start := len(dst)
	dst = append(dst, '{')
	if len(res.Meta) > 0 {
		dst = append(dst, `"_meta":`...)
		var ok bool
		if dst, ok = appendMeta(dst, res.Meta); !ok {
			return dst[:start], false
		}
		dst = append(dst, ',')
	}
	if res.Content == nil {
		dst = append(dst, `"content":null`...)
	} else {
		dst = append(dst, `"content":[`...)
		for i, c := range res.Content {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"text","text":`...)
			dst = AppendString(dst, c.(*mcp.TextContent).Text)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if res.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	if rt != "" {
		dst = append(dst, `,"resultType":`...)
		dst = AppendString(dst, rt)
	}
	return append(dst, '}'), true
}

// appendMeta appends a result's _meta as json.Marshal writes a map (keys sorted): itself when every value is raw
// JSON already compact and without characters json.Marshal escapes (the routing metadata the daemon adds) or a
// plain serverInfo (plainValue), through json.Marshal of the map otherwise.
func appendMeta(dst []byte, meta mcp.Meta) ([]byte, bool) {
	var arr [8]string
	keys := arr[:0]
	for k, v := range meta {
		if len(keys) == len(arr) || !plainValue(v) {
			b, err := json.Marshal(map[string]any(meta))
			return append(dst, b...), err == nil
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		switch v := meta[k].(type) {
		case json.RawMessage:
			dst = append(dst, v...)
		case *mcp.Implementation: // its fields in order, omitempty as tagged
			dst = append(dst, `{"name":`...)
			dst = AppendString(dst, v.Name)
			if v.Title != "" {
				dst = append(dst, `,"title":`...)
				dst = AppendString(dst, v.Title)
			}
			if v.Description != "" {
				dst = append(dst, `,"description":`...)
				dst = AppendString(dst, v.Description)
			}
			dst = append(dst, `,"version":`...)
			dst = AppendString(dst, v.Version)
			if v.WebsiteURL != "" {
				dst = append(dst, `,"websiteUrl":`...)
				dst = AppendString(dst, v.WebsiteURL)
			}
			dst = append(dst, '}')
		}
	}
	return append(dst, '}'), true
}

// plainValue reports whether appendMeta writes v itself: raw JSON written as it is (verbatim), or the serverInfo a
// 2026-07-28 answer carries (an *mcp.Implementation without icons, whose fields are all strings).
func plainValue(v any) bool {
	switch v := v.(type) {
	case json.RawMessage:
		return verbatim(v)
	case *mcp.Implementation:
		return v != nil && len(v.Icons) == 0 && implementationFields == 6
	}
	return false
}

// implementationFields is how many fields mcp.Implementation has: the six appendMeta writes (or leaves out, empty
// icons); a go-sdk that adds one sends the serverInfo to json.Marshal.
var implementationFields = reflect.TypeFor[mcp.Implementation]().NumField()

// verbatim reports whether json.Marshal writes raw as it is: valid, compact (no space outside strings), and
// without <, >, & or U+2028 and U+2029 (which it escapes). A nil raw message is written "null": not verbatim.
func verbatim(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	inString, escaped := false, false
	for i, b := range raw {
		switch {
		case b == '<' || b == '>' || b == '&':
			return false
		case b == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9):
			return false
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case b == '"':
			inString = !inString
		case !inString && (b == ' ' || b == '\t' || b == '\n' || b == '\r'):
			return false
		}
	}
	return json.Valid(raw)
}

// Marshal is json.Marshal(res), through Append when it can.
func Marshal(res *mcp.CallToolResult) ([]byte, error) {
	if b, ok := Append(nil, res); ok {
		return b, nil
	}
	return json.Marshal(res)
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string exactly as encoding/json writes it with HTML escaping (json.Marshal):
// control characters as \b \f \n \r \t or \u00XX, <, > and & as \u003c \u003e \u0026, invalid UTF-8 as \ufffd,
// U+2028 and U+2029 as \u2028 and \u2029.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
