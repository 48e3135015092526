package server

import "testing"

func TestTitledMultiSelect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema any
		want   bool
	}{
		{"nil", nil, false},
		{"no properties", map[string]any{"type": "object"}, false},
		{"untitled multi", map[string]any{"type": "object", "properties": map[string]any{
			"m": map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"a", "b"}}}}}, false},
		{"titled multi", map[string]any{"type": "object", "properties": map[string]any{
			"m": map[string]any{"type": "array", "items": map[string]any{"type": "string",
				"anyOf": []any{map[string]any{"const": "a", "title": "A"}}}}}}, true},
		{"titled single", map[string]any{"type": "object", "properties": map[string]any{
			"s": map[string]any{"type": "string", "oneOf": []any{map[string]any{"const": "a", "title": "A"}}}}}, false},
		{"not an object", "text", false},
		{"unmarshalable", func() {}, false},
	} {
		if got := TitledMultiSelect(tc.schema); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
