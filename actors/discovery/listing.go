// Package discovery is the work of the discovery actor: what a backend lists (tools, prompts, resources and
// resource templates) turned into the rows the store keeps, the definition pins decided before the tools are
// stored, and the notice of what changed. It exists so that this work is read and tested on its own: the actor
// (package actors) only schedules runs; a Worker does them through a few functions it is given at construction
// (Ports: list through a server actor, the lease that fences the writes, the store, the event stream, the pin
// hashes), never through the actor system. It imports nothing of package actors.
package discovery

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// featuresKeyPrefix marks the key of a server's feature discovery (FeaturesKey).
const featuresKeyPrefix = "features:"

// FeaturesKey is the key of a server's discovery of prompts and resources; a server's tool discovery is keyed by
// its id. The two coalesce and are spaced apart from each other.
func FeaturesKey(id string) string { return featuresKeyPrefix + id }

// SplitKey tells the server id a key names and whether it is the key of a feature discovery.
func SplitKey(key string) (id string, features bool) {
	if id, ok := strings.CutPrefix(key, featuresKeyPrefix); ok {
		return id, true
	}
	return key, false
}

// ToolListing is what a server's tools/list becomes: the tools to store, in listing order, and what was left out.
type ToolListing struct {
	Defs []persistence.ToolDef
	// Unnamed counts the tools listed without a usable name (not JSON, or no name).
	Unnamed int
	// Looped are the tools that passed through this daemon already (A->B->...->A), and LoopPath the provenance
	// path of the last of them: keeping them would make each aggregator re-expose the other's copies without end.
	Looped   []string
	LoopPath []string
	// Truncated counts the tools dropped beyond the per-server cap (the last ones in listing order).
	Truncated int
}

// Tools reads a server's listed tools (each a JSON tool definition) into the rows to store: a missing or null
// input schema becomes an empty object schema, tools of this daemon (instanceID on their provenance path) are
// dropped, and beyond limit (> 0) only the first ones are kept.
func Tools(listed [][]byte, instanceID string, limit int) ToolListing {
	out := ToolListing{Defs: make([]persistence.ToolDef, 0, len(listed))}
	for _, raw := range listed {
		var t struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"inputSchema"`
			Meta        map[string]any  `json:"_meta"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || t.Name == "" {
			out.Unnamed++
			continue
		}
		if path := backend.ViaPath(t.Meta); slices.Contains(path, instanceID) {
			out.Looped = append(out.Looped, t.Name)
			out.LoopPath = path
			continue
		}
		if len(t.InputSchema) == 0 || string(t.InputSchema) == "null" {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		out.Defs = append(out.Defs, persistence.ToolDef{OriginalName: t.Name, Description: t.Description, InputSchema: t.InputSchema, Definition: raw})
	}
	if limit > 0 && len(out.Defs) > limit {
		out.Truncated = len(out.Defs) - limit
		out.Defs = out.Defs[:limit]
	}
	return out
}

// FeatureListing is what a server's prompts, resources and resource templates become.
type FeatureListing struct {
	Defs []persistence.FeatureDef
	// Unusable counts the items listed without a usable name or URI.
	Unusable int
	// Reserved counts, by kind, the resources and templates listed under the aggregator's own URI scheme
	// (routing.RewrittenURIScheme): listing them would capture reads of another server's URIs.
	Reserved map[string]int
}

// Features reads a server's listed prompts (keyed by name), resources (by uri) and resource templates (by
// uriTemplate) into the rows to store.
func Features(prompts, resources, templates [][]byte) FeatureListing {
	out := FeatureListing{Defs: make([]persistence.FeatureDef, 0, len(prompts)+len(resources)+len(templates)), Reserved: map[string]int{}}
	add := func(kind, field string, items [][]byte) {
		for _, raw := range items {
			var obj map[string]json.RawMessage
			var key string
			if json.Unmarshal(raw, &obj) != nil || json.Unmarshal(obj[field], &key) != nil || key == "" {
				out.Unusable++
				continue
			}
			if kind != persistence.FeaturePrompt && routing.IsReservedURI(key) {
				out.Reserved[kind]++
				continue
			}
			out.Defs = append(out.Defs, persistence.FeatureDef{Kind: kind, Key: key, Definition: raw})
		}
	}
	add(persistence.FeaturePrompt, "name", prompts)
	add(persistence.FeatureResource, "uri", resources)
	add(persistence.FeatureResourceTemplate, "uriTemplate", templates)
	return out
}

// Listed is what pinning decides from: each tool's name, definition and pin hash (hash, for example
// routing.PinHashes.Def). A definition whose hash cannot be computed is left out: never approved, it is withheld
// like a new tool.
func Listed(server string, defs []persistence.ToolDef, hash func(server, name string, def []byte) (string, error)) []curation.Listed {
	out := make([]curation.Listed, 0, len(defs))
	for _, d := range defs {
		h, err := hash(server, d.OriginalName, d.Definition)
		if err != nil {
			continue
		}
		out = append(out, curation.Listed{Name: d.OriginalName, Def: d.Definition, Hash: h})
	}
	return out
}

// PinCounts are a pin decision's figures: the changes pending approval after it and those it newly held, by kind.
func PinCounts(d curation.Decision) (pending int, held map[string]int) {
	held = map[string]int{}
	for _, h := range d.Held {
		held[h.Kind]++
	}
	for _, p := range d.Pins {
		if p.PendingHash != "" {
			pending++
		}
	}
	return pending, held
}
