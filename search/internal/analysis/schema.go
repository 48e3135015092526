package analysis

import (
	"slices"

	segjson "github.com/segmentio/encoding/json"
)

// Limits on what is read from an input schema: enough for any real tool, bounded for a hostile one.
const (
	maxSchemaDepth  = 4
	maxSchemaParams = 64
	maxEnumValues   = 16
)

// Param is one parameter of a tool's input schema, as far as search cares: its name, its description (or title)
// and its string enum values.
type Param struct {
	Name        string
	Description string
	Enum        []string
}

// SchemaParams lists the parameters of a JSON Schema object: its properties, then nested properties of objects,
// array items and anyOf/oneOf/allOf branches, in a deterministic order (property names sorted at each level). A
// schema that is not valid JSON gives no parameters: search must not fail because a server sent a broken schema.
func SchemaParams(schema []byte) []Param {
	if len(schema) == 0 {
		return nil
	}
	// segmentio's decoder reads into the same values as encoding/json's, at a fraction of the cost (every tool's
	// schema is read when it is indexed; FuzzSchemaParams holds the two to the same parameters).
	var root any
	if err := segjson.Unmarshal(schema, &root); err != nil {
		return nil
	}
	var out []Param
	walkSchema(root, 0, &out)
	return out
}

func walkSchema(node any, depth int, out *[]Param) {
	obj, ok := node.(map[string]any)
	if !ok || depth > maxSchemaDepth || len(*out) >= maxSchemaParams {
		return
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if len(*out) >= maxSchemaParams {
				return
			}
			p := Param{Name: name}
			if prop, ok := props[name].(map[string]any); ok {
				p.Description, _ = prop["description"].(string)
				if p.Description == "" {
					p.Description, _ = prop["title"].(string)
				}
				p.Enum = enumStrings(prop)
				*out = append(*out, p)
				walkSchema(prop, depth+1, out)
				continue
			}
			*out = append(*out, p)
		}
	}
	if items, ok := obj["items"]; ok {
		walkSchema(items, depth+1, out)
	}
	for _, key := range []string{"anyOf", "oneOf", "allOf"} {
		if branches, ok := obj[key].([]any); ok {
			for _, b := range branches {
				walkSchema(b, depth+1, out)
			}
		}
	}
}

func enumStrings(prop map[string]any) []string {
	vals, ok := prop["enum"].([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range vals {
		if s, ok := v.(string); ok && len(out) < maxEnumValues {
			out = append(out, s)
		}
	}
	return out
}
