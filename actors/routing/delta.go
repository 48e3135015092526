package routing

import (
	"bytes"
	"slices"

	"github.com/mcpgw/aggregator/persistence"
)

// ServedDelta is what changed in one server's served tools (its stored tools with its curation applied: what the
// routing table holds and clients are served) from one version to the next. The router is its one writer: it
// derives a server's served tools once per change and hands every other reader (the indexer, the classifier) this
// delta instead of letting each of them read the store again. Versions count per server from 1 and only grow; a
// reader that sees a gap (or starts late) asks the router for a Full delta.
type ServedDelta struct {
	ServerID   string
	ServerName string
	Version    uint64
	// Full: Added lists every served tool of the server (the other lists are empty), and a reader drops whatever
	// it holds of the server that is not in it.
	Full    bool
	Added   []ServedTool
	Changed []ServedTool
	// Removed are the ids of the tools no longer served.
	Removed []int64
}

// Empty reports whether the delta changes nothing.
func (d *ServedDelta) Empty() bool {
	return !d.Full && len(d.Added) == 0 && len(d.Changed) == 0 && len(d.Removed) == 0
}

// ServedTool is one served tool in a delta: the router's row (served text, DefinitionHash, classification), shared
// with the routing table and never modified, and what else a reader needs of the server's curation.
type ServedTool struct {
	Tool *persistence.Tool
	// ExposedName is the override's exposed name of the tool ("" none).
	ExposedName string
	// Redefined (Changed only): the served text (description or input schema) differs from the previous version's.
	Redefined bool
}

// DiffServed is the delta from a server's served tools before to after (rows as the router keeps them, both
// ordered as it keeps them); exposed gives a tool's exposed name. The delta's rows point into after.
func DiffServed(serverID, serverName string, version uint64, before, after []persistence.Tool, exposed func(original string) string) *ServedDelta {
	d := &ServedDelta{ServerID: serverID, ServerName: serverName, Version: version}
	old := make(map[int64]*persistence.Tool, len(before))
	for i := range before {
		old[before[i].ID] = &before[i]
	}
	for i := range after {
		t := &after[i]
		p, known := old[t.ID]
		delete(old, t.ID)
		switch {
		case !known:
			d.Added = append(d.Added, ServedTool{Tool: t, ExposedName: exposed(t.OriginalName)})
		case !sameServed(p, t):
			d.Changed = append(d.Changed, ServedTool{Tool: t, ExposedName: exposed(t.OriginalName),
				Redefined: p.Description != t.Description || !bytes.Equal(p.InputSchema, t.InputSchema)})
		}
	}
	for i := range before {
		if _, gone := old[before[i].ID]; gone {
			d.Removed = append(d.Removed, before[i].ID)
		}
	}
	return d
}

// FullServed is the Full delta of a server's served tools.
func FullServed(serverID, serverName string, version uint64, tools []persistence.Tool, exposed func(original string) string) *ServedDelta {
	d := &ServedDelta{ServerID: serverID, ServerName: serverName, Version: version, Full: true, Added: make([]ServedTool, len(tools))}
	for i := range tools {
		d.Added[i] = ServedTool{Tool: &tools[i], ExposedName: exposed(tools[i].OriginalName)}
	}
	return d
}

// sameServed reports whether two rows of one tool serve the same: text, names, hash and classification.
func sameServed(a, b *persistence.Tool) bool {
	return a.Name == b.Name && a.OriginalName == b.OriginalName && a.DefinitionHash == b.DefinitionHash &&
		a.Description == b.Description && bytes.Equal(a.InputSchema, b.InputSchema) && bytes.Equal(a.Definition, b.Definition) &&
		a.IsExternal == b.IsExternal && a.IsClassified == b.IsClassified && a.ClassificationState == b.ClassificationState &&
		slices.Equal(a.SkillIDs, b.SkillIDs) && samePtr(a.PrimarySkillID, b.PrimarySkillID)
}

func samePtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// SetServedVersions records, before the table is published, the version of each server's served tools it holds
// (ServedDelta.Version; v is not modified afterwards): a reader that derived something from a server's tools at
// version N need not look at that server's entries again while the table says N.
func (t *RouteTable) SetServedVersions(v map[string]uint64) { t.served = v }

// ServedVersion is the version of a server's served tools in the table (0: not known).
func (t *RouteTable) ServedVersion(id string) uint64 { return t.served[id] }
