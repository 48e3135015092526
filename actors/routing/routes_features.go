package routing

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/persistence"
)

// What the routing table knows of the backends' prompts, resources and resource templates (issue 14), built by the
// router from the stored features (discovery keeps them equal to what each backend lists) and read without locks
// by the aggregated MCP endpoint: listing them never asks a backend.
//
// Naming, decided once per table over every server that listed the feature (whether it is callable now or not, so
// that a name does not change when another server connects or goes):
//   - A prompt is exposed under the same client-safe alias rule as tools: {server}{sep}{prompt}, sanitised and
//     shortened with a hash past 64 characters; when two prompts get the same alias, the one of the server whose
//     name sorts later gets its hashed alias.
//   - A resource keeps its URI when no other server lists the same URI, and a resource template its URI template
//     likewise. Where two servers list the same URI (or template), each server's copy is exposed as
//     RewriteURI(server, uri): "mcp-aggregator://{server}/" followed by the original URI, which ParseRewrittenURI
//     reverses. A template's rewrite is a template too (a literal prefix).

// RewrittenURIScheme starts the URI of a resource that several servers list under the same URI.
const RewrittenURIScheme = "mcp-aggregator"

// IsReservedURI reports whether a URI (or URI template) uses the RewrittenURIScheme (any letter case): the
// aggregator's own namespace, which no backend may list (discovery drops such resources and templates, and the
// table never holds one as a backend's key), so that mcp-aggregator://{server}/... always reaches {server}.
func IsReservedURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, ":")
	return ok && strings.EqualFold(scheme, RewrittenURIScheme)
}

// RewriteURI is the exposed URI of a backend URI (or URI template) that other servers list too.
func RewriteURI(server, uri string) string {
	return RewrittenURIScheme + "://" + url.PathEscape(server) + "/" + uri
}

// ParseRewrittenURI reverses RewriteURI: the server name and the backend's own URI; false when uri is not one.
func ParseRewrittenURI(uri string) (server, original string, ok bool) {
	rest, found := strings.CutPrefix(uri, RewrittenURIScheme+"://")
	if !found {
		return "", "", false
	}
	esc, original, found := strings.Cut(rest, "/")
	if !found || esc == "" || original == "" {
		return "", "", false
	}
	server, err := url.PathUnescape(esc)
	if err != nil {
		return "", "", false
	}
	return server, original, true
}

// PromptEntry is one backend prompt: its definition as the backend listed it (never modify it), the name the
// backend knows and the alias the MCP endpoint lists.
type PromptEntry struct {
	ServerID, ServerName string
	Name                 string
	Alias                string
	Definition           json.RawMessage
}

// ResourceEntry is one backend resource or resource template: Key is the backend's URI (or URI template), Exposed
// the one the MCP endpoint lists (Key itself unless another server lists the same key).
type ResourceEntry struct {
	ServerID, ServerName string
	Key                  string
	Exposed              string
	Definition           json.RawMessage
}

// FeatureTable is the immutable part of a RouteTable about prompts and resources; the router rebuilds it only when
// a server's features or names change, and a new RouteTable shares it otherwise.
type FeatureTable struct {
	version         uint64
	prompts         []PromptEntry // by alias
	resources       []ResourceEntry
	templates       []ResourceEntry
	promptByAlias   map[string]*PromptEntry
	promptByName    map[string][]*PromptEntry // by the backend's name, and by {server}.{prompt}
	resourceByURI   map[string]*ResourceEntry // by exposed URI
	templateByKey   map[string]*ResourceEntry // by exposed URI template
	backendResource map[[2]string]*ResourceEntry
}

// BuildFeatureTable makes the feature part of a table from the router's stored features per server.
func BuildFeatureTable(servers map[string]ServerEntry, features map[string][]persistence.Feature, sep string, version uint64) *FeatureTable {
	ft := &FeatureTable{version: version, promptByAlias: map[string]*PromptEntry{}, promptByName: map[string][]*PromptEntry{}, resourceByURI: map[string]*ResourceEntry{},
		templateByKey: map[string]*ResourceEntry{}, backendResource: map[[2]string]*ResourceEntry{}}
	keyCount := map[[2]string]int{}
	for id, list := range features {
		if _, ok := servers[id]; !ok {
			continue
		}
		for _, f := range list {
			if f.Kind != persistence.FeaturePrompt && IsReservedURI(f.Key) {
				continue // stored before discovery dropped them: never routed
			}
			switch f.Kind {
			case persistence.FeaturePrompt:
				ft.prompts = append(ft.prompts, PromptEntry{ServerID: id, ServerName: servers[id].Name, Name: f.Key, Definition: f.Definition})
			case persistence.FeatureResource:
				keyCount[[2]string{f.Kind, f.Key}]++
				ft.resources = append(ft.resources, ResourceEntry{ServerID: id, ServerName: servers[id].Name, Key: f.Key, Definition: f.Definition})
			case persistence.FeatureResourceTemplate:
				keyCount[[2]string{f.Kind, f.Key}]++
				ft.templates = append(ft.templates, ResourceEntry{ServerID: id, ServerName: servers[id].Name, Key: f.Key, Definition: f.Definition})
			}
		}
	}
	// Aliases: oldest claim first is not knowable without ids, so the order is by server name, then prompt name:
	// the same after a restart.
	slices.SortFunc(ft.prompts, func(a, b PromptEntry) int {
		if c := strings.Compare(a.ServerName, b.ServerName); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := range ft.prompts {
		p := &ft.prompts[i]
		a := Alias(p.ServerName, p.Name, sep)
		for n := 1; ft.promptByAlias[a] != nil; n++ {
			a = hashedAlias(Alias(p.ServerName, p.Name, sep), p.ServerName+"."+p.Name+strings.Repeat("#", n-1))
		}
		p.Alias = a
		ft.promptByAlias[a] = p
		ft.promptByName[p.Name] = append(ft.promptByName[p.Name], p)
		ft.promptByName[p.ServerName+"."+p.Name] = append(ft.promptByName[p.ServerName+"."+p.Name], p)
	}
	expose := func(kind string, list []ResourceEntry, by map[string]*ResourceEntry) {
		slices.SortStableFunc(list, func(a, b ResourceEntry) int {
			if c := strings.Compare(a.ServerName, b.ServerName); c != 0 {
				return c
			}
			return 0 // the backend's own order within a server
		})
		for i := range list {
			r := &list[i]
			r.Exposed = r.Key
			if keyCount[[2]string{kind, r.Key}] > 1 {
				r.Exposed = RewriteURI(r.ServerName, r.Key)
			}
			by[r.Exposed] = r
			if kind == persistence.FeatureResource {
				ft.backendResource[[2]string{r.ServerID, r.Key}] = r
			}
		}
	}
	expose(persistence.FeatureResource, ft.resources, ft.resourceByURI)
	expose(persistence.FeatureResourceTemplate, ft.templates, ft.templateByKey)
	return ft
}

var emptyFeatures = &FeatureTable{}

func (t *RouteTable) feat() *FeatureTable {
	if t.features == nil {
		return emptyFeatures
	}
	return t.features
}

// Prompts lists the prompts of callable servers (CONNECTED or DEGRADED), by alias.
func (t *RouteTable) Prompts() []*PromptEntry {
	ft := t.feat()
	out := make([]*PromptEntry, 0, len(ft.prompts))
	for i := range ft.prompts {
		if CallableStatus(t.servers[ft.prompts[i].ServerID].Status) {
			out = append(out, &ft.prompts[i])
		}
	}
	return out
}

// Resources lists the resources of callable servers.
func (t *RouteTable) Resources() []*ResourceEntry { return t.callableResources(t.feat().resources) }

// ResourceTemplates lists the resource templates of callable servers.
func (t *RouteTable) ResourceTemplates() []*ResourceEntry {
	return t.callableResources(t.feat().templates)
}

func (t *RouteTable) callableResources(list []ResourceEntry) []*ResourceEntry {
	out := make([]*ResourceEntry, 0, len(list))
	for i := range list {
		if CallableStatus(t.servers[list[i].ServerID].Status) {
			out = append(out, &list[i])
		}
	}
	return out
}

// ServerFeatures lists every stored prompt, resource and resource template of one server, callable or not.
func (t *RouteTable) ServerFeatures(id string) (prompts []*PromptEntry, resources, templates []*ResourceEntry) {
	ft := t.feat()
	for i := range ft.prompts {
		if ft.prompts[i].ServerID == id {
			prompts = append(prompts, &ft.prompts[i])
		}
	}
	for i := range ft.resources {
		if ft.resources[i].ServerID == id {
			resources = append(resources, &ft.resources[i])
		}
	}
	for i := range ft.templates {
		if ft.templates[i].ServerID == id {
			templates = append(templates, &ft.templates[i])
		}
	}
	return prompts, resources, templates
}

// Prompt finds a prompt by its alias.
func (t *RouteTable) Prompt(alias string) (*PromptEntry, bool) {
	p, ok := t.feat().promptByAlias[alias]
	return p, ok
}

// ResolvePrompt finds a prompt the way a tool name resolves: its alias, its canonical name {server}.{prompt}, or
// the backend's own name when exactly one callable server has a prompt of that name.
func (t *RouteTable) ResolvePrompt(name string) (*PromptEntry, bool) {
	if p, ok := t.Prompt(name); ok {
		return p, true
	}
	var found *PromptEntry
	for _, p := range t.feat().promptByName[name] {
		if !CallableStatus(t.servers[p.ServerID].Status) {
			continue
		}
		if found != nil {
			return nil, false // ambiguous
		}
		found = p
	}
	return found, found != nil
}

// Resource finds a listed resource by its exposed URI.
func (t *RouteTable) Resource(uri string) (*ResourceEntry, bool) {
	r, ok := t.feat().resourceByURI[uri]
	return r, ok
}

// ResourceTemplate finds a listed resource template by its exposed URI template.
func (t *RouteTable) ResourceTemplate(exposed string) (*ResourceEntry, bool) {
	r, ok := t.feat().templateByKey[exposed]
	return r, ok
}

// ExposedURI is the URI the MCP endpoint shows for a backend's URI (notifications/resources/updated): the rewritten
// one where the server's resource is listed under a rewrite, the URI itself otherwise.
func (t *RouteTable) ExposedURI(serverID, uri string) string {
	if r, ok := t.feat().backendResource[[2]string{serverID, uri}]; ok {
		return r.Exposed
	}
	return uri
}

// FeaturesVersion changes whenever the prompts, resources or templates of the table change (not with statuses).
func (t *RouteTable) FeaturesVersion() uint64 { return t.feat().version }
