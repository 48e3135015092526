package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

// resultBody answers the backend's result as it came, adding isError when absent and the metadata, and refuses
// anything but a JSON object.
func TestResultBody(t *testing.T) {
	meta := map[string]any{"routed_to": "srv", "total_time_ms": 1.5}
	tests := []struct {
		name, result string
		want         map[string]any // nil: an error
	}{
		{"empty object", `{}`, map[string]any{"isError": false, "metadata": map[string]any{"routed_to": "srv", "total_time_ms": 1.5}}},
		{"content", `{"content":[{"type":"text","text":"a \"isError\": {,}"}]}`, map[string]any{
			"content": []any{map[string]any{"type": "text", "text": `a "isError": {,}`}}, "isError": false,
			"metadata": map[string]any{"routed_to": "srv", "total_time_ms": 1.5}}},
		{"isError kept", ` {"isError":true,"content":[]} `, map[string]any{"isError": true, "content": []any{},
			"metadata": map[string]any{"routed_to": "srv", "total_time_ms": 1.5}}},
		{"nested isError is not the result's", `{"structuredContent":{"isError":true}}`, map[string]any{
			"structuredContent": map[string]any{"isError": true}, "isError": false,
			"metadata": map[string]any{"routed_to": "srv", "total_time_ms": 1.5}}},
		{"array", `[]`, nil},
		{"truncated", `{"content":`, nil},
		{"empty", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			metaJSON, _ := json.Marshal(meta)
			out, err := resultBody(json.RawMessage(tt.result), metaJSON)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("resultBody(%s) = %s, want an error", tt.result, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("answer %s is not JSON: %v", out, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("resultBody(%s) = %s, want %v", tt.result, out, tt.want)
			}
		})
	}
}
