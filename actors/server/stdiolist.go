package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/actors/backend"
)

// Listing a stdio server's tools without the go-sdk's client (issue 25). The go-sdk decodes every tool's schemas
// into maps, encodes and decodes each input schema again to check its x-mcp-header annotations, and the server
// actor then encoded each tool once more for discovery: 18 % of what the daemon allocated, and 8 % of its CPU, while
// 10,000 tools became searchable (BENCHMARKS.md). A stdio session's tools/list goes through the stdio hop instead
// (backend.StdioRequest), and each tool is read into the go-sdk's Tool shape with its schemas kept as the backend
// wrote them. What is stored stays what the go-sdk path stored, to the pin hash: the same members (unknown ones
// dropped, _meta, annotations and icons decoded as the go-sdk decodes them), field names matched case-sensitively,
// and every number in a schema written as encoding/json writes the float64 the go-sdk read (a pin made before this
// change still matches; TestStdioToolDefMatchesSDK). Only the schemas' key order and string escapes stay the
// backend's, which no hash sees. A tool the fast reading cannot vouch for (not valid UTF-8, an escape the go-sdk
// would decode, an x-mcp-header annotation) is read the go-sdk's way; a listing where one carries an x-mcp-header
// annotation goes through the go-sdk whole (its validation drops invalid ones, and our MCP server's AddTool panics on
// them).

// maxJSONDepth is the go-sdk's bound of a message's nesting (its internal json.Unmarshal).
const maxJSONDepth = 1000

// errHeaderAnnotations: a tool of the listing carries x-mcp-header annotations, which the go-sdk validates.
var errHeaderAnnotations = errors.New("x-mcp-header annotations: list through the go-sdk")

// sdkTool is mcp.Tool with its schemas raw: its members in the same order and with the same encodings.
type sdkTool struct {
	Meta         mcp.Meta             `json:"_meta,omitempty"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
	Description  string               `json:"description,omitempty"`
	InputSchema  json.RawMessage      `json:"inputSchema"`
	Name         string               `json:"name"`
	OutputSchema json.RawMessage      `json:"outputSchema,omitempty"`
	Title        string               `json:"title,omitempty"`
	Icons        []mcp.Icon           `json:"icons,omitempty"`
}

// listStdioTools pages through a stdio session's tools/list on the stdio hop and returns each tool as the go-sdk
// path would have given it to discovery (JSON of the go-sdk's Tool, with the execution the task wire tw keeps).
// errHeaderAnnotations: list through the go-sdk.
func listStdioTools(ctx context.Context, b *backend.Conn, tw *taskWire) ([][]byte, error) {
	var tools [][]byte
	var cursor string
	for {
		var params any = struct{}{}
		if cursor != "" {
			params = map[string]string{"cursor": cursor}
		}
		res, err := b.StdioRequest(ctx, "tools/list", params)
		if err != nil {
			return nil, err
		}
		if err := checkDepth(res, maxJSONDepth); err != nil {
			return nil, err
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := parseSDK(res, &page); err != nil {
			return nil, fmt.Errorf("decode tools/list result: %w", err)
		}
		tw.noteListing(res) // as the wire notes the go-sdk's pages (tasks_backend.go)
		for _, raw := range page.Tools {
			def, name, err := stdioToolDef(raw)
			if err != nil {
				return nil, err
			}
			if def != nil {
				tools = append(tools, tw.withExecution(name, def))
			}
		}
		if page.NextCursor == "" {
			return tools, nil
		}
		cursor = page.NextCursor
	}
}

// parseSDK decodes b into v as the go-sdk's decoder does: field names matched case-sensitively.
func parseSDK(b []byte, v any) error {
	_, err := segjson.Parse(b, v, segjson.DontMatchCaseInsensitiveStructFields)
	return err
}

// stdioToolDef is one listed tool as JSON of the go-sdk's Tool, and its name (nil for a null entry, which the
// go-sdk drops).
func stdioToolDef(raw json.RawMessage) ([]byte, string, error) {
	if string(raw) == "null" {
		return nil, "", nil
	}
	if !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\u`)) || bytes.Contains(raw, []byte("x-mcp-header")) {
		var t mcp.Tool // the go-sdk's way: schemas through maps
		if err := parseSDK(raw, &t); err != nil {
			return nil, "", fmt.Errorf("decode tool: %w", err)
		}
		if hasKey(t.InputSchema, "x-mcp-header") {
			return nil, "", errHeaderAnnotations
		}
		def, err := json.Marshal(&t)
		return def, t.Name, err
	}
	var t sdkTool
	if err := parseSDK(raw, &t); err != nil {
		return nil, "", fmt.Errorf("decode tool: %w", err)
	}
	var err error
	if t.InputSchema, err = floatNumbers(nullIsNil(t.InputSchema)); err != nil {
		return nil, "", fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	if t.OutputSchema, err = floatNumbers(nullIsNil(t.OutputSchema)); err != nil {
		return nil, "", fmt.Errorf("tool %q: output schema: %w", t.Name, err)
	}
	def, err := json.Marshal(&t)
	return def, t.Name, err
}

// nullIsNil is b, or nil for JSON null (the go-sdk's nil schema).
func nullIsNil(b json.RawMessage) json.RawMessage {
	if string(b) == "null" {
		return nil
	}
	return b
}

// hasKey reports whether v (decoded JSON) holds an object with the key at any depth.
func hasKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == key || hasKey(x, key) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasKey(x, key) {
				return true
			}
		}
	}
	return false
}

// floatNumbers rewrites every number of the JSON value b as encoding/json writes the float64 it parses to (what a
// decoding into maps and encoding again made of it); b itself when every number already reads so.
func floatNumbers(b []byte) ([]byte, error) {
	var out []byte // nil until a number changes
	last := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			i++
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(b) && isNumberByte(b[j]) {
				j++
			}
			tok := b[i:j]
			if !plainInteger(tok) {
				f, err := strconv.ParseFloat(string(tok), 64)
				if err != nil {
					return nil, fmt.Errorf("number %s: %w", tok, err)
				}
				if canon := appendFloat(nil, f); !bytes.Equal(canon, tok) {
					out = append(out, b[last:i]...)
					out = append(out, canon...)
					last = j
				}
			}
			i = j
		default:
			i++
		}
	}
	if out == nil {
		return b, nil
	}
	return append(out, b[last:]...), nil
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// plainInteger reports whether tok is an integer a float64 holds exactly and encoding/json writes the same: up to
// 15 digits, no leading zero, not -0.
func plainInteger(tok []byte) bool {
	digits := tok
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || digits[0] == '0' && (len(digits) > 1 || len(tok) > 1) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 -> e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// checkDepth refuses JSON nested deeper than max (the go-sdk's check, which fails the whole message).
func checkDepth(b []byte, max int) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > max {
				return fmt.Errorf("json: exceeded maximum nesting depth of %d", max)
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
