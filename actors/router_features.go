package actors

import (
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// routerFeatures is the router's state about the servers' prompts, resources and resource templates: the stored
// rows per server and the feature table made from them, rebuilt only when those rows or a server's name change
// (a status change reuses it: the table filters by status when it is read).
type routerFeatures struct {
	byServer map[string][]persistence.Feature
	dirty    bool
	table    *routing.FeatureTable
	names    map[string]string // the server names the table was built with
	version  uint64
}

// setFeatures makes list a server's stored features in the router.
func (r *routerActor) setFeatures(id string, list []persistence.Feature) {
	if r.feats.byServer == nil {
		r.feats.byServer = map[string][]persistence.Feature{}
	}
	r.feats.dirty = true
	delete(r.feats.byServer, id)
	for _, f := range list {
		r.feats.byServer[f.ServerID] = append(r.feats.byServer[f.ServerID], f)
	}
}

// forgetFeatures drops a removed server's features.
func (r *routerActor) forgetFeatures(id string) {
	if _, ok := r.feats.byServer[id]; ok {
		delete(r.feats.byServer, id)
		r.feats.dirty = true
	}
}

// featureTable is the feature part of the next routing table: the previous one unless something it was made
// from changed.
func (r *routerActor) featureTable() *routing.FeatureTable {
	f := &r.feats
	if !f.dirty && f.table != nil {
		for id := range f.byServer {
			if r.servers[id].Name != f.names[id] {
				f.dirty = true
				break
			}
		}
	}
	if f.dirty || f.table == nil {
		f.version++
		f.table = routing.BuildFeatureTable(r.servers, f.byServer, r.sep, f.version)
		f.names = make(map[string]string, len(f.byServer))
		for id := range f.byServer {
			f.names[id] = r.servers[id].Name
		}
		f.dirty = false
	}
	return f.table
}
