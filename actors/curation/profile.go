package curation

import (
	"slices"

	"github.com/mcpgw/aggregator/persistence"
)

// ToolView is what a profile selector looks at in a tool: its server's name, its names (the backend's original
// name, the namespaced {server}.{tool} and the alias clients see) and its skill ids.
type ToolView struct {
	Server       string
	OriginalName string
	Name         string
	Alias        string
	Skills       []string
}

// Holds reports whether the profile selects the tool: some selector matches it. A selector matches when every
// part it sets matches: its server (by name, exactly), any of its tool patterns (against any of the tool's three
// names), any of its skills. A selector that sets nothing matches nothing (a profile is opt-in). A selector may name
// a server that does not exist yet: it holds nothing until a server of that name is registered.
func Holds(p *persistence.Profile, t ToolView) bool {
	for i := range p.Selectors {
		if SelectorHolds(&p.Selectors[i], t) {
			return true
		}
	}
	return false
}

// SelectorHolds is Holds for one selector.
func SelectorHolds(s *persistence.ProfileSelector, t ToolView) bool {
	if s.Server == "" && len(s.Tools) == 0 && len(s.Skills) == 0 {
		return false
	}
	if s.Server != "" && s.Server != t.Server {
		return false
	}
	if len(s.Tools) > 0 && !Match(s.Tools, t.OriginalName) && !Match(s.Tools, t.Name) && !Match(s.Tools, t.Alias) {
		return false
	}
	if len(s.Skills) > 0 && !slices.ContainsFunc(s.Skills, func(k string) bool { return slices.Contains(t.Skills, k) }) {
		return false
	}
	return true
}
