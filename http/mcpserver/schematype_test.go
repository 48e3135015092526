package mcpserver

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// referenceSchemaType is what exposedTool read before schemaType: the schema decoded into a map.
func referenceSchemaType(schema []byte) (typ any, has, isObject bool) {
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil || m == nil {
		return nil, false, false
	}
	typ, has = m["type"]
	return typ, has, true
}

var schemaTypeCases = []string{
	`{"type":"object","properties":{"a":{"type":"string"}}}`, `{"properties":{}}`, `{"type":"array"}`,
	`{"type":null}`, `{"type":["object","null"]}`, `{"TYPE":"object"}`, `{"Type":"string","type":"object"}`,
	`{"type":"object","type":"string"}`, `{"t\u0079pe":"object"}`, `{"type":"\u006fbject"}`, `null`, ` null `,
	`[]`, `"object"`, `5`, `{`, `{"type":"object"} x`, ``, `{"a":[1,{"type":"x"}]}`, "{\"type\":\"obj\xffect\"}",
}

func TestSchemaType(t *testing.T) {
	for _, c := range schemaTypeCases {
		typ, has, obj := schemaType([]byte(c))
		wtyp, whas, wobj := referenceSchemaType([]byte(c))
		if !reflect.DeepEqual(typ, wtyp) || has != whas || obj != wobj {
			t.Errorf("schemaType(%q) = %v, %v, %v; decoding into a map gives %v, %v, %v", c, typ, has, obj, wtyp, whas, wobj)
		}
	}
}

func FuzzSchemaType(f *testing.F) {
	for _, c := range schemaTypeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		typ, has, obj := schemaType(schema)
		wtyp, whas, wobj := referenceSchemaType(schema)
		if !reflect.DeepEqual(typ, wtyp) || has != whas || obj != wobj {
			t.Fatalf("schemaType(%q) = %v, %v, %v; decoding into a map gives %v, %v, %v", schema, typ, has, obj, wtyp, whas, wobj)
		}
	})
}

// TestToolEncodingMatchesEncodingJSON: listedTokens counts the bytes segmentio's encoder writes for a tool; they
// are encoding/json's (HTML escapes, sorted _meta, the schema compacted), so the counts are those of the listing.
func TestToolEncodingMatchesEncodingJSON(t *testing.T) {
	for _, tool := range []*mcp.Tool{
		{Name: "a<b", Description: "x & y \u2028 \xff", InputSchema: json.RawMessage("{ \"type\" : \"object\",\n \"p\": [1, 2.50] }"),
			Meta: mcp.Meta{"z": 1, "a": []any{"q"}}, Annotations: &mcp.ToolAnnotations{Title: "t"}, Title: "T"},
		{Name: "plain", InputSchema: map[string]any{"type": "object"}, OutputSchema: json.RawMessage(`{"type":"object"}`)},
	} {
		want, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := segjson.Marshal(tool); err != nil || string(got) != string(want) {
			t.Errorf("segmentio: %s, %v\nencoding/json: %s", got, err, want)
		}
	}
}
