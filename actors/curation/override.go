package curation

import (
	"encoding/json"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
)

// ApplyDefinition returns def (a tool definition as JSON, possibly without name, description and input schema)
// with the override's annotations merged into its "annotations" object: a hint the override sets replaces the
// backend's, the others stay. Nothing to merge returns def itself.
func ApplyDefinition(def json.RawMessage, o *persistence.ToolOverride) (json.RawMessage, error) {
	if o == nil || o.Annotations == nil {
		return def, nil
	}
	m := map[string]json.RawMessage{}
	if len(def) > 0 {
		if err := json.Unmarshal(def, &m); err != nil {
			return nil, fmt.Errorf("decode tool definition: %w", err)
		}
		if m == nil {
			m = map[string]json.RawMessage{}
		}
	}
	ann := map[string]json.RawMessage{}
	if raw, ok := m["annotations"]; ok && len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &ann); err != nil || ann == nil {
			ann = map[string]json.RawMessage{}
		}
	}
	a := o.Annotations
	set := func(key string, v any) {
		if b, err := json.Marshal(v); err == nil {
			ann[key] = b
		}
	}
	if a.Title != nil {
		set("title", *a.Title)
	}
	if a.ReadOnlyHint != nil {
		set("readOnlyHint", *a.ReadOnlyHint)
	}
	if a.DestructiveHint != nil {
		set("destructiveHint", *a.DestructiveHint)
	}
	if a.IdempotentHint != nil {
		set("idempotentHint", *a.IdempotentHint)
	}
	if a.OpenWorldHint != nil {
		set("openWorldHint", *a.OpenWorldHint)
	}
	b, err := json.Marshal(ann)
	if err != nil {
		return nil, fmt.Errorf("encode annotations: %w", err)
	}
	m["annotations"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode tool definition: %w", err)
	}
	return out, nil
}

// Overrides are a server's overrides by original tool name.
type Overrides map[string]*persistence.ToolOverride

// NewOverrides indexes a list of overrides (of one server) by original name.
func NewOverrides(list []persistence.ToolOverride) Overrides {
	out := make(Overrides, len(list))
	for i := range list {
		out[list[i].OriginalName] = &list[i]
	}
	return out
}
