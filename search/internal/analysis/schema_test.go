package analysis

import (
	"encoding/json"
	"reflect"
	"testing"
)

// stdSchemaParams is SchemaParams read with encoding/json, the reference FuzzSchemaParams holds it to.
func stdSchemaParams(schema []byte) []Param {
	if len(schema) == 0 {
		return nil
	}
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil
	}
	var out []Param
	walkSchema(root, 0, &out)
	return out
}

func TestSchemaParamsOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
		want   []Param
	}{
		{"broken", `{"properties":`, nil},
		{"empty", ``, nil},
		{"flat, sorted", `{"type":"object","properties":{"b":{"type":"string","title":"B"},"a":{"description":"the a","enum":["x","y",3]}}}`,
			[]Param{{Name: "a", Description: "the a", Enum: []string{"x", "y"}}, {Name: "b", Description: "B"}}},
		{"nested and items", `{"properties":{"o":{"properties":{"i":{}}},"l":{"items":{"properties":{"e":{"description":"d"}}}}}}`,
			[]Param{{Name: "l"}, {Name: "e", Description: "d"}, {Name: "o"}, {Name: "i"}}},
	} {
		got := SchemaParams([]byte(tc.schema))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// FuzzSchemaParams: SchemaParams reads every schema as encoding/json would.
func FuzzSchemaParams(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"b":{"type":"string","title":"B"},"a":{"description":"the a","enum":["x","y",3]}}}`,
		`{"anyOf":[{"properties":{"x":{"description":"\u00e9\ud800 <b>"}}}],"properties":{"p":{"description":"a","description":"b"}}}`,
		"{\"properties\":{\"\xff\":{\"description\":\"\xfe\"}}}",
		`[1,2]`, `null`, `{"properties":1} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		got, want := SchemaParams(schema), stdSchemaParams(schema)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("SchemaParams(%q) = %+v, encoding/json reads %+v", schema, got, want)
		}
	})
}
