package routing

import "github.com/mcpgw/aggregator/persistence"

// FeatureState is the router's state about the servers' prompts, resources and resource templates: the stored
// rows per server and the feature table made from them, rebuilt only when those rows or a server's name change
// (a status change reuses it: the table filters by status when it is read). Not safe for concurrent use.
type FeatureState struct {
	byServer map[string][]persistence.Feature
	dirty    bool
	table    *FeatureTable
	names    map[string]string // the server names the table was built with
	version  uint64
}

// Reset makes list (every server's features) the whole state.
func (f *FeatureState) Reset(list []persistence.Feature) {
	f.byServer, f.dirty = map[string][]persistence.Feature{}, true
	for _, ft := range list {
		f.byServer[ft.ServerID] = append(f.byServer[ft.ServerID], ft)
	}
}

// Set makes list a server's stored features.
func (f *FeatureState) Set(id string, list []persistence.Feature) {
	if f.byServer == nil {
		f.byServer = map[string][]persistence.Feature{}
	}
	f.dirty = true
	delete(f.byServer, id)
	for _, ft := range list {
		f.byServer[ft.ServerID] = append(f.byServer[ft.ServerID], ft)
	}
}

// Forget drops a removed server's features.
func (f *FeatureState) Forget(id string) {
	if _, ok := f.byServer[id]; ok {
		delete(f.byServer, id)
		f.dirty = true
	}
}

// Table is the feature part of the next routing table: the previous one unless something it was made from
// changed.
func (f *FeatureState) Table(servers map[string]ServerEntry, sep string) *FeatureTable {
	if !f.dirty && f.table != nil {
		for id := range f.byServer {
			if servers[id].Name != f.names[id] {
				f.dirty = true
				break
			}
		}
	}
	if f.dirty || f.table == nil {
		f.version++
		f.table = BuildFeatureTable(servers, f.byServer, sep, f.version)
		f.names = make(map[string]string, len(f.byServer))
		for id := range f.byServer {
			f.names[id] = servers[id].Name
		}
		f.dirty = false
	}
	return f.table
}
