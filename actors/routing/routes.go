package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// ErrToolNotFound means no tool answers to the name (404 TOOL_NOT_FOUND).
var ErrToolNotFound = errors.New("tool not found")

// AmbiguousToolError means an original tool name exists on several servers (400 TOOL_AMBIGUOUS).
type AmbiguousToolError struct {
	Name      string
	ServerIDs []string
}

func (e *AmbiguousToolError) Error() string {
	return fmt.Sprintf("tool name %q is provided by %d servers; use the namespaced name or server_id", e.Name, len(e.ServerIDs))
}

// UnavailableError means the server is neither CONNECTED nor DEGRADED (503 SERVER_UNAVAILABLE with the server).
type UnavailableError struct {
	Server ServerEntry
	// Detail says why, when there is more to say than the status (empty: "Server unavailable: <name>").
	Detail string
	// RetryAfter, when set, is when to try again (Retry-After).
	RetryAfter time.Duration
}

func (e *UnavailableError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	return fmt.Sprintf("Server unavailable: %s (%s)", e.Server.Name, e.Server.Status)
}

// Resolution strategies, reported in call metadata.
const (
	StrategyExplicitServer    = "explicit_server"
	StrategyNamespaceResolved = "namespace_resolved"
	StrategyLookupResolved    = "lookup_resolved"
	StrategyAlias             = "alias"
)

// ServerEntry is what the routing table knows of a server.
type ServerEntry struct {
	ID     string
	Name   string
	Status string
	// PerUser: the server runs each caller's calls on the caller's own session (credential_mode per_user).
	PerUser bool
}

// ToolEntry is one routable tool: its stored definition and the client-safe alias the MCP endpoint exposes. The
// stored definition is the router's own row, shared by every routing table that has the tool and by the MCP
// endpoint (a tool's text is held once: at 10,000 tools it is most of the routing state): never modify it.
type ToolEntry struct {
	*persistence.Tool
	ServerName string
	Alias      string

	// Exposed is the name an admin's override gives the tool ("" none): it is then the listed alias.
	Exposed string

	plain, hashed string     // the tool's plain and hashed aliases (see assignAliases), computed once per tool
	sameOriginal  *ToolEntry // the next tool with the same original name (byOriginal)
	pos           int        // index in RouteTable.ordered (ProfileView.members)
}

// Route is where a tool call goes.
type Route struct {
	ServerID     string
	ServerName   string
	ServerStatus string
	Tool         string // the original name the backend knows
	Name         string // the namespaced name
	Strategy     string
}

// RouteTable is an immutable snapshot of every server and tool, rebuilt by the router actor on every change and
// read without locks on the call path: resolving a name never touches the database.
type RouteTable struct {
	servers    map[string]ServerEntry // by id
	byName     map[string]string      // server name -> id
	tools      map[string]*ToolEntry  // namespaced name -> tool
	byOriginal map[string]*ToolEntry  // original name -> the first of the tools with it (then sameOriginal)
	byAlias    map[string]*ToolEntry
	byID       map[int64]*ToolEntry
	// extraAlias holds each tool's hashed alias where it is not the listed one (see assignAliases).
	extraAlias map[string]*ToolEntry
	ordered    []ToolEntry // by namespaced name; the maps point into it
	sep        string      // the alias separator the aliases were made with
	version    uint64
	// profiles are the profiles with their tool sets; clients maps a client token's name to its profiles, subjects
	// an OAuth subject to its profiles, claims a claim's name and value to the profiles bound to them.
	profiles map[string]*ProfileView
	clients  map[string][]string
	subjects map[string][]string
	claims   map[string]map[string][]string
	// curated are the servers whose curation changes what clients are served (a filter, overrides, pinning).
	curated map[string]bool
	// features: the servers' prompts, resources and resource templates (routes_features.go; nil: none).
	features *FeatureTable
	// served is the version of each server's served tools the table holds (SetServedVersions; nil: none).
	served map[string]uint64
	// stored are each loaded server's stored tools, as an admin reads them (Builder; nil: none).
	stored map[string][]persistence.Tool
}

// StoredTools are a server's tools as stored, in the store's order (by name): what an admin reads of them, the
// tools its curation hides or withholds included, with their listed definitions and no overrides applied, in the
// routed form (Definition without name, description and input schema). ok is false when the router has not
// loaded the server (not registered, or registered after this table). The rows must not be modified.
func (t *RouteTable) StoredTools(serverID string) (tools []persistence.Tool, ok bool) {
	tools, ok = t.stored[serverID]
	return tools, ok
}

// Version increases with every rebuild.
func (t *RouteTable) Version() uint64 { return t.version }

// Server returns the server with this id.
func (t *RouteTable) Server(id string) (ServerEntry, bool) {
	s, ok := t.servers[id]
	return s, ok
}

// ServerByName returns the server with this name.
func (t *RouteTable) ServerByName(name string) (ServerEntry, bool) {
	id, ok := t.byName[name]
	if !ok {
		return ServerEntry{}, false
	}
	return t.servers[id], true
}

// Servers lists every server, by name.
func (t *RouteTable) Servers() []ServerEntry {
	out := make([]ServerEntry, 0, len(t.servers))
	for _, s := range t.servers {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Callable lists the tools of servers that execute calls (CONNECTED or DEGRADED), by namespaced name.
func (t *RouteTable) Callable() []*ToolEntry {
	out := make([]*ToolEntry, 0, len(t.ordered))
	for i := range t.ordered {
		if e := &t.ordered[i]; CallableStatus(t.servers[e.SourceServerID].Status) {
			out = append(out, e)
		}
	}
	return out
}

// Entries are every tool of the table, callable or not, by namespaced name. The slice is the table's own: read
// only.
func (t *RouteTable) Entries() []ToolEntry { return t.ordered }

// Tool returns a tool by namespaced name or alias.
func (t *RouteTable) Tool(name string) (*ToolEntry, bool) {
	if e, ok := t.tools[name]; ok {
		return e, true
	}
	return t.alias(name)
}

// alias finds a tool by its listed alias, or by its hashed alias when that is not the listed one.
func (t *RouteTable) alias(name string) (*ToolEntry, bool) {
	if e, ok := t.byAlias[name]; ok {
		return e, true
	}
	e, ok := t.extraAlias[name]
	return e, ok
}

func (t *RouteTable) route(e *ToolEntry, strategy string) Route {
	s := t.servers[e.SourceServerID]
	return Route{ServerID: s.ID, ServerName: s.Name, ServerStatus: s.Status, Tool: e.OriginalName, Name: e.Name, Strategy: strategy}
}

// Resolve finds where a call goes, in the order of logic-contract.md: an explicit server id; a namespaced name
// `{server}.{tool}` (only the first dot separates, EC-002); then the original name, which must be unique; the
// MCP endpoint's client-safe alias is accepted too. An unknown server id wraps persistence.ErrNotFound.
func (t *RouteTable) Resolve(name, serverID string) (Route, error) {
	if serverID != "" {
		s, ok := t.servers[serverID]
		if !ok {
			return Route{}, fmt.Errorf("server %s: %w", serverID, persistence.ErrNotFound)
		}
		if e, ok := t.tools[s.Name+"."+name]; ok {
			return t.route(e, StrategyExplicitServer), nil
		}
		if e, ok := t.tools[name]; ok && e.SourceServerID == serverID {
			return t.route(e, StrategyExplicitServer), nil
		}
		return Route{}, fmt.Errorf("tool %q on server %s: %w", name, s.Name, ErrToolNotFound)
	}
	if e, ok := t.tools[name]; ok {
		return t.route(e, StrategyNamespaceResolved), nil
	}
	if server, _, found := strings.Cut(name, "."); found {
		if _, known := t.byName[server]; known {
			return Route{}, fmt.Errorf("tool %q: %w", name, ErrToolNotFound)
		}
	}
	if e, ok := t.alias(name); ok {
		return t.route(e, StrategyAlias), nil
	}
	switch c := t.byOriginal[name]; {
	case c == nil:
		return Route{}, fmt.Errorf("tool %q: %w", name, ErrToolNotFound)
	case c.sameOriginal == nil:
		return t.route(c, StrategyLookupResolved), nil
	default:
		var ids []string
		for e := c; e != nil; e = e.sameOriginal {
			ids = append(ids, e.SourceServerID)
		}
		sort.Strings(ids)
		return Route{}, &AmbiguousToolError{Name: name, ServerIDs: ids}
	}
}

// IsMetaToolName reports whether name is one of the MCP endpoint's own tools. They are not namespaced, so no
// backend tool may take one as its alias, whatever the alias separator makes of a server and tool name.
func IsMetaToolName(name string) bool {
	switch name {
	case "add_mcp_server", "remove_mcp_server", "list_mcp_servers", "connect_mcp_server", "disconnect_mcp_server",
		"get_server_status", "search_aggregated_tools", "execute_external_tool", "manage_tool_curation":
		return true
	}
	return false
}

// RoutedTool is a stored tool as the routing table keeps it: its definition without the name, description and
// input schema, which the entry already holds in its own fields (the MCP endpoint takes those from there), so that
// the text of a tool is held once and not twice. A definition that cannot be read is kept as it is.
func RoutedTool(t persistence.Tool) persistence.Tool {
	if len(t.Definition) == 0 {
		return t
	}
	var def map[string]json.RawMessage
	if err := json.Unmarshal(t.Definition, &def); err != nil {
		return t
	}
	delete(def, "name")
	delete(def, "description")
	delete(def, "inputSchema")
	if len(def) == 0 {
		t.Definition = nil
		return t
	}
	if raw, err := json.Marshal(def); err == nil {
		t.Definition = raw
	}
	return t
}

// BuildRouteTable makes the router's next table (see buildRouteTable) with ft as its prompts and resources (nil:
// none): the router rebuilds a feature table only when the servers' features or names change, and tables share it.
func BuildRouteTable(servers map[string]ServerEntry, tools map[string][]persistence.Tool, sep string, version uint64, prev *RouteTable, rc *Curation, ft *FeatureTable) *RouteTable {
	t := buildRouteTable(servers, tools, sep, version, prev, rc)
	t.features = ft
	return t
}

// buildRouteTable makes a snapshot from the router's per-server state. prev is the table it replaces (nil at
// start): aliases are assigned so that an alias, once given to a tool, keeps meaning that tool for as long as the
// tool exists. A client or model holding an older tools/list must never reach another tool by an old alias. The
// entries point at the rows of tools (which must not change afterwards) and are allocated together, as are the
// maps, sized once: a table is rebuilt on every change, and at 10,000 tools it is that many entries.
//
// rc (nil: none) gives overridden tools their exposed names and the profiles their tool sets.
func buildRouteTable(servers map[string]ServerEntry, tools map[string][]persistence.Tool, sep string, version uint64, prev *RouteTable, rc *Curation) *RouteTable {
	n := 0
	for id, list := range tools {
		if _, ok := servers[id]; ok {
			n += len(list)
		}
	}
	t := &RouteTable{
		servers: make(map[string]ServerEntry, len(servers)), byName: make(map[string]string, len(servers)),
		tools: make(map[string]*ToolEntry, n), byOriginal: make(map[string]*ToolEntry, n), byAlias: make(map[string]*ToolEntry, n),
		byID: make(map[int64]*ToolEntry, n), ordered: make([]ToolEntry, 0, n), sep: sep, version: version,
	}
	for id, s := range servers {
		t.servers[id] = s
		t.byName[s.Name] = id
	}
	for id, list := range tools {
		s, ok := servers[id]
		if !ok {
			continue
		}
		for i := range list {
			t.ordered = append(t.ordered, ToolEntry{Tool: &list[i], ServerName: s.Name})
		}
	}
	slices.SortFunc(t.ordered, func(a, b ToolEntry) int { return strings.Compare(a.Name, b.Name) })
	for i := range t.ordered {
		e := &t.ordered[i]
		e.pos = i
		if rc != nil {
			e.Exposed = rc.Servers[e.SourceServerID].ExposedName(e.OriginalName)
		}
		t.tools[e.Name] = e
		t.byID[e.ID] = e
		if first := t.byOriginal[e.OriginalName]; first != nil {
			e.sameOriginal, first.sameOriginal = first.sameOriginal, e
		} else {
			t.byOriginal[e.OriginalName] = e
		}
	}
	t.assignAliases(sep, prev)
	t.buildProfiles(rc)
	if rc != nil {
		for id, c := range rc.Servers {
			if _, ok := servers[id]; ok && !c.Plain() {
				if t.curated == nil {
					t.curated = map[string]bool{}
				}
				t.curated[id] = true
			}
		}
	}
	return t
}

// assignAliases gives every tool its client-safe alias. Rules, in order:
//  1. A tool keeps the alias it had in prev when that alias is still one of its own (its plain alias, or its
//     hashed one) and is not a meta-tool name: an alias never moves to another tool while its tool exists.
//  2. The other tools claim their plain alias oldest first (by database id, which only grows, so the order is
//     the same after a restart): a collision gives the NEWCOMER the changed name.
//  3. A tool whose plain alias is taken or reserved gets its hashed alias (the plain one shortened, with a hash
//     of its canonical name).
//
// Every tool's hashed alias also resolves to it (byAlias) when no other tool holds that name, so a client that
// learnt a hashed alias during a collision keeps reaching the same tool after the collision is gone. A tool's
// plain and hashed aliases depend only on its names and the separator: they are taken over from prev, not
// computed (and allocated) again for every table.
func (t *RouteTable) assignAliases(sep string, prev *RouteTable) {
	var pending []*ToolEntry
	// 0. An admin's exposed name (an override) is the tool's alias before anything else: it was checked unique
	// when it was written.
	for i := range t.ordered {
		if e := &t.ordered[i]; e.Exposed != "" && !IsMetaToolName(e.Exposed) && t.byAlias[e.Exposed] == nil {
			e.Alias = e.Exposed
			t.byAlias[e.Exposed] = e
		}
	}
	for i := range t.ordered {
		e := &t.ordered[i]
		var old *ToolEntry
		if prev != nil {
			old = prev.byID[e.ID]
		}
		if old != nil && prev.sep == sep && old.Name == e.Name && old.ServerName == e.ServerName && old.OriginalName == e.OriginalName {
			e.plain, e.hashed = old.plain, old.hashed
		} else {
			e.plain = Alias(e.ServerName, e.OriginalName, sep)
			e.hashed = hashedAlias(e.plain, e.Name)
		}
		if e.Alias != "" {
			continue // exposed
		}
		if old != nil && old.Alias != "" && !IsMetaToolName(old.Alias) && t.byAlias[old.Alias] == nil &&
			(old.Alias == e.plain || old.Alias == e.hashed) {
			e.Alias = old.Alias
			t.byAlias[old.Alias] = e
			continue
		}
		pending = append(pending, e)
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].ID < pending[j].ID })
	for _, e := range pending {
		a := e.plain
		if _, taken := t.byAlias[a]; taken || IsMetaToolName(a) {
			a = e.hashed
			for n := 2; t.byAlias[a] != nil; n++ { // a hash collision: practically never, but never share a name
				a = hashedAlias(a, fmt.Sprintf("%s#%d", e.Name, n))
			}
		}
		e.Alias = a
		t.byAlias[a] = e
	}
	// Secondary names: each tool's hashed alias, unless it is another tool's listed alias; an exposed tool's plain
	// alias too (clients that listed the tools before the override keep reaching it).
	for i := range t.ordered {
		e := &t.ordered[i]
		if p := e.plain; e.Exposed != "" && p != e.Alias && t.byAlias[p] == nil && t.extraAlias[p] == nil && !IsMetaToolName(p) {
			if t.extraAlias == nil {
				t.extraAlias = make(map[string]*ToolEntry, len(t.ordered))
			}
			t.extraAlias[p] = e
		}
		if h := e.hashed; h != e.Alias && t.byAlias[h] == nil && !IsMetaToolName(h) {
			if t.extraAlias == nil {
				t.extraAlias = make(map[string]*ToolEntry, len(t.ordered))
			}
			t.extraAlias[h] = e
		}
	}
}

// MaxAliasLength is the longest tool name many MCP clients accept (^[a-zA-Z0-9_-]{1,64}$).
const MaxAliasLength = 64

// Alias is the client-safe name of a tool on the MCP endpoint: server and tool joined by sep, every character
// outside [a-zA-Z0-9_-] replaced by '_', and past 64 characters shortened deterministically with a hash suffix.
func Alias(server, tool, sep string) string {
	raw := server + sep + tool
	if len(raw) <= MaxAliasLength && clientSafe(raw) {
		return raw
	}
	s := sanitize(raw)
	if len(s) <= MaxAliasLength {
		return s
	}
	return hashedAlias(s, server+"."+tool)
}

func hashedAlias(base, key string) string {
	sum := sha256.Sum256([]byte(key))
	suffix := "_" + hex.EncodeToString(sum[:])[:8]
	base = sanitize(base)
	if len(base) > MaxAliasLength-len(suffix) {
		base = base[:MaxAliasLength-len(suffix)]
	}
	return base + suffix
}

func clientSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return len(s) > 0
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// NewRouteTable builds a table from a list of servers and their stored tools (tests and tools that build a table
// without the router actor).
func NewRouteTable(servers []ServerEntry, tools []persistence.Tool, sep string) *RouteTable {
	sm := make(map[string]ServerEntry, len(servers))
	for _, s := range servers {
		sm[s.ID] = s
	}
	tm := map[string][]persistence.Tool{}
	for _, t := range tools {
		tm[t.SourceServerID] = append(tm[t.SourceServerID], t)
	}
	return buildRouteTable(sm, tm, sep, 1, nil, nil)
}

// ToolCounts returns how many tools are stored for all servers and how many of them are classified.
func (t *RouteTable) ToolCounts() (total, classified int) { return t.ToolCountsWhere(nil) }

// ToolCountsWhere is ToolCounts over the servers keep accepts (nil: all).
func (t *RouteTable) ToolCountsWhere(keep func(serverID string) bool) (total, classified int) {
	for i := range t.ordered {
		if keep != nil && !keep(t.ordered[i].SourceServerID) {
			continue
		}
		total++
		if t.ordered[i].IsClassified {
			classified++
		}
	}
	return total, classified
}

// ToolByID returns a tool by its database id.
func (t *RouteTable) ToolByID(id int64) (*ToolEntry, bool) {
	e, ok := t.byID[id]
	return e, ok
}

// CompactTools re-homes one server's stored tool rows (fresh from the store, each string and JSON document its own
// allocation, about nine per row) into as few heap objects as possible, for as long as the router keeps them. A
// tool's strings (names, description, definition hash) become parts of one string and its JSON (input schema,
// routed definition) parts of one byte slice; an original name is a suffix of the namespaced name; the server id,
// classification states, skill lists and primary skills are shared, and the change times held in one array. A tool
// whose text did not change since prev (the rows the router held before: same id, names and definition hash)
// keeps prev's text instead of a new copy: the MCP endpoint holds on to the text of the tools it lists, and a
// reload after every classification must not give it a second copy. The blocks are per tool, not per server, so
// that a changed tool never keeps its server's other, older text alive. The JSON parts are capped at their length,
// so appending to one copies it. It returns the rows in a slice of their own, exactly sized.
func CompactTools(serverID string, stored, prev []persistence.Tool) []persistence.Tool {
	rows := slices.Clone(stored[:len(stored):len(stored)])
	before := make(map[int64]*persistence.Tool, len(prev))
	changed := 0
	for i := range prev {
		before[prev[i].ID] = &prev[i]
	}
	for i := range rows {
		if rows[i].ChangedAt != nil {
			changed++
		}
	}
	times := make([]time.Time, 0, changed)
	shared := map[string]string{}
	str := func(s string) string {
		if v, ok := shared[s]; ok {
			return v
		}
		shared[s] = s
		return s
	}
	skillSets := map[string][]string{}
	primaries := map[string]*string{}
	for i := range rows {
		t := &rows[i]
		if p := before[t.ID]; p != nil && p.Name == t.Name && p.OriginalName == t.OriginalName && p.DefinitionHash == t.DefinitionHash &&
			p.Description == t.Description && string(p.InputSchema) == string(t.InputSchema) && string(p.Definition) == string(t.Definition) {
			t.Name, t.OriginalName, t.Description, t.DefinitionHash = p.Name, p.OriginalName, p.Description, p.DefinitionHash
			t.InputSchema, t.Definition = p.InputSchema, p.Definition
		} else {
			compactText(t)
		}
		t.SourceServerID = serverID
		t.ClassificationState = str(t.ClassificationState)
		if t.SkillIDs != nil {
			key := strings.Join(t.SkillIDs, "\x00")
			set, ok := skillSets[key]
			if !ok {
				set = make([]string, len(t.SkillIDs))
				for j, id := range t.SkillIDs {
					set[j] = str(id)
				}
				skillSets[key] = set
			}
			t.SkillIDs = set
		}
		if t.PrimarySkillID != nil {
			p, ok := primaries[*t.PrimarySkillID]
			if !ok {
				v := str(*t.PrimarySkillID)
				p = &v
				primaries[v] = p
			}
			t.PrimarySkillID = p
		}
		if t.ChangedAt != nil {
			times = append(times, *t.ChangedAt) // within the capacity: never moves
			t.ChangedAt = &times[len(times)-1]
		}
	}
	return rows
}

// compactText copies a tool's strings into one string and its JSON documents into one byte slice.
func compactText(t *persistence.Tool) {
	suffix := strings.HasSuffix(t.Name, "."+t.OriginalName)
	var b strings.Builder
	b.Grow(len(t.Name) + len(t.OriginalName) + len(t.Description) + len(t.DefinitionHash))
	b.WriteString(t.Name)
	if !suffix {
		b.WriteString(t.OriginalName)
	}
	b.WriteString(t.Description)
	b.WriteString(t.DefinitionHash)
	text, at := b.String(), 0
	take := func(n int) string {
		at += n
		return text[at-n : at]
	}
	name := take(len(t.Name))
	if suffix {
		t.OriginalName = name[len(name)-len(t.OriginalName):]
	} else {
		t.OriginalName = take(len(t.OriginalName))
	}
	t.Name = name
	t.Description = take(len(t.Description))
	t.DefinitionHash = take(len(t.DefinitionHash))
	if t.InputSchema == nil && t.Definition == nil {
		return
	}
	js := make([]byte, 0, len(t.InputSchema)+len(t.Definition))
	part := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return nil
		}
		start := len(js)
		js = append(js, raw...) // within the capacity: never moves
		return js[start:len(js):len(js)]
	}
	t.InputSchema, t.Definition = part(t.InputSchema), part(t.Definition)
}

// CallableStatus reports whether a server in this state executes tool calls (DEGRADED does, with a warning).
func CallableStatus(status string) bool {
	return status == persistence.StatusConnected || status == persistence.StatusDegraded
}
