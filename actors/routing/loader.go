package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mcpgw/aggregator/persistence"
)

// CatalogueStore is what a Loader reads of the store: the registrations, the curation, the stored tools, the
// profiles and the prompts and resources. persistence.Store satisfies it.
type CatalogueStore interface {
	GetServer(ctx context.Context, id string) (persistence.Server, error)
	ListServers(ctx context.Context, f persistence.ListServersFilter) ([]persistence.Server, int, error)
	ListTools(ctx context.Context, f persistence.ListToolsFilter) ([]persistence.Tool, int, error)
	ListToolOverrides(ctx context.Context, serverID string) ([]persistence.ToolOverride, error)
	ListToolPins(ctx context.Context, serverID string) (persistence.PinSet, error)
	ListProfiles(ctx context.Context) ([]persistence.Profile, error)
	ListFeatures(ctx context.Context, serverID string) ([]persistence.Feature, error)
}

// Loader reads what the served catalogue is made of and builds the served tools: a server's registration,
// curation and stored tools with the curation applied (LoadServer), or everything at once (LoadAll). It keeps no
// state of its own beyond Pins (the process's one cache of pin hashes) and is safe for concurrent use: the router
// runs it on goroutines, off its mailbox, and applies what it returns.
type Loader struct {
	Store  CatalogueStore
	Pins   *PinHashes
	Logger *slog.Logger
}

// ServerRows is one server as loaded: Found false when it is no longer registered.
type ServerRows struct {
	Found    bool
	Server   persistence.Server
	Curation *ServerCuration
	// Tools are the served tools: the stored ones with the curation applied, in their routed, compacted form.
	Tools []persistence.Tool
	// Stored are the stored tools as they are listed (what an admin reads: the tools the curation hides or
	// withholds too, the listed definitions, no overrides), ordered by name like the store lists them, in the same
	// routed, compacted form. Without curation that changes what is served they are the served rows (one slice).
	Stored []persistence.Tool
}

// LoadServer reads one server's registration, curation and stored tools and builds its served tools; prev and
// prevStored are the served and stored tools they replace (an unchanged definition keeps its routed form from
// them; they are not modified).
func (l *Loader) LoadServer(ctx context.Context, id string, prev, prevStored []persistence.Tool) (ServerRows, error) {
	var res ServerRows
	srv, err := l.Store.GetServer(ctx, id)
	if errors.Is(err, persistence.ErrNotFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Found, res.Server = true, srv
	if res.Curation, err = LoadCuration(ctx, l.Store, srv); err != nil {
		return res, err
	}
	tools, _, err := l.Store.ListTools(ctx, persistence.ListToolsFilter{ServerID: id})
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		return res, err
	}
	res.Tools = ServedTools(id, res.Curation.Serve(tools, l.Pins, l.Logger), prev)
	res.Stored = StoredTools(id, res.Curation, tools, res.Tools, prevStored)
	return res, nil
}

// StoredTools are a server's stored tools as an admin reads them, in routed, compacted form: the served rows
// themselves when the curation serves every stored tool as it is; else each stored tool served as it is (the same
// definition hash: no held change, no override) is its served row, sharing its text, and only the others get a
// compacted copy of their own (prev: the stored rows they replace, whose unchanged definitions they share). So a
// server with pinning on, whose tools are all approved, keeps its tools' text once.
func StoredTools(id string, c *ServerCuration, stored, served, prev []persistence.Tool) []persistence.Tool {
	if c.Plain() {
		return served
	}
	byID := make(map[int64]*persistence.Tool, len(served))
	for i := range served {
		byID[served[i].ID] = &served[i]
	}
	out := make([]persistence.Tool, len(stored))
	var own []persistence.Tool
	var at []int
	for i, t := range stored {
		if s := byID[t.ID]; s != nil && s.DefinitionHash == t.DefinitionHash {
			out[i] = *s
			continue
		}
		own, at = append(own, t), append(at, i)
	}
	if len(own) > 0 {
		own = ServedTools(id, own, prev)
		for k, i := range at {
			out[i] = own[k]
		}
	}
	return out
}

// LoadFeatures reads one server's prompts, resources and resource templates; found is false when the server is
// no longer registered.
func (l *Loader) LoadFeatures(ctx context.Context, id string) (list []persistence.Feature, found bool, err error) {
	list, err = l.Store.ListFeatures(ctx, id)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, false, nil
	}
	return list, true, err
}

// CurationStore is what LoadCuration reads.
type CurationStore interface {
	ListToolOverrides(ctx context.Context, serverID string) ([]persistence.ToolOverride, error)
	ListToolPins(ctx context.Context, serverID string) (persistence.PinSet, error)
}

// LoadCuration reads a server's curation (overrides always: an exposed name applies whatever the policy; pins only
// with pinning on).
func LoadCuration(ctx context.Context, store CurationStore, srv persistence.Server) (*ServerCuration, error) {
	ovs, err := store.ListToolOverrides(ctx, srv.ID)
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		return nil, fmt.Errorf("list tool overrides: %w", err)
	}
	c := NewServerCuration(srv.Policy, ovs)
	if srv.Policy.Pinning {
		set, err := store.ListToolPins(ctx, srv.ID)
		if err != nil && !errors.Is(err, persistence.ErrNotFound) {
			return nil, fmt.Errorf("list tool pins: %w", err)
		}
		c.SetPins(set)
	}
	return c, nil
}

// ServedTools is the routed, compacted form of a server's served rows; a definition that did not change keeps its
// routed form from prev (classification reloads a server many times).
func ServedTools(id string, tools, prev []persistence.Tool) []persistence.Tool {
	before := make(map[int64]*persistence.Tool, len(prev))
	for i := range prev {
		before[prev[i].ID] = &prev[i]
	}
	if len(tools) > 0 && len(prev) > 0 {
		tools = append([]persistence.Tool(nil), tools...) // Serve may return the stored rows as they are
	}
	for i, t := range tools {
		if p := before[t.ID]; p != nil && p.DefinitionHash == t.DefinitionHash {
			tools[i].Definition = p.Definition
			continue
		}
		tools[i] = RoutedTool(t)
	}
	return CompactTools(id, tools, prev)
}

// Catalogue is the whole served catalogue as read at start and after a resync.
type Catalogue struct {
	Servers map[string]ServerEntry
	Curated map[string]*ServerCuration
	Tools   map[string][]persistence.Tool
	// Stored are every server's stored tools (ServerRows.Stored).
	Stored   map[string][]persistence.Tool
	Profiles []persistence.Profile
	Features []persistence.Feature
}

// LoadAll reads the whole catalogue: every server with its curation and served tools, the profiles and the
// features.
func (l *Loader) LoadAll(ctx context.Context) (*Catalogue, error) {
	snap := &Catalogue{Servers: map[string]ServerEntry{}, Curated: map[string]*ServerCuration{}, Tools: map[string][]persistence.Tool{},
		Stored: map[string][]persistence.Tool{}}
	servers, _, err := l.Store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return nil, err
	}
	overrides, err := l.Store.ListToolOverrides(ctx, "")
	if err != nil {
		return nil, err
	}
	byServerOv := map[string][]persistence.ToolOverride{}
	for _, o := range overrides {
		byServerOv[o.ServerID] = append(byServerOv[o.ServerID], o)
	}
	for _, s := range servers {
		snap.Servers[s.ID] = ServerEntry{ID: s.ID, Name: s.Name, Status: s.Status, PerUser: s.CredentialMode == persistence.CredentialPerUser}
		c := NewServerCuration(s.Policy, byServerOv[s.ID])
		if s.Policy.Pinning {
			set, err := l.Store.ListToolPins(ctx, s.ID)
			if err != nil && !errors.Is(err, persistence.ErrNotFound) {
				return nil, err
			}
			c.SetPins(set)
		}
		snap.Curated[s.ID] = c
	}
	tools, _, err := l.Store.ListTools(ctx, persistence.ListToolsFilter{})
	if err != nil {
		return nil, err
	}
	byServer := map[string][]persistence.Tool{}
	for _, t := range tools {
		byServer[t.SourceServerID] = append(byServer[t.SourceServerID], t)
	}
	for id, list := range byServer {
		c := snap.Curated[id]
		served := c.Serve(list, l.Pins, l.Logger) // list itself when plain, else new rows
		for i := range served {
			served[i] = RoutedTool(served[i])
		}
		snap.Tools[id] = CompactTools(id, served, nil)
		snap.Stored[id] = StoredTools(id, c, list, snap.Tools[id], nil)
	}
	for id := range snap.Servers {
		if _, ok := snap.Stored[id]; !ok {
			snap.Stored[id] = nil // known, with no tools
		}
	}
	if snap.Profiles, err = l.Store.ListProfiles(ctx); err != nil {
		return nil, err
	}
	if snap.Features, err = l.Store.ListFeatures(ctx, ""); err != nil && !errors.Is(err, persistence.ErrNotFound) {
		return nil, err
	}
	return snap, nil
}
