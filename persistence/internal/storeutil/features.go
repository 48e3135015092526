package storeutil

import (
	"encoding/json"
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
)

// PlannedFeature is one definition of a ReplaceServerFeatures call, checked and ready to write.
type PlannedFeature struct {
	persistence.FeatureDef
	Position int
}

// PlanFeatures checks defs and numbers each kind's features in listing order; a later duplicate of a kind and key
// is skipped. An unknown kind, an empty key or a definition that is not a JSON object is an error.
func PlanFeatures(defs []persistence.FeatureDef) ([]PlannedFeature, error) {
	out := make([]PlannedFeature, 0, len(defs))
	seen := make(map[[2]string]bool, len(defs))
	pos := map[string]int{}
	for _, d := range defs {
		switch d.Kind {
		case persistence.FeaturePrompt, persistence.FeatureResource, persistence.FeatureResourceTemplate:
		default:
			return nil, fmt.Errorf("feature kind %q: unknown", d.Kind)
		}
		if d.Key == "" {
			return nil, fmt.Errorf("%s without a name or URI", d.Kind)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.Definition, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s %q: definition is not a JSON object", d.Kind, d.Key)
		}
		k := [2]string{d.Kind, d.Key}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, PlannedFeature{FeatureDef: d, Position: pos[d.Kind]})
		pos[d.Kind]++
	}
	return out, nil
}
