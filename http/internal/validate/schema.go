package validate

import (
	"encoding/json"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
)

// object is the schema of a request body: these properties (in this order when published), these required, and
// nothing else (additionalProperties false), as the validators refuse unknown fields.
func object(props []property, required ...string) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}, Required: required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	if required == nil {
		s.Required = []string{}
	}
	for _, p := range props {
		s.Properties[p.name] = p.schema
		s.PropertyOrder = append(s.PropertyOrder, p.name)
	}
	return s
}

// property is one named property of an object schema.
type property struct {
	name   string
	schema *jsonschema.Schema
}

func prop(name string, s *jsonschema.Schema) property { return property{name, s} }

// known reports whether s declares the property key.
func known(s *jsonschema.Schema, key string) bool { return s.Properties[key] != nil }

// enum is the string values a property's schema allows.
func enum(s *jsonschema.Schema, key string) []string {
	var out []string
	for _, v := range s.Properties[key].Enum {
		if str, ok := v.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// inEnum reports whether v is one of the property's allowed values.
func inEnum(s *jsonschema.Schema, key, v string) bool { return slices.Contains(enum(s, key), v) }

// bounds is a numeric property's minimum and maximum (every bounded property of these schemas has both).
func bounds(s *jsonschema.Schema, key string) (lo, hi float64) {
	p := s.Properties[key]
	return *p.Minimum, *p.Maximum
}

func ptr[T any](v T) *T { return &v }

func values(vs ...string) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

func jsonValue(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
