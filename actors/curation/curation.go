// Package curation holds the rules of tool curation that do not depend on the actors: which tools a server's
// filter hides, what an override makes of a tool, which tools a profile holds, and definition pinning (what a
// tool's pinned hash covers, which definition is served while a change waits for approval, and what a discovery
// does to the pins). The router applies them when it builds a routing table, the discovery when it stores what a
// backend listed, and the HTTP validators check admins' input with the same pattern rules: one implementation, so
// that what an admin is told at write time is what the routing table does.
package curation

import (
	"fmt"
	"path"
	"slices"

	"github.com/mcpgw/aggregator/persistence"
)

// Limits of curation input (checked at write time; the validators report them as 422).
const (
	MaxPatterns      = 200
	MaxPatternLength = 256
	MaxSelectors     = 100
	MaxDescription   = 8192
	MaxNameLength    = 64
)

// CheckPattern reports whether p is a usable tool-name pattern: non-empty, at most MaxPatternLength bytes, and
// valid for path.Match (`*` any run of characters except '/', `?` one character, `[...]` a class, `\` escapes).
func CheckPattern(p string) error {
	if p == "" {
		return fmt.Errorf("pattern is empty")
	}
	if len(p) > MaxPatternLength {
		return fmt.Errorf("pattern is longer than %d bytes", MaxPatternLength)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("pattern %q is not a valid glob: %w", p, err)
	}
	return nil
}

// Match reports whether name matches any of patterns (invalid patterns match nothing).
func Match(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// Filter is a server's tool filter, ready to apply.
type Filter struct {
	mode     string
	patterns []string
}

// NewFilter makes a Filter from its stored form; a mode other than allow or deny hides nothing.
func NewFilter(f persistence.ToolFilter) Filter {
	return Filter{mode: f.Mode, patterns: slices.Clone(f.Patterns)}
}

// Active reports whether the filter may hide anything.
func (f Filter) Active() bool {
	return f.mode == persistence.FilterAllow || f.mode == persistence.FilterDeny
}

// Hides reports whether the tool with this original name (the backend's own name) is hidden: with an allow list,
// every tool no pattern matches; with a deny list, every tool a pattern matches.
func (f Filter) Hides(original string) bool {
	switch f.mode {
	case persistence.FilterAllow:
		return !Match(f.patterns, original)
	case persistence.FilterDeny:
		return Match(f.patterns, original)
	}
	return false
}

// ClientSafe reports whether name is a tool name every MCP client accepts (^[a-zA-Z0-9_-]{1,64}$).
func ClientSafe(name string) bool {
	if name == "" || len(name) > MaxNameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
