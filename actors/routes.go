package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

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
}

// ToolEntry is one routable tool: its stored definition and the client-safe alias the MCP endpoint exposes.
type ToolEntry struct {
	persistence.Tool
	ServerName string
	Alias      string
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
	byOriginal map[string][]*ToolEntry
	byAlias    map[string]*ToolEntry
	byID       map[int64]*ToolEntry
	// extraAlias holds each tool's hashed alias where it is not the listed one (see assignAliases).
	extraAlias map[string]*ToolEntry
	ordered    []*ToolEntry // by namespaced name
	version    uint64
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
	for _, e := range t.ordered {
		if callable(t.servers[e.SourceServerID].Status) {
			out = append(out, e)
		}
	}
	return out
}

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
	switch c := t.byOriginal[name]; len(c) {
	case 0:
		return Route{}, fmt.Errorf("tool %q: %w", name, ErrToolNotFound)
	case 1:
		return t.route(c[0], StrategyLookupResolved), nil
	default:
		ids := make([]string, len(c))
		for i, e := range c {
			ids[i] = e.SourceServerID
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
		"get_server_status", "search_aggregated_tools", "execute_external_tool":
		return true
	}
	return false
}

// routedTool is a stored tool as the routing table keeps it: its definition without the name, description and
// input schema, which the entry already holds in its own fields (the MCP endpoint takes those from there), so that
// the text of a tool is held once and not twice. A definition that cannot be read is kept as it is.
func routedTool(t persistence.Tool) persistence.Tool {
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

// buildRouteTable makes a snapshot from the router's per-server state. prev is the table it replaces (nil at
// start): aliases are assigned so that an alias, once given to a tool, keeps meaning that tool for as long as the
// tool exists. A client or model holding an older tools/list must never reach another tool by an old alias.
func buildRouteTable(servers map[string]ServerEntry, tools map[string][]persistence.Tool, sep string, version uint64, prev *RouteTable) *RouteTable {
	t := &RouteTable{
		servers: make(map[string]ServerEntry, len(servers)), byName: make(map[string]string, len(servers)),
		tools: map[string]*ToolEntry{}, byOriginal: map[string][]*ToolEntry{}, byAlias: map[string]*ToolEntry{},
		byID: map[int64]*ToolEntry{}, version: version,
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
		for _, tool := range list {
			e := &ToolEntry{Tool: tool, ServerName: s.Name}
			t.tools[tool.Name] = e
			t.byID[tool.ID] = e
			t.byOriginal[tool.OriginalName] = append(t.byOriginal[tool.OriginalName], e)
			t.ordered = append(t.ordered, e)
		}
	}
	sort.Slice(t.ordered, func(i, j int) bool { return t.ordered[i].Name < t.ordered[j].Name })
	t.assignAliases(sep, prev)
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
// learnt a hashed alias during a collision keeps reaching the same tool after the collision is gone.
func (t *RouteTable) assignAliases(sep string, prev *RouteTable) {
	plain := make(map[*ToolEntry]string, len(t.ordered))
	var pending []*ToolEntry
	for _, e := range t.ordered {
		a := Alias(e.ServerName, e.OriginalName, sep)
		plain[e] = a
		if prev != nil {
			if old, ok := prev.byID[e.ID]; ok && old.Alias != "" && !IsMetaToolName(old.Alias) && t.byAlias[old.Alias] == nil &&
				(old.Alias == a || old.Alias == hashedAlias(a, e.Name)) {
				e.Alias = old.Alias
				t.byAlias[old.Alias] = e
				continue
			}
		}
		pending = append(pending, e)
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].ID < pending[j].ID })
	for _, e := range pending {
		a := plain[e]
		if _, taken := t.byAlias[a]; taken || IsMetaToolName(a) {
			a = hashedAlias(a, e.Name)
			for n := 2; t.byAlias[a] != nil; n++ { // a hash collision: practically never, but never share a name
				a = hashedAlias(a, fmt.Sprintf("%s#%d", e.Name, n))
			}
		}
		e.Alias = a
		t.byAlias[a] = e
	}
	// Secondary names: each tool's hashed alias, unless it is another tool's listed alias.
	for _, e := range t.ordered {
		if h := hashedAlias(plain[e], e.Name); h != e.Alias && t.byAlias[h] == nil && !IsMetaToolName(h) {
			if t.extraAlias == nil {
				t.extraAlias = map[string]*ToolEntry{}
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
	return buildRouteTable(sm, tm, sep, 1, nil)
}

// ToolCounts returns how many tools are stored for all servers and how many of them are classified.
func (t *RouteTable) ToolCounts() (total, classified int) { return t.ToolCountsWhere(nil) }

// ToolCountsWhere is ToolCounts over the servers keep accepts (nil: all).
func (t *RouteTable) ToolCountsWhere(keep func(serverID string) bool) (total, classified int) {
	for _, e := range t.ordered {
		if keep != nil && !keep(e.SourceServerID) {
			continue
		}
		total++
		if e.IsClassified {
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
