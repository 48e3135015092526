package routing

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// ErrProfileNotFound means no profile has the name (404 PROFILE_NOT_FOUND).
var ErrProfileNotFound = errors.New("profile not found")

// ErrProfileForbidden means the caller's token is bound to profiles and asked for another one (403 FORBIDDEN).
var ErrProfileForbidden = errors.New("profile not allowed for this client")

// Curation is what the router hands BuildRouteTable beside servers and tools: each server's curation (for
// the exposed names of overridden tools) and the profiles, whose tool sets the table computes once.
type Curation struct {
	Servers  map[string]*ServerCuration
	Profiles []persistence.Profile
}

// ProfileView is a profile as a routing table holds it: its definition and which of the table's tools it selects
// (computed when the table is built, so that checking a tool against a profile on a call is one slice read).
type ProfileView struct {
	persistence.Profile
	members []bool // by ToolEntry.pos
	count   int
}

// Count is how many of the table's tools the profile holds (callable or not).
func (p *ProfileView) Count() int { return p.count }

// Scope is what a caller may see: the union of some profiles (by name). The nil Scope sees everything (admins,
// and clients whose token is bound to no profile).
type Scope []string

// Restricted reports whether the scope limits anything.
func (sc Scope) Restricted() bool { return sc != nil }

// buildProfiles computes every profile's tool set over the table's tools (after their aliases are assigned).
func (t *RouteTable) buildProfiles(rc *Curation) {
	if rc == nil || len(rc.Profiles) == 0 {
		return
	}
	t.profiles = make(map[string]*ProfileView, len(rc.Profiles))
	for _, p := range rc.Profiles {
		v := &ProfileView{Profile: p, members: make([]bool, len(t.ordered))}
		for i := range t.ordered {
			e := &t.ordered[i]
			if curation.Holds(&v.Profile, curation.ToolView{Server: e.ServerName, OriginalName: e.OriginalName, Name: e.Name, Alias: e.Alias, Skills: e.SkillIDs}) {
				v.members[i] = true
				v.count++
			}
		}
		t.profiles[p.Name] = v
		for _, c := range p.Clients {
			if t.clients == nil {
				t.clients = map[string][]string{}
			}
			if !slices.Contains(t.clients[c], p.Name) {
				t.clients[c] = append(t.clients[c], p.Name)
			}
		}
	}
	for c := range t.clients {
		sort.Strings(t.clients[c])
	}
	t.buildBindings(rc.Profiles)
}

// Profile returns a profile by name.
func (t *RouteTable) Profile(name string) (*ProfileView, bool) {
	p, ok := t.profiles[name]
	return p, ok
}

// BoundProfiles are the profiles a client token (by its name) is bound to: its scope. None: the token is not bound,
// and sees everything its scope allows.
func (t *RouteTable) BoundProfiles(client string) []string { return t.clients[client] }

// BoundProfilesOf are the profiles a caller is bound to: a static token's by its name (BoundProfiles), an OAuth
// caller's by its subject and its claims' values (Caller). None: the caller is not bound.
func (t *RouteTable) BoundProfilesOf(c Caller) []string {
	if !c.OAuth {
		return t.clients[c.Name]
	}
	return t.boundOAuth(c)
}

// ScopeFor decides what a caller sees. profile is the profile it asked for ("" none); bound is its token's profiles
// (BoundProfiles; nil for admins and unbound tokens). An unknown profile is ErrProfileNotFound; a bound caller
// asking for a profile outside its binding gets ErrProfileForbidden; a bound caller asking none sees the union of
// its profiles.
func (t *RouteTable) ScopeFor(profile string, bound []string) (Scope, error) {
	if profile != "" {
		if _, ok := t.profiles[profile]; !ok {
			return nil, fmt.Errorf("profile %q: %w", profile, ErrProfileNotFound)
		}
		if bound != nil && !slices.Contains(bound, profile) {
			return nil, fmt.Errorf("profile %q: %w", profile, ErrProfileForbidden)
		}
		return Scope{profile}, nil
	}
	if bound != nil {
		return Scope(slices.Clone(bound)), nil
	}
	return nil, nil
}

// Has reports whether the scope holds the tool (an entry of this table). An unknown profile holds nothing.
func (t *RouteTable) Has(sc Scope, e *ToolEntry) bool {
	if sc == nil {
		return true
	}
	for _, name := range sc {
		if p := t.profiles[name]; p != nil && e.pos < len(p.members) && p.members[e.pos] {
			return true
		}
	}
	return false
}

// CallableIn is Callable restricted to a scope.
func (t *RouteTable) CallableIn(sc Scope) []*ToolEntry {
	all := t.Callable()
	if sc == nil {
		return all
	}
	out := all[:0]
	for _, e := range all {
		if t.Has(sc, e) {
			out = append(out, e)
		}
	}
	return out
}

// ResolveIn is Resolve within a scope: a tool outside it is not found (404, like a tool that does not exist, so
// that a profile does not reveal what it hides).
func (t *RouteTable) ResolveIn(sc Scope, name, serverID string) (Route, error) {
	r, err := t.Resolve(name, serverID)
	if sc == nil {
		return r, err
	}
	var amb *AmbiguousToolError
	if errors.As(err, &amb) {
		// Only the candidates within the scope count: one is the answer, none is not found, and the error names
		// no server outside the scope.
		var in []*ToolEntry
		var ids []string
		for e := t.byOriginal[name]; e != nil; e = e.sameOriginal {
			if t.Has(sc, e) {
				in = append(in, e)
				ids = append(ids, e.SourceServerID)
			}
		}
		switch len(in) {
		case 0:
			return Route{}, fmt.Errorf("tool %q: %w", name, ErrToolNotFound)
		case 1:
			return t.route(in[0], StrategyLookupResolved), nil
		}
		sort.Strings(ids)
		return Route{}, &AmbiguousToolError{Name: name, ServerIDs: ids}
	}
	if err != nil {
		return r, err
	}
	if e, ok := t.tools[r.Name]; ok && t.Has(sc, e) {
		return r, nil
	}
	return Route{}, fmt.Errorf("tool %q: %w", name, ErrToolNotFound)
}

// AliasOwner returns the tool an alias (listed or secondary) names in this table, for the write-time check of an
// exposed name.
func (t *RouteTable) AliasOwner(name string) (*ToolEntry, bool) { return t.alias(name) }

// ToolsIn lists every tool of the table in a scope (callable or not), by namespaced name.
func (t *RouteTable) ToolsIn(sc Scope) []*ToolEntry {
	var out []*ToolEntry
	for i := range t.ordered {
		if e := &t.ordered[i]; t.Has(sc, e) {
			out = append(out, e)
		}
	}
	return out
}

// ServersIn are the servers a scope contains (nil for the nil scope: every server): those with at least one tool in
// it, and those a selector of its profiles names whole (a server and no tool or skill patterns), tools or not. A
// profile endpoint, and a client token bound to profiles, get the prompts, resources and templates of those
// servers only (and, through /mcp/servers/{name}, no other server).
func (t *RouteTable) ServersIn(sc Scope) map[string]bool {
	if sc == nil {
		return nil
	}
	out := map[string]bool{}
	for i := range t.ordered {
		if e := &t.ordered[i]; !out[e.SourceServerID] && t.Has(sc, e) {
			out[e.SourceServerID] = true
		}
	}
	for _, name := range sc {
		p := t.profiles[name]
		if p == nil {
			continue
		}
		for _, sel := range p.Selectors {
			if id, ok := t.byName[sel.Server]; ok && len(sel.Tools) == 0 && len(sel.Skills) == 0 {
				out[id] = true
			}
		}
	}
	return out
}

// Curated reports whether a server's curation (a filter, overrides, pinning) changes what clients are served of
// its tools: then only the table's rows (ToolIn) are what they may list and call.
func (t *RouteTable) Curated(serverID string) bool { return t.curated[serverID] }

// ToolIn finds a server's tool by its original name as clients are served it (hidden and withheld tools are not in
// the table, held ones have their approved definition, overrides applied), within a scope.
func (t *RouteTable) ToolIn(sc Scope, serverID, original string) (*ToolEntry, bool) {
	for e := t.byOriginal[original]; e != nil; e = e.sameOriginal {
		if e.SourceServerID == serverID {
			return e, t.Has(sc, e)
		}
	}
	return nil, false
}

// Caller is who asks, as profile bindings see it: a static client token (its name), or the subject and claims of
// an OAuth access token. A profile's clients bind token names and, as before bindings existed, subjects of that
// spelling; its subject and claim bindings apply to OAuth callers only, so they never catch a static token.
type Caller struct {
	Name   string
	OAuth  bool
	Claims map[string]any // the access token's claims (read only); nil for a static token
}

// buildBindings indexes the profiles' subject and claim bindings.
func (t *RouteTable) buildBindings(profiles []persistence.Profile) {
	add := func(m map[string][]string, key, profile string) {
		if !slices.Contains(m[key], profile) {
			m[key] = append(m[key], profile)
		}
	}
	for _, p := range profiles {
		for _, b := range p.Bindings {
			switch {
			case b.Subject != "":
				if t.subjects == nil {
					t.subjects = map[string][]string{}
				}
				add(t.subjects, b.Subject, p.Name)
			case b.Claim != "":
				if t.claims == nil {
					t.claims = map[string]map[string][]string{}
				}
				if t.claims[b.Claim] == nil {
					t.claims[b.Claim] = map[string][]string{}
				}
				add(t.claims[b.Claim], b.Value, p.Name)
			}
		}
	}
	for _, l := range t.subjects {
		sort.Strings(l)
	}
}

// boundOAuth is the union of the profiles bound to the caller's subject (by clients or by subject bindings) and to
// its claims' values, sorted; nil when none is (the common case costs a map read per bound claim name and no
// allocation).
func (t *RouteTable) boundOAuth(c Caller) []string {
	out := t.clients[c.Name]
	shared := out != nil // out is the table's own slice until something is added
	add := func(profiles []string) {
		for _, p := range profiles {
			if slices.Contains(out, p) {
				continue
			}
			if shared || out == nil {
				out, shared = slices.Clone(out), false
			}
			out = append(out, p)
		}
	}
	if out == nil {
		out, shared = t.subjects[c.Name], true
	} else {
		add(t.subjects[c.Name])
	}
	for name, values := range t.claims {
		v, ok := claimValue(c.Claims, name)
		if !ok {
			continue
		}
		match := func(s string) { add(values[s]) }
		switch v := v.(type) {
		case string:
			match(v)
		case []any:
			for _, x := range v {
				if s, ok := x.(string); ok {
					match(s)
				}
			}
		case []string:
			for _, s := range v {
				match(s)
			}
		}
	}
	if !shared {
		sort.Strings(out)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// claimValue finds a claim by its name, or, when no claim has that name and it holds dots, by a path into nested
// objects (Keycloak's realm_access.roles). A name such as "https://example.com/groups" is found as it is.
func claimValue(claims map[string]any, name string) (any, bool) {
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}
