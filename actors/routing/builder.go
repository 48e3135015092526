package routing

import (
	"maps"

	"github.com/mcpgw/aggregator/persistence"
)

// Builder is the router's state of the served catalogue, from which it builds each routing table: every server's
// entry (status from the events, registration from the store), its curation and served tools, the profiles, the
// features, the served tools loaded for servers still CONNECTING (staged: they enter with the next status), and
// the versioned deltas of the served tools owed to the readers with the next table. The router actor owns it and
// decides when to change it (in which order the loads and events apply); Builder holds what each change does. Not
// safe for concurrent use.
type Builder struct {
	sep      string
	versions *Versions
	pins     *PinHashes
	version  uint64
	servers  map[string]ServerEntry
	tools    map[string][]persistence.Tool
	// applied is the (lease epoch, sequence) of the newest status change applied per server: an older one (a late
	// notice from a process that owned the server before) is ignored.
	applied  map[string][2]int64
	curated  map[string]*ServerCuration
	profiles []persistence.Profile
	feats    FeatureState
	staged   map[string][]persistence.Tool
	// stored are each loaded server's stored tools (ServerRows.Stored), staged or not: what admin reads answer.
	// The tables share the map until it changes (copied then, like vers).
	stored      map[string][]persistence.Tool
	storedDirty bool
	// deltas are the deltas of the table being built, published with it; vers are the versions of the served tools
	// in the table (copied when one changes: tables share it).
	deltas    []*ServedDelta
	vers      map[string]uint64
	versDirty bool
}

// NewBuilder builds tables with the alias separator sep, issues the served tools' versions from versions and
// forgets a removed server's pin hashes in pins.
func NewBuilder(sep string, versions *Versions, pins *PinHashes) *Builder {
	return &Builder{sep: sep, versions: versions, pins: pins, servers: map[string]ServerEntry{}, tools: map[string][]persistence.Tool{},
		applied: map[string][2]int64{}, curated: map[string]*ServerCuration{}, staged: map[string][]persistence.Tool{},
		stored: map[string][]persistence.Tool{}}
}

// Server is a server's entry as the next table will hold it.
func (b *Builder) Server(id string) (ServerEntry, bool) {
	s, ok := b.servers[id]
	return s, ok
}

// Tools are a server's served tools as the next table will hold them (never modified: a load may read them).
func (b *Builder) Tools(id string) []persistence.Tool { return b.tools[id] }

// Stored are a server's stored tools as the next table will hold them (never modified: a load may read them).
func (b *Builder) Stored(id string) []persistence.Tool { return b.stored[id] }

// setStored makes tools the server's stored tools in the next table (remove: forget them).
func (b *Builder) setStored(id string, tools []persistence.Tool, remove bool) {
	if !b.storedDirty {
		b.stored, b.storedDirty = maps.Clone(b.stored), true
	}
	if b.stored == nil {
		b.stored = map[string][]persistence.Tool{}
	}
	if remove {
		delete(b.stored, id)
		return
	}
	b.stored[id] = tools
}

// StatusChange is a server's status change as the router applies it.
type StatusChange struct {
	ServerID, ServerName, To string
	// Epoch and Seq order the changes of one server across its owners (Epoch 0: unordered, always applied).
	Epoch, Seq int64
}

// ApplyStatus puts a status change in the next table; the server's staged tools enter with a status other than
// CONNECTING. The same change arrives twice on the owner's node (asked before it is stored, then published): the
// second, and any older one, changes nothing (false).
func (b *Builder) ApplyStatus(m StatusChange) bool {
	if m.Epoch > 0 {
		at := [2]int64{m.Epoch, m.Seq}
		if last, ok := b.applied[m.ServerID]; ok && (at[0] < last[0] || at[0] == last[0] && at[1] <= last[1]) {
			return false // older than what the table shows
		}
		b.applied[m.ServerID] = at
	}
	s, known := b.servers[m.ServerID]
	if known && s.Name == m.ServerName && s.Status == m.To {
		return false
	}
	s.ID, s.Name, s.Status = m.ServerID, m.ServerName, m.To
	b.servers[m.ServerID] = s
	if tools, ok := b.staged[m.ServerID]; ok && m.To != persistence.StatusConnecting {
		delete(b.staged, m.ServerID)
		b.setTools(m.ServerID, tools)
	}
	return true
}

// ApplyServer puts a server's loaded rows in the next table (registration: the load re-read its registration). A
// server no longer found is dropped; a known server keeps the status its events gave it (the row may lag them); the
// tools of a CONNECTING server are staged until its next status.
func (b *Builder) ApplyServer(id string, rows ServerRows, registration bool) {
	if !rows.Found {
		delete(b.servers, id)
		delete(b.tools, id)
		delete(b.staged, id)
		b.setStored(id, nil, true)
		return
	}
	old, known := b.servers[id]
	if registration || !known {
		status := rows.Server.Status
		if known && old.Status != "" {
			status = old.Status // events are the truth about live state; the row may lag them
		}
		b.servers[id] = ServerEntry{ID: rows.Server.ID, Name: rows.Server.Name, Status: status,
			PerUser: rows.Server.CredentialMode == persistence.CredentialPerUser}
	}
	b.curated[id] = rows.Curation
	b.setStored(id, rows.Stored, false)
	if b.servers[id].Status == persistence.StatusConnecting {
		b.staged[id] = rows.Tools
		return
	}
	delete(b.staged, id)
	b.setTools(id, rows.Tools)
}

// SetFeatures makes list a server's features (found false: the server is gone, its features are dropped).
func (b *Builder) SetFeatures(id string, list []persistence.Feature, found bool) {
	if !found {
		b.feats.Forget(id)
		return
	}
	b.feats.Set(id, list)
}

// SetProfiles makes ps every profile.
func (b *Builder) SetProfiles(ps []persistence.Profile) { b.profiles = ps }

// setTools makes tools the server's served tools in the next table and owes the readers their delta.
func (b *Builder) setTools(id string, tools []persistence.Tool) {
	before := b.tools[id]
	b.tools[id] = tools
	d := DiffServed(id, b.servers[id].Name, 0, before, tools, b.curated[id].ExposedName)
	if d.Empty() {
		return
	}
	d.Version = b.versions.Next(id)
	b.addDelta(d)
}

// addDelta owes the readers d with the next table, which holds its version.
func (b *Builder) addDelta(d *ServedDelta) {
	b.deltas = append(b.deltas, d)
	if !b.versDirty {
		b.vers, b.versDirty = maps.Clone(b.vers), true
	}
	if b.vers == nil {
		b.vers = map[string]uint64{}
	}
	b.vers[d.ServerID] = d.Version
}

// Remove forgets a removed server.
func (b *Builder) Remove(id string) {
	delete(b.staged, id)
	b.pins.ForgetServer(id)
	delete(b.servers, id)
	delete(b.tools, id)
	delete(b.applied, id)
	delete(b.curated, id)
	if _, ok := b.stored[id]; ok {
		b.setStored(id, nil, true)
	}
	if _, ok := b.vers[id]; ok {
		b.vers = maps.Clone(b.vers)
		delete(b.vers, id)
	}
	b.versions.Forget(id)
	b.feats.Forget(id)
}

// Reset replaces the state with a full load and owes the readers every server's tools anew (a Full delta: the
// table may have moved while the notices were missed).
func (b *Builder) Reset(c *Catalogue) {
	b.servers, b.curated, b.tools, b.profiles = c.Servers, c.Curated, c.Tools, c.Profiles
	b.stored, b.storedDirty = c.Stored, true // the next table takes the map; a change after it copies
	b.applied, b.staged = map[string][2]int64{}, map[string][]persistence.Tool{}
	b.feats.Reset(c.Features)
	for id, list := range b.tools {
		b.addDelta(FullServed(id, b.servers[id].Name, b.versions.Next(id), list, b.curated[id].ExposedName))
	}
}

// Snapshot is a Full delta of every server in the state at its current version.
func (b *Builder) Snapshot() []*ServedDelta {
	out := make([]*ServedDelta, 0, len(b.tools))
	for id, list := range b.tools {
		out = append(out, FullServed(id, b.servers[id].Name, b.versions.Current(id), list, b.curated[id].ExposedName))
	}
	return out
}

// Build is the next table (prev: the current one, whose unchanged parts it shares) and the deltas owed with it;
// the caller publishes the table first and then the deltas (Versions.Publish and its readers), so that a reader
// that has a delta finds its tools in the table.
func (b *Builder) Build(prev *RouteTable) (*RouteTable, []*ServedDelta) {
	b.version++
	t := BuildRouteTable(b.servers, b.tools, b.sep, b.version, prev, &Curation{Servers: b.curated, Profiles: b.profiles}, b.feats.Table(b.servers, b.sep))
	t.SetServedVersions(b.vers)
	t.stored = b.stored
	b.versDirty, b.storedDirty = false, false
	deltas := b.deltas
	b.deltas = nil
	return t, deltas
}
